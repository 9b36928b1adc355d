"""The production lane as a real process: gunicorn with one uvicorn worker, as the
Procfile's `web` line starts it, over real sockets.

Two things only a real server shows:

- A bug is an answer, not a crash: an exception nobody expected (here a non-number
  where poll reads the admission rate, so `float()` raises in
  `queue_app.services._position`) is written to the server's log with its traceback,
  and the client gets the enveloped 500 (JSON, INTERNAL_ERROR, as the schema
  documents), not an HTML page or a dropped connection. On the fast lane, and on
  Django's lane behind it in the same worker (a HEAD of the poll); and in-process on
  both lanes, where the test's own log capture sees the record and its traceback.
- Slow clients cannot starve the service: a worker is one event loop, so fifty
  connections that trickle their request line, headers or body a byte every half
  second each hold a coroutine, not the worker. Meanwhile /health and a poll answer
  within a second, again and again.
"""

import contextlib
import json
import logging
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from django.http import HttpResponse
from django.test import Client

import ticketing.asgi  # noqa: F401 (its django.setup() reconfigures logging: at import, not under caplog)
from queue_app import services, tokens
from testsupport.clients import LaneClient
from testsupport.servers import start_gunicorn, stop_gunicorn
from ticketing import store
from ticketing.tests.test_contract import Call, assert_documented

Server = tuple[str, subprocess.Popen, Path]


def _launch(env: dict[str, str], log: Path, *, workers: int = 1) -> tuple[str, subprocess.Popen]:
    """testsupport.servers.start_gunicorn, with the server's stderr (its log) kept in `log`."""
    with log.open("wb") as stderr:
        return start_gunicorn(env, workers=workers, stderr=stderr)


@pytest.fixture
def logged_server(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Server]]:
    """Start app servers whose log is a file; killed afterwards."""
    started: list[subprocess.Popen] = []

    def start(env: dict[str, str]) -> Server:
        log = tmp_path / f"server-{len(started)}.log"
        base, proc = _launch(env, log)
        started.append(proc)
        return base, proc, log

    yield start
    for proc in started:
        stop_gunicorn(proc)


# The server's own limits off: other work on this machine shares 127.0.0.1's counters.
NO_LIMITS = {"RATE_LIMIT_JOIN": "0", "RATE_LIMIT_LEAVE": "0"}


def _join(base: str, event_id: str) -> str:
    response = requests.post(f"{base}/api/queue/join", json={"eventId": event_id}, timeout=5)
    assert response.status_code == 200, response.text
    return response.json()["data"]["token"]


def _break_the_admission_rate(event_id: str) -> None:
    """A non-number where poll reads a number: `float("abc")` raises ValueError."""
    store.client().hset(store.EventKeys(event_id).meta, "admitRate", "abc")


def _assert_internal_error(status: int, content_type: str, body: bytes) -> None:
    assert status == 500, body
    assert content_type.startswith("application/json"), (content_type, body)
    assert json.loads(body) == {
        "success": False,
        "error": {"code": "INTERNAL_ERROR", "message": "Something went wrong on our side."},
    }


def _as_django(response: requests.Response) -> HttpResponse:
    """A requests answer as the Django response assert_documented reads."""
    answer = HttpResponse(response.content, status=response.status_code)
    for name, value in response.headers.items():
        answer.headers[name] = value
    return answer


def _wait_for_log(log: Path, *needles: str, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while True:
        text = log.read_text(errors="replace")
        if all(needle in text for needle in needles) or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def test_a_bug_on_the_production_lane_is_logged_and_answered_with_the_enveloped_500(
    logged_server, event
) -> None:
    base, _, log = logged_server(NO_LIMITS)
    # Joined here: a join on the server would read the server's copy of the line for its
    # first poll, which would then answer this poll from before the break.
    token = services.queue_join(event_id=event.event_id).token
    _break_the_admission_rate(event.event_id)
    path = f"/api/status/poll?token={token}&eventId={event.event_id}"

    # The fast lane serves this poll.
    response = requests.get(f"{base}{path}", timeout=5)
    _assert_internal_error(response.status_code, response.headers["Content-Type"], response.content)
    assert_documented(Call("GET", path), _as_django(response))
    text = _wait_for_log(log, "GET /api/status/poll failed", "could not convert string to float: b'abc'")
    assert "ERROR ticketing.fastlane GET /api/status/poll failed" in text, text
    assert "Traceback (most recent call last)" in text, text
    assert "ValueError: could not convert string to float: b'abc'" in text, text

    # HEAD is not the fast lane's: Django's lane in the same worker runs the poll
    # (HEAD is GET without the body), and its bug is the same logged 500 in JSON.
    response = requests.head(f"{base}{path}", timeout=5)
    assert response.status_code == 500
    assert response.headers["Content-Type"].startswith("application/json")
    text = _wait_for_log(log, "ERROR ticketing.errors HEAD /api/status/poll failed")
    assert "ERROR ticketing.errors HEAD /api/status/poll failed" in text, text
    assert text.count("ValueError: could not convert string to float: b'abc'") == 2, text


def test_a_bug_in_process_is_logged_and_answered_with_the_enveloped_500_on_both_lanes(
    lane: Client | LaneClient, event, caplog
) -> None:
    from queue_app import services

    token = services.queue_join(event_id=event.event_id).token
    _break_the_admission_rate(event.event_id)
    path = f"/api/status/poll?token={token}&eventId={event.event_id}"
    with caplog.at_level(logging.ERROR):
        response = lane.get(path)
    _assert_internal_error(response.status_code, response["Content-Type"], response.content)
    assert_documented(Call("GET", path), response)
    failed = [rec for rec in caplog.records if rec.getMessage() == "GET /api/status/poll failed"]
    assert len(failed) == 1, caplog.text
    assert failed[0].exc_info is not None and failed[0].exc_info[0] is ValueError


# --- Slow clients ----------------------------------------------------------------------

SLOW_CLIENTS = 50
TRICKLE_EVERY = 0.5
ROUNDS = 10  # the service is asked this often, each time between two bytes of every slow client


class Trickler:
    """Connections that each send one byte of their request every TRICKLE_EVERY
    seconds: half trickle the request line and headers, half send full headers of a
    join with Content-Length: 100 and trickle its body."""

    def __init__(self, base: str, event_id: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.sockets: list[socket.socket] = []
        self.pending: list[bytes] = []
        self.sent = [0] * SLOW_CLIENTS  # bytes each has sent since the start
        self.closed = 0
        self.stop = threading.Event()
        self.trickled = threading.Condition()  # notified after each byte round
        body = json.dumps({"eventId": event_id}).encode().ljust(100)
        for i in range(SLOW_CLIENTS):
            sock = socket.create_connection((host, int(port)), timeout=30)
            if i % 2 == 0:
                request = (
                    f"GET /api/status/poll?token={uuid.uuid4()}&eventId={event_id} HTTP/1.1\r\n"
                    f"Host: {host}\r\nUser-Agent: slow\r\n\r\n"
                ).encode()
            else:
                sock.sendall(
                    b"POST /api/queue/join HTTP/1.1\r\nHost: "
                    + host.encode()
                    + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                )
                request = body
            self.sockets.append(sock)
            self.pending.append(request)
        self.thread = threading.Thread(target=self._run, name="trickler", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(TRICKLE_EVERY):
            for i, sock in enumerate(self.sockets):
                if not self.pending[i]:
                    continue
                try:
                    sock.send(self.pending[i][:1])
                    self.pending[i] = self.pending[i][1:]
                    self.sent[i] += 1
                except OSError:
                    self.pending[i] = b""
                    self.closed += 1
            with self.trickled:
                self.trickled.notify_all()

    def wait_for(self, sent: int, seconds: float = 60) -> bool:
        """Until every client has sent `sent` bytes (False: one closed, or time ran out)."""
        with self.trickled:
            self.trickled.wait_for(lambda: min(self.sent) >= sent or self.closed > 0, seconds)
            return min(self.sent) >= sent

    def __enter__(self) -> "Trickler":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        for sock in self.sockets:
            sock.close()


def test_slow_clients_cannot_starve_the_service(gunicorn, event) -> None:
    # A deadline past the test's end: the trickle goes on for as long as it is watched
    # (ticketing/tests/test_edge.py shows clients that stall being cut).
    base, proc = gunicorn({"WEB_CONCURRENCY": "1", "REQUEST_READ_TIMEOUT_SEC": "120", **NO_LIMITS})
    token = _join(base, event.event_id)
    poll = f"{base}/api/status/poll?token={token}&eventId={event.event_id}"
    answers: list[tuple[str, int]] = []
    with Trickler(base, event.event_id) as slow:
        for sent in range(1, ROUNDS + 1):
            for name, url in (("health", f"{base}/health"), ("poll", poll)):
                # A request queued behind the slow clients would wait for one of them
                # to finish, which none does while the trickle goes on: it would time out.
                answers.append((name, requests.get(url, timeout=30).status_code))
            assert slow.wait_for(sent), slow.sent  # and the trickle went on meanwhile
        still_open = SLOW_CLIENTS - slow.closed
        unfinished = sum(1 for pending in slow.pending if pending)
    assert proc.poll() is None
    assert answers == [("health", 200), ("poll", 200)] * ROUNDS, answers
    # The slow clients were there all along, trickling: every one still mid-request.
    assert (still_open, unfinished) == (SLOW_CLIENTS, SLOW_CLIENTS)
    # And the poll read what the join wrote (the worker served real work).
    assert requests.get(poll, timeout=30).json()["data"]["status"] == "WAITING"


# --- A burst ---------------------------------------------------------------------------

BURST = 1000


async def _burst_of_joins(base: str, event_id: str) -> list[bytes]:
    """BURST joins at once, each on its own connection, as the seed's
    load-test-join client sends them (1,000 concurrent)."""
    import asyncio

    host, port = base.removeprefix("http://").split(":")
    body = json.dumps({"eventId": event_id}).encode()
    request = (
        f"POST /api/queue/join HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def one() -> bytes:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        answer = await reader.read()
        writer.close()
        return answer.split(b"\r\n", 1)[0] + b" " + answer.rsplit(b"\r\n\r\n", 1)[-1]

    return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(BURST))), 60)


def test_a_burst_of_a_thousand_joins_meeting_an_empty_script_cache(gunicorn, event) -> None:
    """A fast-lane worker with a thousand requests in flight, every one of them told
    NOSCRIPT (a Redis just restarted or failed over): their reloads and retries go
    out on at most the pool's connections, later ones in the next batch, instead of
    one connection each past the pool's limit and the overflow answered
    REDIS_UNAVAILABLE."""
    import asyncio

    base, proc = gunicorn({"WEB_CONCURRENCY": "1", **NO_LIMITS})
    store.client().script_flush()
    answers = asyncio.run(_burst_of_joins(base, event.event_id))
    failed = [a for a in answers if not a.startswith(b"HTTP/1.1 200")]
    assert not failed, (len(failed), failed[:3])
    assert store.client().get(store.event_keys(event.event_id).seq) == str(BURST).encode()


def _chunks(payload: bytes):
    """A body sent in chunks (Transfer-Encoding: chunked, no Content-Length)."""
    yield payload[:7]
    yield payload[7:]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf8"],  # the fast lane's, and one it hands on
)
def test_a_chunked_body_is_read_on_both_lanes(gunicorn, make_event, content_type) -> None:
    """A chunked join for another event joins that event, whichever lane reads it;
    a chunked booking (Django's lane only) is read too."""
    make_event(event_id="ktx-default-chunked")
    other = make_event()
    base, _ = gunicorn({"WEB_CONCURRENCY": "1", "EVENT_ID": "ktx-default-chunked", **NO_LIMITS})
    body = json.dumps({"eventId": other.event_id}).encode()
    resp = requests.post(
        f"{base}/api/queue/join", data=_chunks(body), headers={"Content-Type": content_type}, timeout=10
    )
    assert resp.request.headers.get("Transfer-Encoding") == "chunked"
    assert resp.status_code == 200, resp.text
    assert resp.json()["data"]["eventId"] == other.event_id
    token = resp.json()["data"]["token"]
    booking = json.dumps({"token": token, "seatCount": 1, "eventId": other.event_id}).encode()
    resp = requests.post(
        f"{base}/api/booking", data=_chunks(booking), headers={"Content-Type": content_type}, timeout=10
    )
    assert resp.json()["error"]["code"] == "NOT_ACTIVE"  # read: the token is known, not admitted yet


def test_a_chunked_body_over_the_limit_is_refused_413(gunicorn, event) -> None:
    base, _ = gunicorn({"WEB_CONCURRENCY": "1", **NO_LIMITS})
    body = json.dumps({"eventId": event.event_id, "pad": "x" * 20_000}).encode()
    resp = requests.post(
        f"{base}/api/booking", data=_chunks(body), headers={"Content-Type": "application/json"}, timeout=10
    )
    assert (resp.status_code, resp.json()["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")


ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"


async def _held_then_sent(close: bool) -> tuple[bytes, bytes]:
    """Two writes through `_Coalesced` over a real uvloop transport: what the peer
    could read before the loop turn ended, and what it read after."""
    import asyncio

    from ticketing.gunicorn_conf import _Coalesced

    loop = asyncio.get_running_loop()
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    coalesced = _Coalesced(transport, loop)
    head, body = ANSWER.split(b"\r\n\r\n")
    coalesced.write(head + b"\r\n\r\n")
    coalesced.write(body)
    try:
        before = peer.recv(4096)
    except BlockingIOError:
        before = b""
    if close:
        coalesced.close()
    # The turn ends; the held writes leave. Read until the whole answer is there
    # (and, after a close, until the end of the stream), however long that takes.
    after, ended = b"", False
    deadline = loop.time() + 30
    while (len(after) < len(ANSWER) or (close and not ended)) and loop.time() < deadline:
        await asyncio.sleep(0.01)
        with contextlib.suppress(BlockingIOError):
            while chunk := peer.recv(4096):
                after += chunk
            ended = True  # recv answered b"": the stream ended
    if not close:
        transport.close()
    peer.close()
    return before, after


@pytest.mark.parametrize("close", [False, True], ids=["kept-alive", "closed"])
def test_the_writes_of_one_loop_turn_leave_together(close) -> None:
    """A response's head and body leave as one send at the end of the turn they
    were written in (not one each as they are written); a close sends what is held
    before closing."""
    import uvloop

    before, after = uvloop.run(_held_then_sent(close))
    assert before == b""
    assert after == ANSWER


# --- Requests the protocol hands to the fast lane whole (ticketing/gunicorn_conf.py) ---


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _request(method: str, path: str, body: bytes | None = None, *extra: str) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *extra]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")


class _Answers:
    """HTTP answers read off one connection, in the order they come."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed by the server; unread: {self.buffer!r}")
        self.buffer += chunk

    def next(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
        length = int(headers.get("content-length", 0))
        while len(self.buffer) < length:
            self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), headers, body

    def closed(self) -> bool:
        """Whether the server ends the stream with nothing more."""
        return not self.buffer and self.sock.recv(65536) == b""


def test_pipelined_requests_are_answered_in_order_on_either_lane(gunicorn, event) -> None:
    """Five requests in one write on one connection, fast lane and Django's lane mixed,
    one of them refused: the answers come in the order asked, each its own. The
    connection then stays open under a client that keeps asking, past the keep-alive
    time (5 s): no timer armed by an answer given within a read closes it."""
    base, _ = gunicorn({"WEB_CONCURRENCY": "1", **NO_LIMITS})
    waiting = _join(base, event.event_id)
    join = json.dumps({"eventId": event.event_id}).encode()
    poll = f"/api/status/poll?token={waiting}&eventId={event.event_id}"
    sock = _connect(base)
    sock.sendall(
        _request("POST", "/api/queue/join", join)
        + _request("GET", "/health")
        + _request("POST", "/api/queue/join", join)
        + _request("GET", poll)
        + _request("POST", "/api/queue/join", json.dumps({"eventId": "no-such-event"}).encode())
    )
    answers = _Answers(sock)
    got = [answers.next() for _ in range(5)]
    assert [status for status, _, _ in got] == [200, 200, 200, 200, 404], got
    first, second = (json.loads(got[i][2])["data"] for i in (0, 2))
    assert tokens.issued(event.event_id, tokens.parse_token(first["token"])) + 1 == tokens.issued(
        event.event_id, tokens.parse_token(second["token"])
    )
    assert json.loads(got[1][2])["status"] == "ok"  # Django's lane, between two of the fast lane's
    assert json.loads(got[3][2])["data"]["status"] == "WAITING"
    assert json.loads(got[4][2])["error"]["code"] == "EVENT_NOT_FOUND"
    for _ in range(5):  # 7.5 s in all
        time.sleep(1.5)
        sock.sendall(_request("GET", poll))
        status, _, body = answers.next()
        assert status == 200, body
    sock.close()


def test_an_idle_connection_is_closed_the_keep_alive_time_after_its_last_answer(gunicorn, event) -> None:
    """The keep-alive time (5 s) counts from a connection's last answer, whichever
    lane gave it: asked again within it, the connection stays open past 5 s from its
    first answer; left idle, it is closed 5 s after its last, not before."""
    base, _ = gunicorn({"WEB_CONCURRENCY": "1", **NO_LIMITS})
    join = json.dumps({"eventId": event.event_id}).encode()
    sock = _connect(base)
    answers = _Answers(sock)
    for request in (_request("POST", "/api/queue/join", join), _request("GET", "/health")):
        sock.sendall(request)
        assert answers.next()[0] == 200
        time.sleep(3.5)  # 7 s since the first answer by the end
    sock.sendall(_request("POST", "/api/queue/join", join))
    assert answers.next()[0] == 200
    last = time.monotonic()
    sock.settimeout(15)
    assert answers.closed()
    assert 4.5 <= time.monotonic() - last <= 7.5
    sock.close()


def test_a_graceful_stop_answers_a_request_whose_body_is_still_coming(gunicorn, event) -> None:
    """A join half sent when the server is told to stop (SIGTERM, as a deploy does) is
    answered once the rest of it comes, with `connection: close`, and the server then
    ends: the person who was joining has a place."""
    import signal

    base, proc = gunicorn({"WEB_CONCURRENCY": "1", **NO_LIMITS})
    body = json.dumps({"eventId": event.event_id}).encode()
    sock = _connect(base)
    request = _request("POST", "/api/queue/join", body)
    sock.sendall(request[:-5])
    time.sleep(0.3)  # read by the worker: the request is held for its body
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the worker is stopping
    sock.sendall(request[-5:])
    answers = _Answers(sock)
    status, headers, payload = answers.next()
    assert status == 200, payload
    assert headers["connection"] == "close"
    token = tokens.parse_token(json.loads(payload)["data"]["token"])
    assert tokens.issued(event.event_id, token) == 1
    assert answers.closed()
    assert proc.wait(timeout=10) == 0


def test_a_join_that_waits_for_100_continue_gets_it_and_its_answer(gunicorn, event) -> None:
    """A client that sends `Expect: 100-continue` sends its body only once told to:
    the request is not held for a body that waits for the server."""
    base, _ = gunicorn({"WEB_CONCURRENCY": "1", **NO_LIMITS})
    body = json.dumps({"eventId": event.event_id}).encode()
    sock = _connect(base)
    request = _request("POST", "/api/queue/join", body, "Expect: 100-continue")
    sock.sendall(request[: -len(body)])
    answers = _Answers(sock)
    assert answers.next()[0] == 100
    sock.sendall(body)
    status, _, payload = answers.next()
    assert status == 200, payload
    assert json.loads(payload)["data"]["eventId"] == event.event_id


def test_a_join_over_the_body_limit_or_whose_client_left_changes_nothing(gunicorn, event) -> None:
    """A join over the body limit (10 KiB) is refused 413 and issues no number, whether
    it came whole (20 kB: held, then handed to the ASGI application) or past the
    protocol's high-water mark (100 kB: handed on as it comes); a client that leaves
    with its body half sent is asked nothing of. The next join is the first number."""
    base, _ = gunicorn({"WEB_CONCURRENCY": "1", **NO_LIMITS})
    for pad in (20_000, 100_000):
        large = json.dumps({"eventId": event.event_id, "pad": "x" * pad}).encode()
        resp = requests.post(
            f"{base}/api/queue/join", data=large, headers={"Content-Type": "application/json"}, timeout=10
        )
        assert (resp.status_code, resp.json()["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE"), pad
    sock = _connect(base)
    sock.sendall(_request("POST", "/api/queue/join", json.dumps({"eventId": event.event_id}).encode())[:-3])
    time.sleep(0.3)
    sock.close()
    time.sleep(0.3)
    assert tokens.issued(event.event_id, tokens.parse_token(_join(base, event.event_id))) == 1
