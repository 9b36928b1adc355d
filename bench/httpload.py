"""A small HTTP/1.1 keep-alive client on asyncio, for many simulated people in one process.

wrk cannot follow a person through a sale (poll again after the `nextPollMs` the
server answered, book when admitted), and Locust spends a core per few thousand
requests. This client is a few hundred lines less than either: a pool of keep-alive
connections shared by every simulated person, and a count of requests and bytes on
the wire per kind of request (the request line, headers and body each way), which
the capacity model needs for its network figures.
"""

import asyncio
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field

import orjson

# What a browser sends with an API call, less its cookies: the request's bytes on the
# wire are then those of a real client's request, not of a bare load tool's.
BROWSER_HEADERS = (
    "User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36\r\n"
    "Accept: application/json\r\n"
    "Accept-Language: ko-KR,ko;q=0.9,en-US;q=0.8,en;q=0.7\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
)


@dataclass
class Tally:
    """Requests, answers by status, and bytes each way, per kind of request."""

    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    statuses: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    received: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    errors: int = 0

    def copy(self) -> "Tally":
        """A frozen copy, to subtract from a later one."""
        return Tally(
            defaultdict(int, self.requests),
            defaultdict(int, self.statuses),
            defaultdict(int, self.sent),
            defaultdict(int, self.received),
            self.errors,
        )

    def since(self, before: "Tally") -> "Tally":
        """What happened between `before` and now."""

        def minus(a: dict, b: dict) -> dict:
            return defaultdict(int, {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0)})

        return Tally(
            minus(self.requests, before.requests),
            minus(self.statuses, before.statuses),
            minus(self.sent, before.sent),
            minus(self.received, before.received),
            self.errors - before.errors,
        )


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer


class Client:
    """`size` keep-alive connections to one server, shared by every caller."""

    def __init__(self, host: str, port: int, size: int = 64) -> None:
        self.host, self.port = host, port
        self.tally = Tally()
        self._idle: asyncio.Queue[_Conn | None] = asyncio.Queue()
        for _ in range(size):
            self._idle.put_nowait(None)  # connected on first use

    async def request(
        self, kind: str, method: str, path: str, body: dict | None = None
    ) -> tuple[int, dict | None]:
        """One request; (status, parsed JSON body or None). A connection the server
        closed while idle (keep-alive is 5 s) is reopened and the request sent again:
        the server never read the first copy."""
        payload = orjson.dumps(body) if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{BROWSER_HEADERS}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        raw = (head + "\r\n").encode() + payload
        conn = await self._idle.get()
        try:
            for attempt in range(2):
                if conn is None:
                    conn = _Conn(*await asyncio.open_connection(self.host, self.port))
                try:
                    conn.writer.write(raw)
                    status, answer, size = await self._read(conn.reader)
                    break
                except (asyncio.IncompleteReadError, ConnectionError):
                    conn.writer.close()
                    conn = None
                    if attempt:
                        raise
            self.tally.requests[kind] += 1
            self.tally.statuses[f"{kind} {status}"] += 1
            self.tally.sent[kind] += len(raw)
            self.tally.received[kind] += size
            return status, answer
        except Exception:
            self.tally.errors += 1
            if conn is not None:
                conn.writer.close()
                conn = None
            raise
        finally:
            self._idle.put_nowait(conn)

    @staticmethod
    async def _read(reader: asyncio.StreamReader) -> tuple[int, dict | None, int]:
        header = await reader.readuntil(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        status = int(lines[0].split()[1])
        length, chunked = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        size = len(header)
        if chunked:
            body = b""
            while True:
                size_line = await reader.readuntil(b"\r\n")
                n = int(size_line.split(b";")[0], 16)
                chunk = await reader.readexactly(n + 2)
                size += len(size_line) + n + 2
                body += chunk[:-2]
                if n == 0:
                    break
        else:
            body = await reader.readexactly(length)
            size += length
        try:
            return status, orjson.loads(body) if body[:1] == b"{" else None, size
        except orjson.JSONDecodeError:
            return status, None, size

    async def close(self) -> None:
        """Close every open connection."""
        while not self._idle.empty():
            conn = self._idle.get_nowait()
            if conn is not None:
                conn.writer.close()


async def drive(
    jobs: list, worker: callable, concurrency: int, seconds: float | None = None, rate: float | None = None
) -> float:
    """Run `worker(job)` for each job until the jobs or the seconds run out; the seconds
    it took. Closed loop (`rate` None): `concurrency` at a time, as fast as the server
    answers, so that its event loop batches many requests per turn. Open loop: jobs
    started at `rate` per second (Poisson), as a crowd sends them, at most
    `concurrency` in flight: a server that is not saturated wakes for fewer requests
    at a time, and pays more per request."""
    it = iter(jobs)
    start = time.monotonic()
    deadline = start + seconds if seconds else float("inf")
    if rate is None:

        async def one() -> None:
            for job in it:
                if time.monotonic() > deadline:
                    return
                await worker(job)

        await asyncio.gather(*(one() for _ in range(concurrency)))
        return time.monotonic() - start
    slots = asyncio.Semaphore(concurrency)
    running: set[asyncio.Task] = set()
    rng = random.Random(7)
    due = start

    async def bounded(job: object) -> None:
        async with slots:
            await worker(job)

    for job in it:
        due += rng.expovariate(rate)
        if due > deadline:
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        task = asyncio.create_task(bounded(job))
        running.add(task)
        task.add_done_callback(running.discard)
    await asyncio.gather(*running)
    return time.monotonic() - start
