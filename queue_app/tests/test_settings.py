"""Settings come from the environment; a bad value stops start-up and names itself."""

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from testsupport.servers import server_env, start_gunicorn

BASE = Path(__file__).resolve().parents[2]


def _start(**env) -> subprocess.CompletedProcess:
    # (Not the cluster run's REDIS_CLUSTER: the settings of a plain environment.)
    clean = {k: v for k, v in os.environ.items() if k not in env and k != "REDIS_CLUSTER"}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; "
            "print(s.REDIS_URL, s.ENTRY_BATCH_SIZE, s.BROKER_URL)",
        ],
        cwd=BASE,
        env={**clean, "DJANGO_SETTINGS_MODULE": "ticketing.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ENTRY_BATCH_SIZE", "seventy"),
        ("ACTIVE_USER_TTL_SEC", "0"),
        ("TOTAL_SEATS", "-3"),
        ("PORT", "http"),
        ("REDIS_URL", "localhost:6379"),
        ("RABBITMQ_URL", "rabbit"),
        ("DATABASE_URL", "nosuchdb://x"),
        ("DEBUG", "maybe"),
        ("REDIS_CLUSTER", "maybe"),
        ("TRUSTED_PROXIES", "10.0.0.300"),
        ("DRAW_SIGNING_KEY", "not base64!"),
        ("DRAW_SIGNING_KEY", base64.b64encode(bytes(31)).decode()),
        ("DRAW_SIGNING_KEY", "-----BEGIN PRIVATE KEY-----\\nAAAA\\n-----END PRIVATE KEY-----"),
        ("SITE_URL", "tickets.example.com"),
    ],
)
def test_a_bad_value_stops_start_up_naming_the_variable(name, value):
    result = _start(**{name: value})
    assert result.returncode != 0
    assert name in result.stderr, result.stderr


def test_redis_host_port_password_build_the_url():
    result = _start(REDIS_URL="", REDIS_HOST="cache.internal", REDIS_PORT="6380", REDIS_PASSWORD="p@ss")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "redis://:p%40ss@cache.internal:6380/0"


def test_the_broker_defaults_to_redis_and_takes_rabbitmq_url():
    out = _start(REDIS_URL="redis://h:1/0", RABBITMQ_URL="").stdout.split()
    assert out[2] == "redis://h:1/0"
    out = _start(REDIS_URL="redis://h:1/0", RABBITMQ_URL="amqp://guest:guest@mq:5672//").stdout.split()
    assert out[2] == "amqp://guest:guest@mq:5672//"


def test_a_redis_cluster_needs_rabbitmq_for_the_broker():
    result = _start(REDIS_URL="redis://h:1/0", REDIS_CLUSTER="true", RABBITMQ_URL="")
    assert result.returncode != 0
    assert "REDIS_CLUSTER=true needs RABBITMQ_URL" in result.stderr, result.stderr
    result = _start(REDIS_URL="redis://h:1/0", REDIS_CLUSTER="true", RABBITMQ_URL="amqp://mq:5672//")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[2] == "amqp://mq:5672//"
    result = _start(REDIS_URL="redis://h:1/0", REDIS_CLUSTER="true", RABBITMQ_URL="redis://broker:6379/0")
    assert result.returncode == 0, result.stderr  # a plain Redis of its own is a broker


def test_env_example_covers_the_seed_variables():
    names = {
        line.split("=", 1)[0].strip()
        for line in (BASE / ".env.example").read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    }
    seed = {
        "PORT",
        "NODE_ENV",
        "REDIS_HOST",
        "REDIS_PORT",
        "REDIS_PASSWORD",
        "ENTRY_BATCH_SIZE",
        "ACTIVE_USER_TTL_SEC",
        "EVENT_ID",
        "TOTAL_SEATS",
        "RABBITMQ_URL",
        "BOOKING_QUEUE",
        "DATABASE_URL",
    }
    assert seed <= names


_DRAW_KEY_SHOWN = (
    "import django; django.setup(); from django.conf import settings as s; print(s.DRAW_SIGNING_KEY.hex())"
)


def _draw_key(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in env and k != "DRAW_SIGNING_KEY"}
    return subprocess.run(
        [sys.executable, "-c", _DRAW_KEY_SHOWN],
        cwd=BASE,
        env={**clean, "DJANGO_SETTINGS_MODULE": "ticketing.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_draw_signing_key_is_read_in_base64_or_pem():
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    for given in (base64.b64encode(raw).decode(), pem, pem.replace("\n", "\\n")):
        done = _draw_key(DRAW_SIGNING_KEY=given, DEBUG="false")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[-1] == raw.hex()


def test_without_a_draw_signing_key_only_debug_starts_with_one_from_secret_key():
    refused = _draw_key(DEBUG="false", NODE_ENV="production")
    assert refused.returncode != 0
    assert "DRAW_SIGNING_KEY is unset" in refused.stderr, refused.stderr
    derived = [_draw_key(DEBUG="true", SECRET_KEY=secret) for secret in ("one", "one", "two")]
    assert all(done.returncode == 0 for done in derived), [d.stderr for d in derived]
    keys = [done.stdout.split()[-1] for done in derived]
    assert keys[0] == keys[1] != keys[2] and len(bytes.fromhex(keys[0])) == 32


def test_a_production_server_without_a_draw_signing_key_refuses_to_start(tmp_path):
    """As the Procfile runs it, DEBUG off: the server stops, saying what is missing."""
    log = tmp_path / "server.log"
    with log.open("w") as stderr, pytest.raises(pytest.fail.Exception, match="exited"):
        start_gunicorn(server_env(DRAW_SIGNING_KEY="", DEBUG="false"), stderr=stderr)
    assert "DRAW_SIGNING_KEY is unset" in log.read_text()


def test_lint_commands_run_against_named_servers_without_their_keys():
    """`make lint`'s manage.py commands reach no server: with REDIS_URL and
    DATABASE_URL set (servers of one's own) and no DRAW_SIGNING_KEY, they still run,
    as they do with nothing set."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/nowhere",
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=BASE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "No changes detected" in result.stdout


_PAYMENTS_SHOWN = (
    "import django; django.setup(); from django.conf import settings as s; print(repr(s.PAYMENTS_PROVIDER))"
)


def _payments(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PAYMENTS_", "TOSS_")) and k not in env}
    return subprocess.run(
        [sys.executable, "-c", _PAYMENTS_SHOWN],
        cwd=BASE,
        env={**clean, "DJANGO_SETTINGS_MODULE": "ticketing.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_production_server_takes_the_test_payment_provider_only_when_told_to():
    refused = _payments(DEBUG="false", PAYMENTS_PROVIDER="test")
    assert refused.returncode != 0 and "PAYMENTS_PROVIDER=test takes no money" in refused.stderr
    allowed = _payments(DEBUG="false", PAYMENTS_PROVIDER="test", PAYMENTS_ALLOW_TEST="true")
    assert allowed.returncode == 0 and allowed.stdout.strip() == "'test'", allowed.stderr
    # Unset: none in production (free seats only), the test provider under DEBUG.
    assert _payments(DEBUG="false").stdout.strip() == "''"
    assert _payments(DEBUG="true").stdout.strip() == "'test'"
    unknown = _payments(PAYMENTS_PROVIDER="paypal")
    assert unknown.returncode != 0 and "expected test, toss or nothing" in unknown.stderr


def test_toss_payments_need_both_keys():
    refused = _payments(PAYMENTS_PROVIDER="toss", TOSS_SECRET_KEY="test_sk_x")
    assert refused.returncode != 0 and "needs TOSS_SECRET_KEY and TOSS_CLIENT_KEY" in refused.stderr
    both = _payments(PAYMENTS_PROVIDER="toss", TOSS_SECRET_KEY="test_sk_x", TOSS_CLIENT_KEY="test_ck_x")
    assert both.returncode == 0 and both.stdout.strip() == "'toss'", both.stderr


def test_the_site_url_is_make_runs_under_debug_and_none_otherwise():
    shown = "import django; django.setup(); from django.conf import settings as s; print(repr(s.SITE_URL))"
    clean = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "DEBUG")}

    def site(**env: str) -> str:
        found = subprocess.run(
            [sys.executable, "-c", shown],
            cwd=BASE,
            env={
                **clean,
                "DJANGO_SETTINGS_MODULE": "ticketing.settings",
                "PAYMENTS_ALLOW_TEST": "true",
                **env,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert found.returncode == 0, found.stderr
        return found.stdout.strip()

    assert site(DEBUG="true") == "'http://127.0.0.1:8000'"
    assert site(DEBUG="false") == "''"
    assert site(DEBUG="false", SITE_URL="https://tickets.example.com/") == "'https://tickets.example.com'"
