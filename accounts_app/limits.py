"""What an account costs a script: password attempts and sign-ups, counted per client
(an IPv4 address or an IPv6 /64), password attempts per account too, and the
confirmation mails an account may have sent.

Counted by the project's limiter (lua/ratelimit.lua, ticketing/ratelimit.py), in the
Redis every app server shares, rather than by a second mechanism such as
django-axes: the counts are the same fixed windows as the join's, and they are
checked where Django checks passwords (`SignInLimits`), so every sign-in form is
limited, the admin's included, and any form added later.

The per-account limit would let a stranger lock the owner out by guessing wrong on
purpose. So a browser that has signed in to an account keeps a signed cookie
(`DEVICE_COOKIE`), and its attempts on that account are counted apart: the owner
signs in from their own browser while the account is under attack, as OWASP's
"device cookies" propose. Anyone else waits for the window to end (a minute), which
the refusal says.
"""

import hashlib
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.translation import ngettext

from ticketing import store
from ticketing.ratelimit import client_limit_call, limit_call

SIGN_IN_WINDOW_MS = 60_000  # RATE_LIMIT_SIGN_IN and RATE_LIMIT_SIGN_IN_ACCOUNT are per minute
SIGN_UP_WINDOW_MS = 3_600_000  # RATE_LIMIT_SIGN_UP is per hour
# Confirmation links one account may have sent an hour (accounts_app/confirm.py),
# the sign-up's included: an address a stranger typed is not flooded with mail.
CONFIRMATION_MAILS_PER_HOUR = 3
DEVICE_COOKIE = "sign_in_device"
DEVICE_MAX_AGE = 365 * 86_400  # a browser that signed in this year
_DEVICE_SALT = "accounts_app.limits.device"


@dataclass(frozen=True, slots=True)
class Refusal:
    message: str
    retry_after: int  # seconds until the window ends


def _wait(scope: str, who: str | HttpRequest, limit: int, window_ms: int) -> int | None:
    """Count one more for `who` (a request: its client, counted in each of its
    units, ticketing.ratelimit.client_units): None while within `limit` (0: no
    limit), else the whole seconds until the window ends."""
    if limit <= 0:
        return None
    if isinstance(who, HttpRequest):
        call = client_limit_call(scope, who.META, limit, window_ms)
    else:
        call = limit_call(store.ratelimit_key(scope, who), limit, window_ms)
    allowed, reset_ms = store.run(call)
    return None if allowed else max(1, math.ceil(reset_ms / 1000))


def _account(username: str) -> str:
    """The account a username names, as its counts are kept: a digest, so that no
    name is kept in Redis and whatever is typed makes a key of one size. Case is
    folded (sign-up refuses names that differ only by case)."""
    return hashlib.sha256(username.casefold().encode()).hexdigest()[:32]


def _device(request: HttpRequest, account: str) -> str | None:
    """This browser's id for `account`, when it signed in to it before."""
    try:
        cookie = request.COOKIES.get(DEVICE_COOKIE, "")
        kept = signing.loads(cookie, salt=_DEVICE_SALT, max_age=DEVICE_MAX_AGE)
    except signing.BadSignature:
        return None
    if not isinstance(kept, list) or len(kept) != 2 or kept[0] != account:
        return None
    return str(kept[1])


def remember_device(response: HttpResponse, username: str) -> None:
    """Mark this browser as one that signed in to `username` (one account per
    browser: the last one)."""
    value = signing.dumps([_account(username), secrets.token_hex(8)], salt=_DEVICE_SALT)
    response.set_cookie(
        DEVICE_COOKIE,
        value,
        max_age=DEVICE_MAX_AGE,
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Lax",
    )


def sign_in_refusal(request: HttpRequest, username: str) -> Refusal | None:
    """Count a password attempt, right or wrong (so a script learns nothing from
    which attempts were refused): None while the client and the account are within
    their limits. A client refused is not counted against the account."""
    wait = _wait("sign-in", request, settings.RATE_LIMIT_SIGN_IN, SIGN_IN_WINDOW_MS)
    if wait is not None:
        message = ngettext(
            "Too many sign-in attempts from your network. Try again in %(seconds)d second.",
            "Too many sign-in attempts from your network. Try again in %(seconds)d seconds.",
            wait,
        )
        return Refusal(message % {"seconds": wait}, wait)
    account = _account(username)
    device = _device(request, account)
    who = account if device is None else f"{account}:{device}"
    wait = _wait("sign-in-account", who, settings.RATE_LIMIT_SIGN_IN_ACCOUNT, SIGN_IN_WINDOW_MS)
    if wait is not None:
        message = ngettext(
            "Too many sign-in attempts for this account. Try again in %(seconds)d second, "
            "or from a browser that has signed in to it before.",
            "Too many sign-in attempts for this account. Try again in %(seconds)d seconds, "
            "or from a browser that has signed in to it before.",
            wait,
        )
        return Refusal(message % {"seconds": wait}, wait)
    return None


class SignInLimits:
    """An authentication backend that signs no one in. Listed first in
    AUTHENTICATION_BACKENDS, it counts each password attempt and, past a limit,
    stops `authenticate()` (PermissionDenied) before any backend checks the
    password: every form that signs people in is limited, the admin's included.
    The refusal is left on the request for the form to show (`views.LimitedSignIn`).
    It is not a BaseBackend: without `get_user`, Django never takes it for the
    backend a session belongs to."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, **credentials) -> None:
        if username is None:
            username = credentials.get(get_user_model().USERNAME_FIELD)
        if request is None or username is None or credentials.get("password") is None:
            return None
        refusal = sign_in_refusal(request, username)
        if refusal is not None:
            request.sign_in_refusal = refusal
            raise PermissionDenied
        return None  # the next backend checks the password

    async def aauthenticate(self, request: HttpRequest | None, **credentials) -> None:
        return await sync_to_async(self.authenticate)(request, **credentials)


def sign_in_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A sign-in page as the limits want it: a refused attempt is answered 429 with
    Retry-After, and a browser that signs in is remembered for its account."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        refusal = getattr(request, "sign_in_refusal", None)
        if refusal is not None:
            response.status_code = 429
            response["Retry-After"] = str(refusal.retry_after)
        elif request.method == "POST" and response.status_code == 302 and request.user.is_authenticated:
            remember_device(response, request.user.get_username())
        return response

    return wrapped


def sign_up_refusal(request: HttpRequest) -> Refusal | None:
    """Count a sign-up about to be made: None while the client is within its limit."""
    wait = _wait("sign-up", request, settings.RATE_LIMIT_SIGN_UP, SIGN_UP_WINDOW_MS)
    if wait is None:
        return None
    minutes = math.ceil(wait / 60)
    message = ngettext(
        "Too many sign-ups from your network. Try again in %(minutes)d minute.",
        "Too many sign-ups from your network. Try again in %(minutes)d minutes.",
        minutes,
    )
    return Refusal(message % {"minutes": minutes}, wait)


def confirmation_mail_refusal(user_id: int) -> Refusal | None:
    """Count a confirmation link about to be sent for an account."""
    wait = _wait("confirmation-mail", str(user_id), CONFIRMATION_MAILS_PER_HOUR, SIGN_UP_WINDOW_MS)
    if wait is None:
        return None
    minutes = math.ceil(wait / 60)
    message = ngettext(
        "Too many links were sent for this account. Try again in %(minutes)d minute.",
        "Too many links were sent for this account. Try again in %(minutes)d minutes.",
        minutes,
    )
    return Refusal(message % {"minutes": minutes}, wait)
