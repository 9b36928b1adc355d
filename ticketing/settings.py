"""Settings, read from the environment (and `.env` when present).

Every variable of the seed's `.env.example` is understood. A value that does not
parse stops start-up with a message naming the variable: a typo in ENTRY_BATCH_SIZE
must not silently become the default during a sale.
"""

import base64
import binascii
import datetime
import hashlib
import hmac
import ipaddress
import secrets
from pathlib import Path
from urllib.parse import quote

import environ
from django.core.exceptions import ImproperlyConfigured
from redis.maint_notifications import MaintNotificationsConfig

from ticketing import devstack

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def _int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.str(name, default="").strip() or str(default)
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a whole number") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={value}: must be at least {minimum}")
    return value


def _bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="").strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected true or false")


def _url(name: str, default: str, schemes: tuple[str, ...]) -> str:
    value = env.str(name, default="").strip() or default
    if not value.startswith(tuple(f"{s}://" for s in schemes)):
        raise ImproperlyConfigured(
            f"{name}={value!r}: expected a URL starting with one of " + ", ".join(f"{s}://" for s in schemes)
        )
    return value


def _networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    nets = []
    for part in env.list(name, default=[]):
        try:
            nets.append(ipaddress.ip_network(part.strip(), strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {part!r} is not an IP address or network") from None
    return tuple(nets)


def _secret_key() -> str:
    # A fixed fallback key would be guessable; a generated one kept under var/
    # survives restarts so sessions and CSRF cookies stay valid.
    key = env.str("SECRET_KEY", default="")
    if key:
        return key
    path = VAR_DIR / "secret_key"
    if path.is_file():
        return path.read_text().strip()
    VAR_DIR.mkdir(exist_ok=True)
    key = secrets.token_urlsafe(50)
    path.write_text(key)
    path.chmod(0o600)
    return key


# NODE_ENV is the seed's name for the same switch.
DEBUG = _bool("DEBUG", env.str("NODE_ENV", default="production") == "development")
SECRET_KEY = _secret_key()


def _until(name: str) -> float | None:
    text = env.str(name, default="")
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: {text!r} is not an ISO 8601 date and time") from None
    if moment.tzinfo is None:
        raise ImproperlyConfigured(f"{name}: {text!r} needs a time zone (Z or +09:00)")
    return moment.timestamp()


# The key queue tokens are signed with (queue_app/tokens.py); empty: one derived
# from SECRET_KEY. Every app server and worker must share it. To rotate, move the
# old key to QUEUE_TOKEN_KEY_PREVIOUS with the end of its grace period.
QUEUE_TOKEN_KEY = env.str("QUEUE_TOKEN_KEY", default="")
QUEUE_TOKEN_KEY_PREVIOUS = env.str("QUEUE_TOKEN_KEY_PREVIOUS", default="")
QUEUE_TOKEN_KEY_PREVIOUS_UNTIL = _until("QUEUE_TOKEN_KEY_PREVIOUS_UNTIL")
if QUEUE_TOKEN_KEY_PREVIOUS and QUEUE_TOKEN_KEY_PREVIOUS_UNTIL is None:
    raise ImproperlyConfigured(
        "QUEUE_TOKEN_KEY_PREVIOUS needs QUEUE_TOKEN_KEY_PREVIOUS_UNTIL: when its grace period ends"
    )
# How old each web process's copy of a line's counters may get before a poll
# refreshes it (queue_app/line.py): the most a waiting person's rank lags behind.
QUEUE_LINE_REFRESH_MS = env.int("QUEUE_LINE_REFRESH_MS", default=200)
# The most a block of arrival numbers is handed out for (queue_app/arrivals.py): a
# join sent more than this after another was answered is always behind it, whichever
# web process answered them. 0: every join takes its own number. 100 ms is within
# what people's own networks already shuffle (docs/line.md: Arrival numbers in blocks).
QUEUE_BLOCK_MS = env.int("QUEUE_BLOCK_MS", default=100)
# How long browsers and the proxy (deploy/nginx.conf) may keep a waiting room's page,
# the same for everyone not signed in: an arrival then costs no render. What changes
# on it meanwhile (a closed sale, a new message) each poll says anyway.
WAITING_ROOM_MAX_AGE = env.int("WAITING_ROOM_MAX_AGE", default=5)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# --- Behind a TLS proxy ---
# TLS ends at a proxy (nginx in docker-compose.yml, or a load balancer before it)
# that talks plain HTTP to us and says the original scheme in X-Forwarded-Proto.
# Without believing it every request looks like http: form POSTs fail CSRF's origin
# check and the secure-cookie and redirect settings cannot work. Only the proxy may
# reach the app, or a client could claim https for itself (which only harms it).
BEHIND_TLS_PROXY = _bool("BEHIND_TLS_PROXY", False)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
_tls = BEHIND_TLS_PROXY and not DEBUG
SECURE_SSL_REDIRECT = _bool("SECURE_SSL_REDIRECT", _tls)
# Asked over plain HTTP inside the network: container healthchecks, and Prometheus
# scraping a server directly (METRICS_ALLOWED_FROM guards that one).
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^metrics$"]
SESSION_COOKIE_SECURE = _bool("SESSION_COOKIE_SECURE", _tls)
CSRF_COOKIE_SECURE = _bool("CSRF_COOKIE_SECURE", _tls)
# HSTS is sent over https only. 0 here (a developer's http://localhost is never
# pinned to https); docker-compose.yml asks for a year.
SECURE_HSTS_SECONDS = _int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = _bool("SECURE_HSTS_PRELOAD", False)
# Asking browsers' preload lists to pin the domain to https is for good, and the
# domain's owner's decision (SECURE_HSTS_PRELOAD=true): check --deploy does not ask.
SILENCED_SYSTEM_CHECKS = ["security.W021"]
# Django's defaults, stated: no MIME sniffing, no framing, no full URL to other sites.
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
PORT = _int("PORT", 8000, minimum=1)
# Threads per server process for Django's lane (booking, pages, admin: see
# ticketing/asgi.py); the crowd's endpoints do not use them.
WEB_THREADS = _int("WEB_THREADS", 8, minimum=1)
# A request must arrive whole, head and body, within this many seconds of its first
# byte (of the connection's opening, for a connection's first request): a client
# that stalls is cut, a stalled body answered 408 (ticketing/gunicorn_conf.py). 10 s,
# as nginx's client_header_timeout and client_body_timeout in deploy/nginx.conf.
REQUEST_READ_TIMEOUT_SEC = _int("REQUEST_READ_TIMEOUT_SEC", 10, minimum=1)

# --- Where Redis and Postgres are -----------------------------------------------
# The environment's URLs win (REDIS_URL, or the seed's REDIS_HOST / REDIS_PORT /
# REDIS_PASSWORD; DATABASE_URL). Unset, the ones of the stack running in this
# checkout (`make run` publishes them: ticketing/devstack.py), so that a command in
# another shell acts on what is running. With neither, nothing is guessed: a
# default address could be some other server.
_stack_offline = _bool("STACK_OFFLINE", False)  # set by manage.py for commands that reach no server
_configured_redis = bool(env.str("REDIS_URL", default="").strip() or env.str("REDIS_HOST", default=""))
_configured_database = bool(env.str("DATABASE_URL", default="").strip())
_stack = None if _configured_redis and _configured_database else devstack.live()
# True when the stack's addresses were taken: the tests refuse to run on them.
STACK_ATTACHED = _stack is not None


def _not_running(name: str) -> str:
    if _stack_offline:
        return ""
    raise ImproperlyConfigured(
        f"{name} is unset and no stack is running in {BASE_DIR}: `make run` starts one "
        f"(`make test` its own for the tests), or set {name}"
    )


_redis_password = env.str("REDIS_PASSWORD", default="")
if _configured_redis:
    REDIS_URL = _url(
        "REDIS_URL",
        "redis://{auth}{host}:{port}/0".format(
            auth=f":{quote(_redis_password, safe='')}@" if _redis_password else "",
            host=env.str("REDIS_HOST", default="127.0.0.1"),
            port=_int("REDIS_PORT", 6379, minimum=1),
        ),
        ("redis", "rediss", "unix"),
    )
elif _stack and _stack.get("redis_url"):
    REDIS_URL = _stack["redis_url"]
else:
    # Commands that reach no server still load the settings: an address nothing answers.
    REDIS_URL = _not_running("REDIS_URL") or "redis://stack-not-running.invalid:6379/0"
# REDIS_URL names one node of a Redis Cluster, from which the others are found:
# ticketing/store/clients.py then uses redis-py's cluster clients (sync and asyncio).
REDIS_CLUSTER = _bool("REDIS_CLUSTER", False)

# The options of every Redis client (ticketing/store/clients.py builds its cluster clients
# with them too; django-redis' cache is not cluster aware and is not used then).
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "CONNECTION_POOL_KWARGS": {
                # A stuck Redis must fail a request in seconds, not hang a worker.
                "socket_connect_timeout": 2,
                "socket_timeout": 5,
                "health_check_interval": 30,
                "retry_on_timeout": False,
                # redis-py 8 asks every server for Redis Cloud's maintenance
                # notifications ("auto"); while it does, its asyncio pool hands out a
                # connection the server has closed instead of replacing it, and the
                # fast lane's first command on each one after a Redis restart failed.
                "maint_notifications_config": MaintNotificationsConfig(enabled=False),
            },
        },
    }
}

# --- The draw's signing key ------------------------------------------------------
# A place of a scheduled start's pre-queue gets its receipt signed with this Ed25519
# key (docs/draw.md), whose public half every draw publishes: a signed receipt proves
# what the service said of that place. So every server must share the key, and it
# must stay the same for as long as its receipts are checked (a sale, at least).
# Given as the 32-byte private key in base64, or as a PEM (PKCS #8) private key;
# `openssl genpkey -algorithm ed25519` makes one. Unset, the dev stack's own (made
# once in var/), or with DEBUG one derived from SECRET_KEY (a key that changes when
# SECRET_KEY does, and differs between servers with generated ones: for development
# only); otherwise start-up stops.


def _ed25519_key(name: str, text: str) -> bytes:
    """The private key's 32 bytes; b"" when unset."""
    text = text.strip()
    if not text:
        return b""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.replace("\\n", "\n").encode(), password=None)
        except (ValueError, TypeError):
            key = None
        if not isinstance(key, Ed25519PrivateKey):
            raise ImproperlyConfigured(f"{name}: not an unencrypted Ed25519 private key in PEM")
        return key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raw = b""
    if len(raw) != 32:
        raise ImproperlyConfigured(f"{name}: expected 32 bytes in base64 (44 characters), or PEM")
    return raw


DRAW_SIGNING_KEY = _ed25519_key("DRAW_SIGNING_KEY", env.str("DRAW_SIGNING_KEY", default=""))
if not DRAW_SIGNING_KEY and STACK_ATTACHED:
    DRAW_SIGNING_KEY = _ed25519_key("var/draw_signing_key", devstack.draw_signing_key())
if not DRAW_SIGNING_KEY and DEBUG:
    DRAW_SIGNING_KEY = hmac.new(SECRET_KEY.encode(), b"draw signing key", hashlib.sha256).digest()
if not DRAW_SIGNING_KEY and not _stack_offline:
    raise ImproperlyConfigured(
        "DRAW_SIGNING_KEY is unset: every server needs the same Ed25519 key to sign the draw's "
        "receipts (make one with `openssl genpkey -algorithm ed25519`, or 32 random bytes in base64)"
    )

# --- The waiting room --------------------------------------------------------
# 70/s = RDB 100 TPS x 0.7 safety margin (the seed's sizing rule).
ENTRY_BATCH_SIZE = _int("ENTRY_BATCH_SIZE", 70)
ACTIVE_USER_TTL_SEC = _int("ACTIVE_USER_TTL_SEC", 180, minimum=1)
# 0 = no cap beyond what rate x window admits.
MAX_ACTIVE_USERS = _int("MAX_ACTIVE_USERS", 0)
MAX_SEATS_PER_BOOKING = _int("MAX_SEATS_PER_BOOKING", 4, minimum=1)
# The event the dev stack creates when EVENT_ID is unset; the API's examples name it
# (docs/openapi.yaml), so that "Try it out" on /api/docs/ works on `make run` as sent.
EXAMPLE_EVENT_ID = "ktx-2026-chuseok"
EVENT_ID = env.str("EVENT_ID", default=EXAMPLE_EVENT_ID)
# The name `init_event` (and so `make run`) gives the default event when it creates it.
EVENT_NAME = env.str("EVENT_NAME", default="KTX Chuseok 2026")
TOTAL_SEATS = _int("TOTAL_SEATS", 100)
# A closed event's Redis data is removed this long after it closed (a day: late polls
# still read EXPIRED meanwhile); Postgres keeps its record and reservations.
EVENT_PURGE_AFTER_SECONDS = _int("EVENT_PURGE_AFTER_SECONDS", 86_400)

# Requests per client per second (the seed: join/rejoin 10, leave 5); a client is
# an IPv4 address or an IPv6 /64, counted in its /48 too (ticketing/ratelimit.py:
# client_units).
RATE_LIMIT_JOIN = _int("RATE_LIMIT_JOIN", 10)
RATE_LIMIT_LEAVE = _int("RATE_LIMIT_LEAVE", 5)
# Proof-of-work challenges per client per second (a page fetches one per join).
RATE_LIMIT_CHALLENGE = _int("RATE_LIMIT_CHALLENGE", 10)
# Bookings per client address, and per token, per second (0: off).
RATE_LIMIT_BOOKING = _int("RATE_LIMIT_BOOKING", 10)
RATE_LIMIT_BOOKING_TOKEN = _int("RATE_LIMIT_BOOKING_TOKEN", 2)
# Password guessing, on every sign-in form (the admin's too): attempts per client and
# minute, and per account and minute (a browser that signed in to the account before
# counts apart: accounts_app/limits.py). Sign-ups per client and hour: a home or an
# office signs up a few people, a script as many as it can (docs/fairness.md).
RATE_LIMIT_SIGN_IN = _int("RATE_LIMIT_SIGN_IN", 10)
RATE_LIMIT_SIGN_IN_ACCOUNT = _int("RATE_LIMIT_SIGN_IN_ACCOUNT", 10)
RATE_LIMIT_SIGN_UP = _int("RATE_LIMIT_SIGN_UP", 10)
# "Notify me" requests per client per second: a page sends one when its person asks
# (and again to change the address); each names an address to mail.
RATE_LIMIT_NOTIFY = _int("RATE_LIMIT_NOTIFY", 2)
# An IPv6 /48 (a site: 65,536 /64s, free from tunnel brokers) may do this many times
# what one client may: every limit per client, and an event's live places per address.
IPV6_48_LIMIT_FACTOR = _int("IPV6_48_LIMIT_FACTOR", 8, minimum=1)
# X-Forwarded-For is believed only when the peer is one of these.
TRUSTED_PROXIES = _networks("TRUSTED_PROXIES")

# --- Broker and booking messages ----------------------------------------------
# RABBITMQ_URL is the seed's name; unset, the broker is the same Redis.
BROKER_URL = _url("RABBITMQ_URL", REDIS_URL, ("amqp", "amqps", "pyamqp", "redis", "rediss", "memory"))
if REDIS_CLUSTER and BROKER_URL == REDIS_URL:
    # Celery's Redis transport talks to one server (multi-key commands across
    # slots, blocking pops on keys it cannot tag): it does not work on a cluster.
    # A plain Redis of its own does.
    raise ImproperlyConfigured(
        "REDIS_CLUSTER=true needs RABBITMQ_URL (amqp://..., or a plain Redis of its own): "
        "Celery's broker cannot be a Redis Cluster"
    )
BOOKING_QUEUE = env.str("BOOKING_QUEUE", default="booking.completed")

# Reconcile decides outbox entries older than this whose request never did (its
# process died, or Postgres was away). Younger ones are left to their request; were
# both to act, the unique reservation id in Postgres lets only one decide.
BOOKING_RECONCILE_GRACE_SEC = _int("BOOKING_RECONCILE_GRACE_SEC", 30, minimum=2)

CELERY_BROKER_URL = BROKER_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Payments (booking_app/payments.py) ---------------------------------------
# Which provider a priced event's buyers pay through: "test" (the built-in one: Pay
# and Decline buttons, no money moves), "toss" (Toss Payments), or "" for none
# (priced events cannot be set up). The dev stack and the tests use "test"; a
# production server refuses to start with it unless PAYMENTS_ALLOW_TEST says so.
PAYMENTS_PROVIDER = env.str("PAYMENTS_PROVIDER", default="test" if DEBUG else "")
PAYMENTS_ALLOW_TEST = _bool("PAYMENTS_ALLOW_TEST", False)
if PAYMENTS_PROVIDER not in ("", "test", "toss"):
    raise ImproperlyConfigured(f"PAYMENTS_PROVIDER={PAYMENTS_PROVIDER!r}: expected test, toss or nothing")
if PAYMENTS_PROVIDER == "test" and not DEBUG and not PAYMENTS_ALLOW_TEST:
    raise ImproperlyConfigured(
        "PAYMENTS_PROVIDER=test takes no money: a production server uses a real provider "
        "(PAYMENTS_PROVIDER=toss), or says PAYMENTS_ALLOW_TEST=true"
    )
# Toss Payments (PAYMENTS_PROVIDER=toss): the secret key the server confirms, looks
# up and refunds with, the client key of the checkout page's payment widget, and
# where its API answers (a test's stand-in points it elsewhere).
TOSS_SECRET_KEY = env.str("TOSS_SECRET_KEY", default="")
TOSS_CLIENT_KEY = env.str("TOSS_CLIENT_KEY", default="")
TOSS_API_URL = env.str("TOSS_API_URL", default="https://api.tosspayments.com").rstrip("/")
if PAYMENTS_PROVIDER == "toss" and not (TOSS_SECRET_KEY and TOSS_CLIENT_KEY):
    raise ImproperlyConfigured("PAYMENTS_PROVIDER=toss needs TOSS_SECRET_KEY and TOSS_CLIENT_KEY")
# How long a provider's answer is waited for; past it, the outcome is unknown and
# the hold's sweep looks the order up.
PAYMENTS_TIMEOUT_SEC = _int("PAYMENTS_TIMEOUT_SEC", 10, minimum=1)
# The test provider, told to answer late or to fail (for tests of those).
PAYMENTS_TEST_DELAY_MS = _int("PAYMENTS_TEST_DELAY_MS", 0)
PAYMENTS_TEST_FAIL = _bool("PAYMENTS_TEST_FAIL", False)

# --- Database ----------------------------------------------------------------
# PostgreSQL only: the seat ledger (a trigger and a CHECK), the partial unique
# indexes and the row locks the booking relies on are Postgres features.
if _configured_database:
    _database_url = env.str("DATABASE_URL").strip()
elif _stack and _stack.get("database_url"):
    _database_url = _stack["database_url"]
else:
    _database_url = _not_running("DATABASE_URL")
if _database_url:
    _database = env.db_url_config(_database_url)
    if _database["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(f"DATABASE_URL={_database_url!r}: expected postgres://...")
    _database.setdefault("OPTIONS", {}).update(
        {
            # A booking waits for Postgres at most this long (twice: it asks again on
            # a fresh connection) before it answers BOOKING_PENDING for reconcile.
            "connect_timeout": 5,
            "options": "-c statement_timeout=10000",
        }
    )
    # Under ASGI each request's sync code runs in a thread of its own: a pool
    # (psycopg's) hands connections from request to request instead of one new
    # connection per request. A connection that died is replaced. manage.py turns it
    # off: a command asks once, and hears at once when Postgres is not there.
    if _bool("DB_POOL", True):
        _database["OPTIONS"]["pool"] = {
            "min_size": _int("DB_POOL_MIN", 2),
            "max_size": _int("DB_POOL_MAX", 20, minimum=1),
            "timeout": 10,
        }
else:  # a command that reaches no server (makemigrations, collectstatic)
    _database = {"ENGINE": "django.db.backends.dummy"}
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Django --------------------------------------------------------------------
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the docs page's assets, served from here (no CDN)
    "accounts_app",
    "queue_app",
    "booking_app",
]

MIDDLEWARE = [
    # First, so that the latency it measures is the whole of Django's lane (/metrics).
    "ticketing.metrics.RequestLatencyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "ticketing.errors.ServiceTroubleMiddleware",
]

ROOT_URLCONF = "ticketing.urls"
WSGI_APPLICATION = "ticketing.wsgi.application"
ASGI_APPLICATION = "ticketing.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# The limits first: past one, authenticate() stops before a password is checked.
AUTHENTICATION_BACKENDS = ["accounts_app.limits.SignInLimits", "django.contrib.auth.backends.ModelBackend"]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Django's auth pages (accounts_app/views.py): where to sign in, and where people land after.
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "event-list"
LOGOUT_REDIRECT_URL = "event-list"

# true: an account holds a place on an account-only event only once its email
# address is confirmed, by a signed link sent to it (accounts_app/confirm.py); one
# mailbox confirms one account. Sign-up then asks for an address.
ACCOUNTS_REQUIRE_CONFIRMED_EMAIL = _bool("ACCOUNTS_REQUIRE_CONFIRMED_EMAIL", False)
# Whether an account may hold a place on an account-only event: the accounts app
# decides, the line asks it by this path (as AUTHENTICATION_BACKENDS are named), so
# the line does not depend on how accounts are confirmed.
ACCOUNT_MAY_HOLD_PLACE = "accounts_app.confirm.may_hold_place"
# An account's confirmed email address (or None), which a presale's allow-list of
# email domains reads (queue_app/presale.py): asked by path, as the gate above.
ACCOUNT_CONFIRMED_EMAIL = "accounts_app.confirm.confirmed_email"
# The status Postgres has for a booked token's reservation (HELD, CONFIRMED, ...),
# which its poll shows: the booking app reads it, the line asks by this path, so that
# the line (queue_app) never imports the booking app that depends on it.
RESERVATION_STATUS = "booking_app.selectors.reservation_status"
SEATS_TAKEN = "booking_app.selectors.seats_taken"
# The support lookup (queue_app/support.py, docs/support.md): where an operator's
# query finds tokens, each source by path as above (the booking app's knows the
# reservations); another source (notify-me's requests, say) joins the list. And the
# reservations of the tokens found.
SUPPORT_SOURCES = [
    "queue_app.support.by_token",
    "queue_app.support.by_token_prefix",
    "queue_app.support.by_receipt",
    "queue_app.support.by_account",
    "queue_app.support.by_notify_email",
    "booking_app.selectors.support_leads",
]
SUPPORT_BOOKINGS = "booking_app.selectors.support_bookings"

# --- Mail ---
# EMAIL_URL: smtp://user:password@host:25, smtp+tls://...:587 (STARTTLS),
# smtp+ssl://...:465, or consolemail:// (printed; the default). Django's backends.
_email_url = env.str("EMAIL_URL", default="").strip()
if ACCOUNTS_REQUIRE_CONFIRMED_EMAIL and not _email_url:
    raise ImproperlyConfigured(
        "ACCOUNTS_REQUIRE_CONFIRMED_EMAIL=true needs EMAIL_URL (smtp://host:port), where the "
        "confirmation links are sent; consolemail:// prints them instead"
    )
try:
    _email = environ.Env.email_url_config(_email_url or "consolemail://")
except (ValueError, KeyError, ImproperlyConfigured) as exc:
    raise ImproperlyConfigured(f"EMAIL_URL={_email_url!r}: {exc}") from None
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
EMAIL_HOST = _email["EMAIL_HOST"] or "localhost"
EMAIL_PORT = _email["EMAIL_PORT"] or 25
EMAIL_HOST_USER = _email["EMAIL_HOST_USER"] or ""
EMAIL_HOST_PASSWORD = _email["EMAIL_HOST_PASSWORD"] or ""
EMAIL_USE_TLS = _email.get("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _email.get("EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="tickets@localhost")
# A mail server that does not answer must not hold a request's thread for long.
EMAIL_TIMEOUT = _int("EMAIL_TIMEOUT", 10, minimum=1)
# How often a booking's confirmation is tried again when the mail server refuses it
# (pauses of 10 s, doubling: 5 tries span about five minutes).
CONFIRMATION_MAIL_RETRIES = _int("CONFIRMATION_MAIL_RETRIES", 5, minimum=0)
# The site's public address (https://tickets.example.com), for the links of mail sent
# outside a buyer's request: a hold confirmed by checkout's sweep or by a payment
# provider's notification. Unset: make run's address under DEBUG; otherwise such a
# confirmation is not mailed, and the booking's page says so.
SITE_URL = env.str("SITE_URL", default="").strip().rstrip("/") or ("http://127.0.0.1:8000" if DEBUG else "")
if SITE_URL and not SITE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"SITE_URL={SITE_URL!r}: expected a URL starting with http:// or https://")
# Notify me (queue_app/notify.py): a person who left an email address in the waiting
# room is mailed once their estimated wait is this short (or they are admitted): a
# few minutes, time to come back to the page.
NOTIFY_AHEAD_SECONDS = _int("NOTIFY_AHEAD_SECONDS", 180)
# Those mails per second, across every worker: a sale's front moves 70 people a
# second, and a mail server (or its provider's quota) takes far fewer. 0: no limit.
NOTIFY_MAIL_PER_SECOND = _int("NOTIFY_MAIL_PER_SECOND", 10)

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("ko", "한국어")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env.str("TIME_ZONE", default="Asia/Seoul")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every start otherwise
CSRF_FAILURE_VIEW = "ticketing.errors.csrf_failure"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# The seed's body limit (express.json({limit: '10kb'})), for every body whatever its
# type: the ASGI layer refuses a larger one (413) before Django sees it
# (ticketing/fastlane.py). No form here uploads files.
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["ticketing.parsers.JSONParser"],
    # The API identifies people by queue token, not by login: no session lookups,
    # no CSRF on the JSON endpoints.
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "ticketing.errors.drf_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Waiting room and first-come-first-served booking",
    "DESCRIPTION": (
        'Every answer is `{"success": true, "data": ...}` or `{"success": false, "error": '
        '{"code", "message"}}`. Clients branch on `error.code`. `eventId` defaults to the '
        "configured event everywhere."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    # A join's and a rejoin's status: one choice set, named once.
    "ENUM_NAME_OVERRIDES": {"PlaceStatusEnum": ["WAITING", "ACTIVE"]},
}

# --- Metrics and logs ---
# /metrics (ticketing/metrics.py) answers these client addresses only, anyone else a
# 404. Empty: this machine only. The client is read as for rate limits (through
# TRUSTED_PROXIES).
METRICS_ALLOWED_FROM = _networks("METRICS_ALLOWED_FROM") or (
    ipaddress.ip_network("127.0.0.1/32"),
    ipaddress.ip_network("::1/128"),
)

# json: one JSON object per line (a log pipeline); text: key=value after the message.
LOG_FORMAT = env.str("LOG_FORMAT", default="").strip().lower() or "text"
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r}: expected text or json")

# LOG_LEVEL: what is logged; LOG_CONSOLE_LEVEL: what of it reaches the console (the
# dev stack keeps the console to warnings and writes everything to LOG_FILE).
LOG_LEVEL = env.str("LOG_LEVEL", default="").strip().upper() or "INFO"
LOG_CONSOLE_LEVEL = env.str("LOG_CONSOLE_LEVEL", default="").strip().upper() or LOG_LEVEL
LOG_FILE = env.str("LOG_FILE", default="").strip()
for _name, _level in (("LOG_LEVEL", LOG_LEVEL), ("LOG_CONSOLE_LEVEL", LOG_CONSOLE_LEVEL)):
    if _level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ImproperlyConfigured(f"{_name}={_level!r}: expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
# Under the dev stack honcho stamps each line with the time: one clock per line.
_time = "%(asctime)s " if _bool("LOG_CONSOLE_TIME", True) else ""

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {
            "()": "ticketing.logs.KeyValueFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "console": {
            "()": "ticketing.logs.KeyValueFormatter",
            "format": _time + "%(levelname)s %(name)s %(message)s",
        },
        "json": {"()": "ticketing.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "console" if LOG_FORMAT == "text" else "json",
            "level": LOG_CONSOLE_LEVEL,
        },
        **(
            {
                "file": {
                    # Reopened when logrotate moves it; every process of the stack appends.
                    "class": "logging.handlers.WatchedFileHandler",
                    "filename": LOG_FILE,
                    "formatter": LOG_FORMAT,
                }
            }
            if LOG_FILE
            else {}
        ),
    },
    "root": {"handlers": ["console", *(["file"] if LOG_FILE else [])], "level": LOG_LEVEL},
    # A client's mistake (a 4xx) is the client's: counted in /metrics, not logged as a
    # warning per request, where a crowd's 429s would hide the service's own trouble.
    "loggers": {"django.request": {"level": "ERROR"}},
}
