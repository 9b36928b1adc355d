"""Floods of hostile clients against a running server, and what ordinary requests see
while they hold.

    .venv/bin/python bench/floods.py slow --url http://127.0.0.1:8000
    .venv/bin/python bench/floods.py slow --url http://127.0.0.1:8000 --event ktx-2026-chuseok --rounds 10
    .venv/bin/python bench/floods.py signup --url http://127.0.0.1:8000 -n 40

`signup`: sign-ups from one address, as fast as they go (bench/signup.py).

`slow`: requests that stall. For each kind of body (JSON, a form, multipart, chunked)
BODIES connections send their head and part of their body, then nothing more: half
declare a body within the server's limit (10 KB) and send half of it, half declare
1 MB and send 11 KB (as the 16 multipart sign-ins that once held every Django thread
did). HEADS more connections send part of a head, or nothing. A stalled request the
server answers or cuts is counted and sent again half a second later, as an attacker
would, so the flood holds for as long as the measurement runs. Meanwhile /health,
the event list page, a join and a booking are asked ROUNDS times, each on a new
connection, and the table gives how long each took and what the server did to the
stalled requests (413 at once for a body declared over the limit; 408, or a closed
connection for a head, at the server's deadline).

A booking needs a place in its booking window: before the flood the script joins
ROUNDS times and polls until the admission tick (Celery beat, as `make run` runs it)
has admitted them all.

The flood's requests and the measurement are also what the test of the server's
edge sends (ticketing/tests/test_edge.py).
"""

import argparse
import contextlib
import select
import socket
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests

BODY_KINDS = ("json", "form", "multipart", "chunked")
WITHIN = 8_000  # a declared body under the server's 10 KB limit; half of it is sent
OVER = 1_000_000  # a declared body over it, after which...
OVER_SENT = 11 * 1024  # ...this much is sent (the finding: a 1 MB multipart, 11 KB sent)
BOUNDARY = "----flood" + uuid.uuid4().hex[:8]
# A sign-in form is read by Django's CSRF check only when the request carries a CSRF
# cookie (any 32 letters and digits will do): an attacker sends one.
CSRF_COOKIE = f"Cookie: csrftoken={uuid.uuid4().hex}\r\n"


@dataclass(frozen=True)
class Stall:
    """One stalled request: what its connection sends before it stops."""

    kind: str  # a body kind, or "head"
    within: bool  # a body: declared within the server's limit (else over it)
    sent: bytes


FORM = "application/x-www-form-urlencoded"


def _body_stall(kind: str, host: str, event_id: str, i: int) -> Stall:
    within = i % 2 == 0
    part = WITHIN // 2 if within else OVER_SENT
    length = f"Content-Length: {WITHIN if within else OVER}\r\n"
    if kind == "json":
        path = ("/api/booking", "/api/queue/join")[i // 2 % 2]
        content_type, prefix = "application/json", f'{{"eventId": "{event_id}", "pad": "'
    elif kind == "form":
        path, content_type, prefix = "/accounts/login/", FORM, "username=x&password="
    elif kind == "multipart":
        path, content_type = "/accounts/login/", f"multipart/form-data; boundary={BOUNDARY}"
        prefix = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="username"\r\n\r\nx\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="password"\r\n\r\n'
        )
    else:  # chunked: no length declared, and the last chunk never comes
        path = ("/api/booking", "/accounts/login/", "/api/queue/join")[i // 2 % 3]
        content_type = FORM if path.startswith("/accounts") else "application/json"
        prefix, length = "", "Transfer-Encoding: chunked\r\n"
    data = prefix.encode().ljust(part, b"x")
    if kind == "chunked":
        pieces = [data[at : at + 4096] for at in range(0, len(data), 4096)]
        data = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    cookie = CSRF_COOKIE if path.startswith("/accounts") else ""
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n{cookie}{length}\r\n"
    return Stall(kind, within, head.encode() + data)


def _head_stall(host: str, i: int) -> Stall:
    """Part of a head: a request line and half a header, half a request line, or
    nothing at all."""
    sent = (
        f"GET / HTTP/1.1\r\nHost: {host}\r\nAccept: te".encode(),
        f"POST /api/booking HTTP/1.1\r\nHost: {host}\r\nContent-Len".encode(),
        b"GET /health HTT",
        b"",
    )[i % 4]
    return Stall("head", False, sent)


def slow_requests(base: str, event_id: str, *, bodies: int = 32, heads: int = 50) -> list[Stall]:
    """`bodies` stalled bodies of each kind and `heads` stalled heads."""
    host = urlsplit(base).netloc
    found = [_body_stall(kind, host, event_id, i) for kind in BODY_KINDS for i in range(bodies)]
    return found + [_head_stall(host, i) for i in range(heads)]


class Flood:
    """Stalled requests held open against `base`. What the server did to each
    (its answer's status, or "closed") is counted in `outcomes` by (kind, within);
    with `hold`, a connection it answered or closed is sent again AGAIN_AFTER
    seconds later: the flood keeps its size without becoming a flood of fast
    requests."""

    AGAIN_AFTER = 0.5

    def __init__(self, base: str, stalls: list[Stall], *, hold: bool = True) -> None:
        parts = urlsplit(base)
        self.address = (parts.hostname, parts.port or 80)
        self.stalls = stalls
        self.hold = hold
        self.open: dict[socket.socket, Stall] = {}
        self.again: list[tuple[float, Stall]] = []  # (when, stall): to send again
        self.outcomes: Counter[tuple[str, bool, str]] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="flood", daemon=True)

    def _connect(self, stall: Stall) -> None:
        sock = socket.create_connection(self.address, timeout=10)
        sock.sendall(stall.sent)
        sock.setblocking(False)
        self.open[sock] = stall

    def _watch(self) -> None:
        while not self.stop.is_set():
            ready = select.select(list(self.open), [], [], 0.05)[0] if self.open else []
            for sock in ready:
                stall = self.open.pop(sock)
                try:
                    answer = sock.recv(4096)
                except OSError:
                    answer = b""
                sock.close()
                status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed"
                self.outcomes[(stall.kind, stall.within, status)] += 1
                if self.hold:
                    self.again.append((time.monotonic() + self.AGAIN_AFTER, stall))
            now = time.monotonic()
            due = [stall for when, stall in self.again if when <= now]
            self.again = [(when, stall) for when, stall in self.again if when > now]
            for stall in due:
                try:
                    self._connect(stall)
                except OSError:
                    self.outcomes[(stall.kind, stall.within, "not connected")] += 1
            if not self.open:
                self.stop.wait(0.05)

    def settled(self) -> int:
        """How many of the stalled connections the server has answered or closed."""
        return sum(self.outcomes.values())

    def __enter__(self) -> "Flood":
        for stall in self.stalls:
            self._connect(stall)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        for sock in self.open:
            sock.close()


@dataclass(frozen=True)
class Probe:
    name: str
    status: str  # the HTTP status, or what went wrong
    seconds: float


def _timed(name: str, method: str, url: str, **kwargs) -> Probe:
    started = time.monotonic()
    try:
        status = str(requests.request(method, url, timeout=10, **kwargs).status_code)
    except requests.RequestException as exc:
        status = type(exc).__name__
    return Probe(name, status, time.monotonic() - started)


def probe(base: str, event_id: str, token: str) -> list[Probe]:
    """/health, the event list page, a join and a booking (of one seat, with
    `token`), each on a new connection."""
    return [
        _timed("health", "GET", f"{base}/health"),
        _timed("page", "GET", f"{base}/", headers={"Accept": "text/html"}),
        _timed("join", "POST", f"{base}/api/queue/join", json={"eventId": event_id}),
        _timed(
            "booking",
            "POST",
            f"{base}/api/booking",
            json={"token": token, "seatCount": 1, "eventId": event_id},
        ),
    ]


def admitted_tokens(base: str, event_id: str, n: int, seconds: float = 120) -> list[str]:
    """`n` places in their booking window: joined, then polled until the admission
    tick has admitted each."""
    tokens = []
    for _ in range(n):
        answer = requests.post(f"{base}/api/queue/join", json={"eventId": event_id}, timeout=10)
        answer.raise_for_status()
        tokens.append(answer.json()["data"]["token"])
    deadline = time.monotonic() + seconds
    waiting = set(tokens)
    while waiting:
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(waiting)} of {n} places not admitted in {seconds:.0f} s: does beat run?")
        for token in list(waiting):
            polled = requests.get(
                f"{base}/api/status/poll", params={"token": token, "eventId": event_id}, timeout=10
            ).json()["data"]
            if polled["status"] == "ACTIVE":
                waiting.discard(token)
        time.sleep(0.5)
    return tokens


def _table(probes: list[Probe], flood: Flood) -> str:
    lines = [f"{'request':<8} {'asked':>5}  {'answers':<22} {'median':>8} {'worst':>8}"]
    for name in ("health", "page", "join", "booking"):
        found = [p for p in probes if p.name == name]
        statuses = Counter(p.status for p in found)
        ms = sorted(p.seconds * 1000 for p in found)
        median, worst = f"{statistics.median(ms):.0f}ms", f"{ms[-1]:.0f}ms"
        answers = ", ".join(f"{n}x{s}" for s, n in sorted(statuses.items()))
        lines.append(f"{name:<8} {len(found):>5}  {answers:<22} {median:>8} {worst:>8}")
    lines += ["", f"{'stalled':<10} {'declared':<8} {'held':>4}  what the server did (count)"]
    held = Counter((s.kind, s.within) for s in flood.stalls)
    for (kind, within), count in held.items():
        done = {status: n for (k, w, status), n in flood.outcomes.items() if (k, w) == (kind, within)}
        declared = "" if kind == "head" else ("<10KB" if within else "1MB")
        said = ", ".join(f"{status}: {n}" for status, n in sorted(done.items())) or "nothing yet"
        lines.append(f"{kind:<10} {declared:<8} {count:>4}  {said}")
    return "\n".join(lines)


def slow(args: argparse.Namespace) -> None:
    base = args.url.rstrip("/")
    tokens = admitted_tokens(base, args.event, args.rounds)
    stalls = slow_requests(base, args.event, bodies=args.bodies, heads=args.heads)
    probes: list[Probe] = []
    with Flood(base, stalls) as flood:
        time.sleep(1)  # every stalled request is in, and the server has seen it
        for token in tokens:
            probes += probe(base, args.event, token)
        time.sleep(args.hold)
    print(f"{len(stalls)} stalled requests against {base}, for {args.hold:.0f} s after the measurement:\n")
    print(_table(probes, flood))


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/floods.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="flood", required=True)
    sl = sub.add_parser("slow", help="stalled bodies of every kind and stalled heads")
    sl.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    sl.add_argument("--event", default="ktx-2026-chuseok", help="an open event to join and book")
    sl.add_argument("--bodies", type=int, default=32, help="stalled bodies of each kind")
    sl.add_argument("--heads", type=int, default=50, help="stalled heads")
    sl.add_argument("--rounds", type=int, default=5, help="times each request is measured")
    sl.add_argument("--hold", type=float, default=12, help="seconds the flood holds after the measurement")
    sl.set_defaults(run=slow)
    su = sub.add_parser("signup", help="sign-ups from one address, as fast as they go")
    su.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    su.add_argument("-n", type=int, default=40, help="sign-ups to send (40)")
    su.add_argument("--concurrency", type=int, default=8, help="sign-ups in flight at once (8)")
    su.add_argument("--address", help="the client address to claim (X-Forwarded-For)")
    su.add_argument("--json", action="store_true", help="print the result as JSON")
    su.set_defaults(run=signup)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(args.run(args))


def signup(args: argparse.Namespace) -> int:
    import signup as flood  # bench/signup.py, beside this script

    return flood.report(flood.run(args.url.rstrip("/"), args.n, args.concurrency, args.address), args.json)


if __name__ == "__main__":
    main()
