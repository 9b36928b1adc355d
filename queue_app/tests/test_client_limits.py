"""Client limits on the production server (docs/fairness.md), behind a trusted
proxy: each request's client is the address its X-Forwarded-For names, as nginx
would send it."""

import uuid
from collections.abc import Iterator

import pytest

from conftest import ServerClient, server_env, start_gunicorn, stop_gunicorn

CHALLENGES_PER_SECOND = 3


@pytest.fixture(scope="module")
def limited_server(django_db_setup) -> Iterator[ServerClient]:
    env = server_env(RATE_LIMIT_CHALLENGE=str(CHALLENGES_PER_SECOND), TRUSTED_PROXIES="127.0.0.1")
    base, proc = start_gunicorn(env)
    yield ServerClient(base)
    stop_gunicorn(proc)


def _ipv4() -> str:
    n = uuid.uuid4().int
    return f"198.18.{n % 250}.{n // 250 % 250}"


def test_the_challenge_endpoint_is_limited_per_client(limited_server, event):
    """A script no longer stocks up on challenges: past the limit, RATE_LIMIT with
    Retry-After; another client is not affected."""
    path, ip = f"/api/queue/challenge?eventId={event.event_id}", _ipv4()
    for _ in range(CHALLENGES_PER_SECOND):
        assert limited_server.generic("GET", path, REMOTE_ADDR=ip).status_code == 200
    refused = limited_server.generic("GET", path, REMOTE_ADDR=ip)
    assert (refused.status_code, refused.json()["error"]["code"]) == (429, "RATE_LIMIT")
    assert refused["Retry-After"] == "1"
    assert limited_server.generic("GET", path, REMOTE_ADDR=_ipv4()).status_code == 200
