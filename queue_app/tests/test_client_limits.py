"""Client limits on the production server (docs/fairness.md: Who is a client),
behind a trusted proxy: each request's client is the address its X-Forwarded-For
names, as nginx would send it. An IPv6 client counts as its /64 and as its /48,
the /48 with IPV6_48_LIMIT_FACTOR times the limits; 6to4 and Teredo addresses
count as the IPv4 address they carry."""

import ipaddress
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from django.http import HttpResponse

from testsupport import CheckedThread
from testsupport.clients import ServerClient
from testsupport.servers import server_env, start_gunicorn, stop_gunicorn

CHALLENGES_PER_SECOND = 3
JOINS_PER_SECOND = 5
FACTOR = 4  # a /48 may do 4 times what a /64 may


@pytest.fixture(scope="module")
def limited_server(django_db_setup) -> Iterator[ServerClient]:
    env = server_env(
        RATE_LIMIT_CHALLENGE=str(CHALLENGES_PER_SECOND),
        RATE_LIMIT_JOIN=str(JOINS_PER_SECOND),
        IPV6_48_LIMIT_FACTOR=str(FACTOR),
        TRUSTED_PROXIES="127.0.0.1",
    )
    base, proc = start_gunicorn(env)
    yield ServerClient(base)
    stop_gunicorn(proc)


def _ipv4() -> str:
    n = uuid.uuid4().int
    return f"198.18.{n % 250}.{n // 250 % 250}"


def _site() -> str:
    """An IPv6 /48 of this test's own (its first three groups)."""
    n = uuid.uuid4().int
    return f"2001:db8:{n % 65536:x}"


def _6to4(ip: str) -> str:
    return str(ipaddress.IPv6Address(0x2002 << 112 | int(ipaddress.IPv4Address(ip)) << 80 | 1))


def _teredo(ip: str) -> str:
    """Server 192.0.2.1, a port, and the client's IPv4 address with its bits flipped."""
    server, port = int(ipaddress.IPv4Address("192.0.2.1")), uuid.uuid4().int % 65536
    flipped = ~int(ipaddress.IPv4Address(ip)) & 0xFFFFFFFF
    return str(ipaddress.IPv6Address(0x20010000 << 96 | server << 64 | port << 32 | flipped))


def _join(server: ServerClient, event_id: str, address: str) -> HttpResponse:
    return server.generic(
        "POST", "/api/queue/join", f'{{"eventId": "{event_id}"}}', "application/json", REMOTE_ADDR=address
    )


def _joins_at_once(server: ServerClient, event_id: str, addresses: list[str]) -> list[tuple]:
    """One join from each address, a thread each, released together: (status, "OK")
    or (status, error code, the cap for TOO_MANY_PLACES)."""
    start = threading.Barrier(len(addresses))
    answers: list = [None] * len(addresses)

    def send(i: int, address: str) -> None:
        start.wait(timeout=30)
        answer = _join(server, event_id, address)
        error = answer.json().get("error")
        answers[i] = (answer.status_code, "OK") if error is None else (answer.status_code, error["code"])
        if error is not None and error["code"] == "TOO_MANY_PLACES":
            answers[i] += (error["most"],)

    threads = [
        CheckedThread(target=send, args=(i, a), name=f"join from {a}") for i, a in enumerate(addresses)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


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


def test_joins_from_many_64s_of_one_48_are_limited_as_its_48(limited_server, event):
    """Thirty /64s of one /48 join at once, one join each: no /64 is past its own
    limit (5 a second), and the /48 gets its own, 4 times that."""
    site = _site()
    answers = _joins_at_once(limited_server, event.event_id, [f"{site}:{i:x}::1" for i in range(30)])
    assert Counter(answers) == {(200, "OK"): JOINS_PER_SECOND * FACTOR, (429, "RATE_LIMIT"): 10}
    assert _join(limited_server, event.event_id, f"{_site()}:1::1").status_code == 200  # another /48


def test_one_48_holds_at_most_its_share_of_places(limited_server, make_event):
    """The review's script: 2 places per address, 40 joins at once from 20 /64s of
    one /48 (two each). It held 40 places; its /48 now holds 2 x 4."""
    event = make_event(max_places_per_address=2)
    site = _site()
    addresses = [f"{site}:{i:x}::{n + 1:x}" for i in range(20) for n in range(2)]
    answers = Counter(_joins_at_once(limited_server, event.event_id, addresses))
    # (The /48's join rate, 20 a second, refuses some too; at least 20 are let through.)
    assert answers[(200, "OK")] == 2 * FACTOR
    assert answers[(429, "TOO_MANY_PLACES", 2 * FACTOR)] >= JOINS_PER_SECOND * FACTOR - 2 * FACTOR
    assert answers.keys() <= {(200, "OK"), (429, "TOO_MANY_PLACES", 2 * FACTOR), (429, "RATE_LIMIT")}
    assert _join(limited_server, event.event_id, f"{_site()}:1::1").status_code == 200  # another /48


def test_6to4_and_teredo_count_as_the_ipv4_address_they_carry(limited_server, make_event):
    """One IPv4 address, its 6to4 /48 and its Teredo addresses are one client: for
    the places per address and for the rate limits."""
    event = make_event(max_places_per_address=2)
    ip = _ipv4()
    assert _join(limited_server, event.event_id, ip).status_code == 200
    assert _join(limited_server, event.event_id, _6to4(ip)).status_code == 200
    refused = _join(limited_server, event.event_id, _teredo(ip))
    assert (refused.status_code, refused.json()["error"]["code"]) == (429, "TOO_MANY_PLACES")
    # The challenge tells each of them of the cap (before any proof of work), and
    # counts them as one client for its rate limit.
    path = f"/api/queue/challenge?eventId={event.event_id}"
    codes = [
        limited_server.generic("GET", path, REMOTE_ADDR=address).json()["error"]["code"]
        for address in (ip, _6to4(ip), _teredo(ip), _teredo(ip))
    ]
    assert codes == ["TOO_MANY_PLACES"] * 3 + ["RATE_LIMIT"]


def test_a_client_spraying_three_processes_gets_its_limit_once(django_db_setup, event):
    """Three app servers, one client joining as fast as 24 connections go, 8 on each:
    each process lets through what it leased for the client, and every lease was
    counted in Redis first, so within one window the client gets at most its limit
    (40), and at least what the other processes' unused leases leave (a quarter of
    the limit each)."""
    limit = 40
    env = server_env(RATE_LIMIT_JOIN=str(limit), TRUSTED_PROXIES="127.0.0.1")
    started = [start_gunicorn(env) for _ in range(3)]
    ip = _ipv4()
    answers: list[tuple[float, int]] = []
    go = threading.Barrier(24)

    def spray(base: str) -> None:
        server = ServerClient(base)
        go.wait(timeout=30)
        until = time.monotonic() + 0.5
        while time.monotonic() < until:
            status = _join(server, event.event_id, ip).status_code
            answers.append((time.monotonic(), status))

    try:
        first = time.monotonic()
        threads = [CheckedThread(target=spray, args=(started[i % 3][0],)) for i in range(24)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for _, proc in started:
            stop_gunicorn(proc)
    # The counter's window opened after `first`: what was answered within a second of
    # it was let through in that window.
    within = Counter(status for at, status in answers if at < first + 0.95)
    assert within.keys() <= {200, 429}
    assert sum(within.values()) > 3 * limit, within  # each process alone would pass the limit
    assert limit - 3 * limit // 4 <= within[200] <= limit, within
