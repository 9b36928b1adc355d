"""The server's edge, through gunicorn as the Procfile runs it: requests that stall,
that are too large, malformed or addressed to another host, and a Redis that
restarts under it.

- Bodies: the ASGI layer reads every body whole, within the limit (10 KB), before
  anything reaches Django's thread pool, so a client that stalls holds a coroutine,
  never a thread: under 32 stalled bodies of each kind (JSON, form, multipart,
  chunked) and 50 stalled heads, /health, a page, a join and a booking each answer
  within a second. A body declared or sent over the limit is refused 413 at once.
- Deadlines: a request must arrive whole within REQUEST_READ_TIMEOUT_SEC; a stalled
  body is answered 408 and its connection closed, a stalled head is closed.
- Malformed HTTP is answered in the envelope (not uvicorn's plain text).
- A Host outside ALLOWED_HOSTS gets the same answer on both lanes.
- The first requests after Redis restarts succeed (a connection the old server
  closed is replaced before it is used).
"""

import json
import socket
import time
import uuid
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.test import override_settings

from bench.floods import BODY_KINDS, Flood, probe, slow_requests
from queue_app import admission
from testsupport.servers import server_env
from ticketing import servers

ENVELOPE_TOO_LARGE = {
    "success": False,
    "error": {"code": "PAYLOAD_TOO_LARGE", "message": "The request body is too large."},
}


def _admitted(base: str, event, n: int) -> list[str]:
    """`n` places of `event`, joined through the server and admitted by one tick."""
    tokens = []
    for _ in range(n):
        answer = requests.post(f"{base}/api/queue/join", json={"eventId": event.event_id}, timeout=10)
        assert answer.status_code == 200, answer.text
        tokens.append(answer.json()["data"]["token"])
    tick = admission.event_admit(event.event_id)
    assert tick.outcome == "ADMITTED" and tick.admitted == n, tick
    return tokens


def _assert_answered_in_time(probes) -> None:
    slow = [(p.name, p.status, round(p.seconds, 2)) for p in probes if p.seconds >= 1 or p.status != "200"]
    assert not slow, slow


@pytest.mark.django_db(transaction=True)
def test_stalled_bodies_of_every_kind_and_stalled_heads_hold_no_thread(gunicorn, make_event) -> None:
    """Two workers of eight threads each, as production runs them on this machine;
    32 stalled bodies of each kind (half declaring 1 MB after 11 KB sent) and 50
    stalled heads, held for as long as the measurement runs."""
    rounds = 3
    event = make_event(admit_per_second=rounds)
    # The deadline is far: the flood holds while it is measured, however slow the machine.
    base, _ = gunicorn(server_env(WEB_CONCURRENCY="2", REQUEST_READ_TIMEOUT_SEC="60"))
    tokens = _admitted(base, event, rounds)
    stalls = slow_requests(base, event.event_id, bodies=32, heads=50)
    assert len(stalls) == 4 * 32 + 50
    with Flood(base, stalls) as flood:
        probes = [answer for token in tokens for answer in probe(base, event.event_id, token)]
    _assert_answered_in_time(probes)
    # The bodies declared over the limit were refused at once, each time they came.
    for kind in BODY_KINDS:
        over = sum(n for (k, within, status), n in flood.outcomes.items() if k == kind and not within)
        assert over >= 16 and flood.outcomes[(kind, False, "413")] == over, flood.outcomes
    # Nothing else was answered or cut while the measurement ran.
    assert flood.settled() == sum(n for (_, within, _), n in flood.outcomes.items() if not within)


@pytest.mark.django_db(transaction=True)
def test_sixteen_stalled_multipart_sign_ins_do_not_delay_a_booking(gunicorn, make_event) -> None:
    """The finding as it was made: 16 connections POST /accounts/login/ as
    multipart/form-data (with a CSRF cookie, so that Django reads the form) with
    Content-Length 1 MB, send 11 KB and stop. They are refused 413 in the envelope,
    and bookings, each on a new connection (to either worker), answer within a second."""
    event = make_event(admit_per_second=5)
    base, _ = gunicorn(server_env(WEB_CONCURRENCY="2"))
    tokens = _admitted(base, event, 5)
    stalls = [s for s in slow_requests(base, event.event_id, bodies=32, heads=0) if s.kind == "multipart"]
    stalls = [s for s in stalls if not s.within]
    assert len(stalls) == 16 and all(b"Content-Length: 1000000" in s.sent for s in stalls)
    with Flood(base, stalls, hold=False) as flood:
        booked = []
        for token in tokens:
            started = time.monotonic()
            answer = _book(base, event.event_id, token)
            booked.append((answer.status_code, answer.json()["data"]["status"], time.monotonic() - started))
        answered = _wait(lambda: flood.settled() == 16)
    assert [(status, outcome) for status, outcome, _ in booked] == [(200, "CONFIRMED")] * 5
    assert max(took for _, _, took in booked) < 1, booked
    assert answered and flood.outcomes == {("multipart", False, "413"): 16}, flood.outcomes
    # And the 413 is the envelope, the same as for a JSON body too large.
    with _connection(base) as sock:
        sock.sendall(stalls[0].sent)
        status, headers, body = _read_answer(sock)
    assert (status, headers["content-type"]) == (413, "application/json")
    assert json.loads(body) == ENVELOPE_TOO_LARGE


def test_a_stalled_request_is_cut_at_its_deadline(gunicorn) -> None:
    """With a deadline of 1 s: a stalled body (within the limit) is answered 408 in
    the envelope and closed, whatever its kind and lane; a stalled head, or a
    connection that sends nothing, is closed."""
    base, _ = gunicorn(server_env(REQUEST_READ_TIMEOUT_SEC="1"))
    stalls = [s for s in slow_requests(base, "any", bodies=6, heads=8) if s.within or s.kind == "head"]
    with Flood(base, stalls, hold=False) as flood:
        settled = _wait(lambda: flood.settled() == len(stalls), seconds=30)
    expected = {(kind, True, "408"): 3 for kind in BODY_KINDS} | {("head", False, "closed"): 8}
    assert settled and flood.outcomes == expected, flood.outcomes
    with _connection(base) as sock:
        sock.sendall(stalls[0].sent)
        status, headers, body = _read_answer(sock)
        assert sock.recv(1) == b""  # and closed
    assert (status, headers["content-type"], headers["connection"]) == (408, "application/json", "close")
    assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"


# --- Malformed requests and foreign hosts, on the session's production server ----------

MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET /api/status/poll HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"POST /api/queue/join HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
    b"POST /api/booking HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
    b"GET /api/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX: \x01\r\n\r\n",
]


@pytest.mark.parametrize("request_bytes", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_http_is_answered_in_the_envelope(production_server, request_bytes: bytes) -> None:
    with _connection(production_server) as sock:
        sock.sendall(request_bytes)
        status, headers, body = _read_answer(sock)
    assert (status, headers["content-type"]) == (400, "application/json"), body
    assert json.loads(body) == {
        "success": False,
        "error": {"code": "BAD_REQUEST", "message": "The request is not valid HTTP."},
    }


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("POST", "/api/queue/join", {}),
        ("POST", "/api/queue/rejoin", {"token": str(uuid.uuid4())}),
        ("GET", f"/api/status/poll?token={uuid.uuid4()}", None),
        ("DELETE", f"/api/queue/leave?token={uuid.uuid4()}", None),
        ("GET", "/api/queue/challenge", None),
    ],
)
def test_a_foreign_host_is_refused_alike_on_both_lanes(
    production_server, event, snapshot, method: str, path: str, body
) -> None:
    """Each fast-lane route answers a Host outside ALLOWED_HOSTS as Django's lane
    answers it (the booking, Django's only) and changes nothing."""
    url = production_server + path
    if body is None:
        url += ("&" if "?" in path else "?") + f"eventId={event.event_id}"
    else:
        body = {**body, "eventId": event.event_id}
    foreign = {"Host": "tickets.example.org"}
    before = snapshot(event.event_id)
    fast = requests.request(method, url, json=body, headers=foreign, timeout=10)
    django = requests.post(f"{production_server}/api/booking", json={}, headers=foreign, timeout=10)
    assert django.status_code == 400, django.text
    assert (fast.status_code, fast.content) == (django.status_code, django.content)
    assert fast.headers["content-type"] == django.headers["content-type"] == "application/json"
    assert snapshot(event.event_id) == before
    # The same request with an allowed Host is served.
    assert requests.request(method, url, json=body, timeout=10).status_code != 400


# --- Redis restarts ------------------------------------------------------------------


@pytest.fixture
def restartable_redis(tmp_path: Path):
    """A redis-server of this test's own, keeping its data in an append-only file so
    that it comes back with it, used by this process too."""
    proc, port = servers.start_redis(tmp_path, persistent=True)
    url = f"redis://127.0.0.1:{port}/0"
    caches = {"default": {**settings.CACHES["default"], "LOCATION": url}}
    server = {"proc": proc, "url": url}

    def restart() -> None:
        servers.stop_redis(server["proc"])
        server["proc"], _ = servers.start_redis(tmp_path, persistent=True, port=port)

    server["restart"] = restart
    with override_settings(CACHES=caches, REDIS_URL=url, REDIS_CLUSTER=False):
        yield server
    servers.stop_redis(server["proc"])


@pytest.mark.single_redis  # restarts a redis-server of its own
@pytest.mark.django_db(transaction=True)
def test_every_request_after_a_redis_restart_succeeds(gunicorn, restartable_redis, make_event) -> None:
    """Both workers have used their connections to Redis (fast lane and Django's);
    Redis restarts; once it answers again, every request succeeds, the first of
    each worker included."""
    event = make_event(admit_per_second=40)
    base, _ = gunicorn(server_env(WEB_CONCURRENCY="2", REDIS_URL=restartable_redis["url"]))
    tokens = _admitted(base, event, 40)
    for token in tokens[:10]:  # Django's lane's connections, in both workers
        booked = _book(base, event.event_id, token)
        assert booked.status_code == 200, booked.text
    restartable_redis["restart"]()
    answers = []
    for token in tokens[10:]:  # each on a new connection: both workers get some
        poll = f"{base}/api/status/poll?token={token}&eventId={event.event_id}"
        answers.append(("poll", requests.get(poll, timeout=10).status_code))
        joined = requests.post(f"{base}/api/queue/join", json={"eventId": event.event_id}, timeout=10)
        answers.append(("join", joined.status_code))
        booked = _book(base, event.event_id, token)
        answers.append(("booking", booked.status_code))
    assert [a for a in answers if a[1] != 200] == [], answers


# --- Helpers -------------------------------------------------------------------------


def _book(base: str, event_id: str, token: str) -> requests.Response:
    booking = {"token": token, "seatCount": 1, "eventId": event_id}
    return requests.post(f"{base}/api/booking", json=booking, timeout=10)


def _wait(condition, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _connection(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP answer with a Content-Length, read off the socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body
