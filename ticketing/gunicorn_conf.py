"""gunicorn settings, from the environment (PORT, HOST, WEB_CONCURRENCY).

gunicorn runs the ASGI application (ticketing/asgi.py) in uvicorn workers (the
uvicorn-worker package): uvloop and httptools, the writes of each loop turn sent
together. Each worker is one event loop, so a slow client holds a coroutine, not a
thread, and the crowd's endpoints answer from the fast lane without Django's
request cycle (docs/benchmarks.md).
"""

import asyncio
import os

import orjson
from django.conf import settings
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn_worker import UvicornWorker

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 2))
worker_class = "ticketing.gunicorn_conf.Worker"
keepalive = 5
accesslog = os.environ.get("ACCESS_LOG") or None
# gunicorn's control socket sits at one path per user (~/.gunicorn/gunicorn.ctl):
# two servers on one machine (a test server, a benchmark) would take it from each
# other. Nothing here uses it.
control_socket_disable = True


class _Coalesced:
    """A connection's transport whose writes of one event-loop turn leave together.

    uvicorn writes a response's head and its body as two `write`s, each a send(2)
    of its own and, with TCP_NODELAY, a segment of its own for the client to read:
    on a poll, a fifth of the worker's CPU (docs/benchmarks.md). Held until the
    turn ends, they go out as one writev(2) and one segment. Nothing waits longer
    than the turn it was written in, and a close sends what is held first.
    """

    __slots__ = ("transport", "held", "loop")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.held: list[bytes] = []
        self.loop = loop

    def write(self, data: bytes) -> None:
        if not self.held:
            self.loop.call_soon(self.flush)
        self.held.append(data)

    def flush(self) -> None:
        held, self.held = self.held, []
        if held and not self.transport.is_closing():
            self.transport.writelines(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str):
        return getattr(self.transport, name)


class Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through `_Coalesced`, with a deadline
    on each request's arrival, and its own refusals in the JSON envelope.

    uvicorn bounds the wait between two requests (keepalive) but not the arrival of
    one: half a head, or half a body, held a connection for as long as the client
    liked. Here a request must arrive whole within REQUEST_READ_TIMEOUT_SEC of its
    first byte (of the connection's opening, for its first request): then a stalled
    body is answered 408, a stalled head closed. The timer starts only when a read
    leaves a request unfinished, so a request that comes in one read, as nearly all
    do, costs no timer. (Django's threads never wait for a body either way: the
    fast lane reads each one whole first, ticketing/fastlane.py.)
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Coalesced(transport, self.loop))  # type: ignore[arg-type]
        self.unfinished = True  # a request has begun (here: is awaited) and not fully come
        self.headed = False  # ...and its head has come
        self.deadline: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.unfinished and self.deadline is None and not self.transport.is_closing():
            self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.unfinished, self.headed = True, False

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self.headed = True

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.unfinished = False
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Malformed HTTP (uvicorn's own answer is plain text)."""
        self._refuse("BAD_REQUEST", "The request is not valid HTTP.")

    def _arm(self) -> None:
        self.deadline = self.loop.call_later(settings.REQUEST_READ_TIMEOUT_SEC, self._timed_out)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _timed_out(self) -> None:
        self.deadline = None
        cycle = self.cycle
        if self.headed and not cycle.response_started and not self.pipeline:
            # The app waits for the rest of the body: it hears that the client left.
            cycle.disconnected = True
            cycle.message_event.set()
            self._refuse("REQUEST_TIMEOUT", "The request did not arrive in time.")
        else:
            self.transport.close()  # a head that never finished, or an answer already begun

    def _refuse(self, code: str, message: str) -> None:
        """Answer in the envelope and close: the rest of the stream cannot be read."""
        # Imported here: gunicorn's master process reads this file, and has no use
        # for Django's and DRF's modules that errors.py brings.
        from ticketing.errors import DomainError

        err = DomainError(code, message)
        body = orjson.dumps(err.body())
        head = [STATUS_LINE[err.status]]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [
            b"content-type: application/json\r\n",
            b"x-content-type-options: nosniff\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


class Worker(UvicornWorker):
    """uvicorn with uvloop and httptools, no access log (gunicorn's `accesslog`
    turns one on), and the ASGI lifespan the fast lane answers. uvicorn's own
    reading of X-Forwarded-For is off: the app believes it only from
    TRUSTED_PROXIES (ticketing/ratelimit.py)."""

    CONFIG_KWARGS = {
        "loop": "uvloop",
        "http": Protocol,
        "lifespan": "on",
        "access_log": False,
        "proxy_headers": False,
        "server_header": False,
    }
