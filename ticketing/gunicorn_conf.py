"""gunicorn settings, from the environment (PORT, HOST, WEB_CONCURRENCY).

gunicorn runs the ASGI application (ticketing/asgi.py) in uvicorn workers (the
uvicorn-worker package): uvloop and httptools, the writes of each loop turn sent
together. Each worker is one event loop, so a slow client holds a coroutine, not a
thread, and the crowd's endpoints answer from the fast lane without Django's
request cycle (docs/benchmarks.md).
"""

import asyncio
import os

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
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
    """uvicorn's httptools protocol, writing through `_Coalesced`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Coalesced(transport, self.loop))  # type: ignore[arg-type]


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
