"""gunicorn settings, from the environment (PORT, HOST, WEB_CONCURRENCY).

gunicorn runs the ASGI application (ticketing/asgi.py) in uvicorn workers (the
uvicorn-worker package): uvloop and httptools, the writes of each loop turn sent
together. Each worker is one event loop, so a slow client holds a coroutine, not a
thread, and the crowd's endpoints answer from the fast lane without Django's
request cycle (docs/benchmarks.md).
"""

import asyncio
import os
import urllib.parse
from typing import Any

import httptools
import orjson
from django.conf import settings
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
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

    def is_closing(self) -> bool:  # (asked as each request is answered)
        return self.transport.is_closing()

    def __getattr__(self, name: str):
        return getattr(self.transport, name)


class _NoEvent:
    """The message event of a request the lane answers: nothing waits on it."""

    @staticmethod
    def set() -> None:
        pass


class _Held:
    """A fast route's request, held by the protocol until its body has come and its
    turn comes: what uvicorn's code reads of a request's cycle (connection_lost,
    shutdown, the pipeline), without the cycle's ASGI parts. `_cycle_of` makes it one
    when the ASGI application is to answer it after all."""

    __slots__ = ("route", "scope", "body", "more_body", "keep_alive", "disconnected",
                 "response_started", "response_complete", "turn")  # fmt: skip
    message_event = _NoEvent
    waiting_for_100_continue = False

    def __init__(self, route: Any, scope: dict, keep_alive: bool) -> None:
        self.route, self.scope, self.keep_alive = route, scope, keep_alive
        self.body, self.more_body = b"", True
        self.disconnected = self.response_started = self.response_complete = False
        self.turn = False  # the requests before it on the connection are answered


class Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through `_Coalesced`, answering the fast
    lane's requests itself, with a deadline on each request's arrival, and its own
    refusals in the JSON envelope.

    The fast lane's requests (joins, polls: the crowd's) are handed to the lane whole,
    without uvicorn's request cycle and ASGI's messages (`FastLane.whole`): without
    the messages a join cost a worker 13 % less, and without the cycle a fifth less
    again (docs/benchmarks.md, "Where a join's time goes", "Without uvicorn's request
    cycle"). Once its head is parsed, such a request is kept as a `_Held` until its
    body has come (a body past HIGH_WATER_LIMIT or the body limit, declared or come,
    goes to the ASGI application as it comes, which refuses one over the limit at
    once; so does any request the lane would not answer itself), then answered by a
    task of its own, which runs once the loop's reads of this turn are done (the
    requests of a turn parsed together, then answered together: answered each inside
    its own read, joins measured slower; and a task is where the lane's code may
    wait, time out, be cancelled). The rest is uvicorn's, as for any request: a
    graceful shutdown waits for the answer, then closes; pipelined requests are
    answered in order; the keep-alive timer. With an access log on, every request
    takes the ASGI path.

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
        # The fast lane (ticketing/fastlane.py: FastLane), when it is the application
        # and no access log wants each request's ASGI messages.
        self.lane = self.app if hasattr(self.app, "whole") and not self.access_log else None
        # The most body a request is held for: past it (declared or come), the ASGI
        # application reads it, and refuses one over the body limit at once.
        self.most_held = min(HIGH_WATER_LIMIT, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        self.idle_from: float | None = None  # loop.time() of the last answer, while idle since

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.unfinished and self.deadline is None and not self.transport.is_closing():
            self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.unfinished, self.headed = True, False

    def on_headers_complete(self) -> None:
        held = self._held() if self.lane is not None else None
        if held is None:
            super().on_headers_complete()
        else:
            existing, self.cycle = self.cycle, held  # type: ignore[assignment]
            if existing is None or existing.response_complete:
                held.turn = True
            else:  # pipelined: answered once the requests before it are
                self.flow.pause_reading()
                self.pipeline.appendleft((held, self.app))  # type: ignore[arg-type]
        self.headed = True

    def _held(self) -> _Held | None:
        """The request as a `_Held`, if the lane is to answer it (its scope completed
        as uvicorn completes it); None for the ASGI application's."""
        parser = self.parser
        if (
            self.expect_100_continue  # (its body comes once it is asked for)
            or self.limit_concurrency is not None  # (uvicorn's own 503 decides)
            or parser.should_upgrade()
            or self._declared() > self.most_held
        ):
            return None
        url = httptools.parse_url(self.url)
        path = url.path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope = self.scope
        scope["method"], scope["path"] = parser.get_method().decode("ascii"), self.root_path + path
        route = self.lane.route_of(scope)
        if route is None:
            return None  # (uvicorn's on_headers_complete completes the scope again)
        scope["raw_path"] = self.root_path.encode("ascii") + url.path
        scope["query_string"] = url.query or b""
        version = parser.get_http_version()
        if version != "1.1":
            scope["http_version"] = version
        return _Held(route, scope, version != "1.0" and parser.should_keep_alive())

    def _declared(self) -> int:
        """The body's declared length (0 when none is: chunked, or no body)."""
        for name, value in self.headers:
            if name == b"content-length":
                return int(value)  # (httptools let only digits through)
        return 0

    def on_body(self, body: bytes) -> None:
        held = self.cycle
        if held.__class__ is not _Held:
            return super().on_body(body)
        held.body += body
        if held.turn and len(held.body) > self.most_held:  # the application reads it as it comes
            super()._start_asgi_task(self._cycle_of(held), self.app)

    def on_message_complete(self) -> None:
        self.unfinished = False
        self._disarm()
        held = self.cycle
        if held.__class__ is not _Held:
            return super().on_message_complete()
        held.more_body = False
        if held.turn:
            self._start_answer(held)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if cycle.__class__ is not _Held:
            return super()._start_asgi_task(cycle, app)
        cycle.turn = True  # a pipelined request's turn
        if len(cycle.body) > self.most_held:
            super()._start_asgi_task(self._cycle_of(cycle), app)
        elif not cycle.more_body:
            self._start_answer(cycle)

    def _cycle_of(self, held: _Held) -> RequestResponseCycle:
        """uvicorn's cycle for a held request the ASGI application is to answer, with
        the body come so far; it takes the held request's place as the connection's."""
        cycle = RequestResponseCycle(
            scope=held.scope,  # type: ignore[arg-type]
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=held.keep_alive,
            on_response=self.on_response_complete,
        )
        cycle.body, cycle.more_body = bytearray(held.body), held.more_body
        cycle.disconnected = held.disconnected
        cycle.message_event.set()
        if self.cycle is held:
            self.cycle = cycle
        return cycle

    def _start_answer(self, held: _Held) -> None:
        task = self.loop.create_task(self._answer(held))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _answer(self, held: _Held) -> None:
        """A held request's answer, from the lane; from the ASGI application when the
        lane would not give it, or when the client does not read its answers (ASGI's
        `send` waits for it)."""
        if held.disconnected:
            return  # the client left: nothing is asked of the lane for it
        answer = None
        if not self.flow.write_paused:
            try:
                answer = self.lane.whole(held.route, held.scope, held.body)
            except Exception:  # the application answers it, as it answers a bug
                answer = None
        if answer is None:
            return super()._start_asgi_task(self._cycle_of(held), self.app)
        status, headers, payload = await answer
        if self.flow.write_paused and not held.disconnected:
            await self.flow.drain()
        if held.disconnected:
            return  # the client left
        held.response_started = held.response_complete = True
        head = self._head(status, headers, len(payload), close=not held.keep_alive)
        self.transport.write(head + payload)
        if not held.keep_alive:
            self.transport.close()
        self.on_response_complete()

    def _unset_keepalive_if_required(self) -> None:
        """(uvicorn's, as each read comes and each answer ends) The connection is
        not idle; its keep-alive timer stays, and finds so when it fires."""
        self.idle_from = None

    def on_response_complete(self) -> None:
        """uvicorn's, but the keep-alive timer is armed once per keep-alive period,
        not once per answer (and cancelled as each request comes): it fires, and
        closes the connection if it has been idle since `keepalive` seconds, or
        waits for the rest of that time."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self.idle_from = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._kept_alive)

    def _kept_alive(self) -> None:
        self.timeout_keep_alive_task = None
        if self.idle_from is None:
            return  # a request is coming or being answered: its answer arms the timer again
        left = self.idle_from + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._kept_alive)
        else:
            self.timeout_keep_alive_handler()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
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
        headers = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff")]
        self.transport.write(self._head(err.status, headers, len(body), close=True) + body)
        self.transport.close()

    def _head(self, status: int, headers: list[tuple[bytes, bytes]], length: int, *, close: bool) -> bytes:
        """An answer's status line and headers (the server's own first, as uvicorn's).
        All but the length are written once for the answers of a status that share
        their header list, as the lane's do, while the server's own are the same
        list (uvicorn makes a new one each second, for its date)."""
        defaults = self.server_state.default_headers
        made = _HEADS.get(status)
        if made is None or made[0] is not defaults or made[1] is not headers:
            lines = [STATUS_LINE[status]]
            for name, value in (*defaults, *headers):
                lines += (name, b": ", value, b"\r\n")
            made = _HEADS[status] = (defaults, headers, b"".join(lines))
        return made[2] + (_CLOSING if close else _KEPT) % length


# Per status: the server's headers and the answer's, as lists, and the head they made.
_HEADS: dict[int, tuple[list, list, bytes]] = {}
_KEPT = b"content-length: %d\r\n\r\n"
_CLOSING = b"content-length: %d\r\nconnection: close\r\n\r\n"


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
