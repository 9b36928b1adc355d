"""A TCP proxy that injects real network faults between the app and a real Postgres or Redis.

Fault-injection tests point DATABASE_URL / REDIS_URL of app servers and management commands
at a `FaultProxy` and decide, per protocol message, whether the connection is cut:

- `CUT_BEFORE`: the server never receives the message (a failure between two commands);
- `CUT_AFTER`: the server receives and applies it, then the answer is lost (a lost
  acknowledgement: committed on the server, an error on the client).

Nothing is mocked: the real server behind the proxy applies (or never sees) the message and
the client really sees its connection close. Only the client-to-server direction is parsed.

How Django 5.2 + psycopg 3.3 talk to Postgres (observed through this proxy; see the tests).
Django's cursor is psycopg's ClientCursor (parameters bound client-side), so an ORM INSERT,
a raw `cursor.execute()` with or without parameters, the BEGIN of `atomic()` and its final
COMMIT (psycopg's `connection.commit()`) are each one simple-query `Q` message, e.g.
"COMMIT". `lambda m: Action.CUT_AFTER if m.kind == "Q" and m.text.strip().upper() == "COMMIT"
else Action.PASS` thus gives "committed on the server, OperationalError in the app". After
that error `atomic()` reconnects at once (restoring autocommit): a second "startup" follows.
The extended protocol (P/B/D/E, then S) appears only with server-side binding (a plain
psycopg Cursor with parameters) or `executemany()` (psycopg pipelines: P/B/D/E per row, one S).
"""

from __future__ import annotations

import collections
import enum
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

THREAD_PREFIX = "faultproxy"
WAIT_SECONDS = 5.0
# Postgres extended-protocol messages that the server answers only at the next Sync.
_EXTENDED = frozenset("PBDECH")
_UNTYPED = {80877103: "ssl_request", 80877104: "gss_request", 80877102: "cancel_request"}


class Action(enum.Enum):
    PASS = "pass"  # forward as usual
    CUT_BEFORE = "cut_before"  # close the connection without forwarding this message
    CUT_AFTER = "cut_after"  # forward it, let the server apply it, drop its answer, close


@dataclass(frozen=True)
class Message:
    """One client-to-server protocol message, as the rule sees it."""

    protocol: str  # "postgres" or "redis"
    kind: str  # postgres: type letter, or "startup" / "ssl_request" / ...; redis: command, upper-case
    text: str  # postgres: SQL of Q and P ("" otherwise); redis: arguments, latin-1, joined by " "
    args: tuple[bytes, ...] = ()  # redis: the raw arguments after the command name


def pass_all(message: Message) -> Action:
    return Action.PASS


Frames = list[tuple[Message | None, bytes]]  # (message or None: forward unseen, its raw bytes)


class _PostgresFramer:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.untyped = True  # until the StartupMessage: int32 length + payload, no type byte
        self.raw = False  # a TLS stream (or garbage) is passed through unparsed

    def feed(self, data: bytes) -> Frames:
        buf, out = self.buf, []
        buf += data
        while buf:
            head, size = (0 if self.untyped else 1), 0
            if not self.raw and len(buf) >= head + 4:
                size = head + int.from_bytes(buf[head : head + 4], "big")
                # A TLS record (0x16...) where a startup message was due, or a nonsense length.
                self.raw = size < head + 4 or (self.untyped and buf[0] != 0)
            if self.raw:  # pass the rest through unparsed
                out.append((None, bytes(buf)))
                buf.clear()
                break
            if len(buf) < head + 4 or len(buf) < size:
                break
            raw = bytes(buf[:size])
            del buf[:size]
            if self.untyped:
                code = int.from_bytes(raw[4:8], "big") if len(raw) >= 8 else 0
                kind = _UNTYPED.get(code, "startup")
                # The server answers SSL/GSS requests with one byte; another untyped message follows.
                self.untyped = kind in ("ssl_request", "gss_request")
                out.append((Message("postgres", kind, ""), raw))
                continue
            kind, body = chr(raw[0]), raw[5:]
            if kind == "P":
                body = body[body.find(b"\0") + 1 :]
            text = body.split(b"\0", 1)[0].decode("utf-8", "replace") if kind in ("Q", "P") else ""
            out.append((Message("postgres", kind, text), raw))
        return out


class _RedisFramer:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.raw = False  # not RESP after all: pass the rest through unparsed

    def _array(self) -> tuple[list[bytes], int] | None:
        """Parse the RESP array at the start of the buffer: (items, its length), None if incomplete."""
        buf = self.buf
        end = buf.find(b"\r\n")
        if end < 0:
            return None
        items, pos = [], end + 2
        for _ in range(int(buf[1:end])):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return None
            start = end + 2
            stop = start + int(buf[pos + 1 : end])  # buf[pos] is "$"
            if len(buf) < stop + 2:
                return None
            items.append(bytes(buf[start:stop]))
            pos = stop + 2
        return items, pos

    def feed(self, data: bytes) -> Frames:
        buf, out = self.buf, []
        buf += data
        while buf:
            if buf[:1] == b"*" and not self.raw:
                try:
                    parsed = self._array()
                except ValueError:
                    self.raw, parsed = True, ([], len(buf))
                if parsed is None:
                    break
                items, size = parsed
            elif self.raw:
                items, size = [], len(buf)
            else:  # an inline command, as typed into telnet
                size = buf.find(b"\n") + 1
                if size == 0:
                    break
                items = bytes(buf[:size]).split()
            raw = bytes(buf[:size])
            del buf[:size]
            if not items:
                out.append((None, raw))
                continue
            args = tuple(items[1:])
            text = " ".join(a.decode("latin-1") for a in args)
            out.append((Message("redis", items[0].decode("latin-1").upper(), text, args), raw))
        return out


def _shutdown(sock: socket.socket, how: int = socket.SHUT_RDWR) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


class _Conn:
    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.server: socket.socket | None = None
        self.muted = False  # set on a cut: the server's answers are dropped from then on
        self.server_gone = threading.Event()  # the server->client pump saw EOF (or an error)
        self.threads: list[threading.Thread] = []

    def kill(self) -> None:
        """Shut both sockets down now: wakes both pumps; the client sees EOF immediately."""
        self.server_gone.set()
        _shutdown(self.client)
        if self.server is not None:
            _shutdown(self.server)


class FaultProxy:
    """Listens on 127.0.0.1:`port` and forwards to the upstream server, asking `rule` per message."""

    def __init__(self, protocol: str, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        if protocol not in ("postgres", "redis"):
            raise ValueError(f"protocol must be 'postgres' or 'redis', not {protocol!r}")
        self.protocol = protocol
        self.upstream = (upstream_host, upstream_port)
        self.rule: Callable[[Message], Action] = pass_all
        self.refusing = False
        self.seen: collections.Counter[tuple[str, str]] = collections.Counter()
        # Every cut this proxy made, in order: (the message the rule picked, its action),
        # recorded when the connection is cut, so a test can tell its fault really fired.
        self.cuts: list[tuple[Message, Action]] = []
        self.port = 0
        self._lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._closed = False
        self._count = 0  # connections accepted, to name their threads
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None

    def start(self) -> FaultProxy:
        if self._listener is not None:
            raise RuntimeError("this proxy was started already")
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept, name=f"{THREAD_PREFIX}-{self.port}-accept", daemon=True
        )
        self._acceptor.start()
        return self

    def postgres_url(self, name: str, user: str = "postgres") -> str:
        """A DATABASE_URL through the proxy; no SSL, so the first message is the plain StartupMessage."""
        return f"postgres://{user}@127.0.0.1:{self.port}/{name}?sslmode=disable"

    def redis_url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def cut_all(self) -> None:
        """A network blip: every open connection is closed at once, whatever is in flight."""
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.kill()

    def close(self) -> None:
        """Stop listening, close every connection and wait (briefly) for the proxy's threads."""
        self._closed = True
        if self._listener is not None:
            _shutdown(self._listener)  # wakes the blocked accept()
            self._listener.close()
        if self._acceptor is not None:
            self._acceptor.join(timeout=2)
        with self._lock:
            threads = [t for conn in self._conns for t in conn.threads]
        self.cut_all()
        for thread in threads:
            if thread is not threading.current_thread():  # close() may be called from a rule
                thread.join(timeout=2)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._closed or self.refusing:  # the server is "down": accepted, then closed at once
                _shutdown(client)
                client.close()
                continue
            conn, self._count = _Conn(client), self._count + 1
            name = f"{THREAD_PREFIX}-{self.port}-{self._count}"
            pump = threading.Thread(target=self._client_pump, args=(conn,), name=name, daemon=True)
            conn.threads.append(pump)
            with self._lock:
                self._conns.add(conn)
            conn.threads[0].start()

    def _decide(self, message: Message) -> Action:
        try:
            action = self.rule(message)
        except Exception:
            log.exception("faultproxy: the rule failed on %r; passing it", message)
            return Action.PASS
        if not isinstance(action, Action):
            log.error("faultproxy: the rule returned %r for %r; passing it", action, message)
            return Action.PASS
        return action

    def _client_pump(self, conn: _Conn) -> None:
        """Client -> server: frame, ask the rule, forward; runs the connection's whole life."""
        try:
            conn.server = socket.create_connection(self.upstream, timeout=WAIT_SECONDS)
            conn.server.settimeout(None)
            reader = threading.Thread(
                target=self._server_pump, args=(conn,), name=f"{conn.threads[0].name}-s2c", daemon=True
            )
            conn.threads.append(reader)
            reader.start()
            self._forward(conn)
        except OSError:
            pass
        finally:
            conn.kill()
            for thread in conn.threads[1:]:
                thread.join(timeout=WAIT_SECONDS)
            conn.client.close()
            if conn.server is not None:
                conn.server.close()
            with self._lock:
                self._conns.discard(conn)

    def _forward(self, conn: _Conn) -> None:
        framer = _PostgresFramer() if self.protocol == "postgres" else _RedisFramer()
        until_sync = False  # a CUT_AFTER on an extended-protocol message waits for its Sync
        picked: Message | None = None  # the message whose CUT_AFTER waits for that Sync
        while True:
            data = conn.client.recv(65536)
            if not data:
                return self._hang_up(conn, mute=False)  # the client left: let the server finish too
            out, cut = bytearray(), None
            for message, raw in framer.feed(data):
                if message is None:
                    out += raw
                    continue
                with self._lock:
                    self.seen[(message.protocol, message.kind)] += 1
                action = Action.CUT_AFTER if until_sync else self._decide(message)
                if action is Action.CUT_BEFORE:
                    cut = (message, action)
                    break
                out += raw
                if action is Action.CUT_AFTER:
                    # Parse/Bind/Execute are only run and answered at the next Sync (S), which
                    # also commits an implicit transaction: forward up to and including it, so
                    # that "after" still means the server executed the statement. The rule is
                    # not asked about the messages in between.
                    if message.protocol == "postgres" and message.kind in _EXTENDED:
                        until_sync, picked = True, picked or message
                        continue
                    cut = (picked or message, action)
                    break
            if cut is not None:
                conn.muted = True  # set before forwarding: every answer from here on is lost
            conn.server.sendall(out)
            if cut is not None:
                with self._lock:
                    self.cuts.append(cut)
                return self._hang_up(conn, mute=True)

    def _hang_up(self, conn: _Conn, mute: bool) -> None:
        """Half-close towards the server and wait (bounded) until it hangs up, then close both sides.

        The FIN follows everything forwarded, so the server processes all of it (a CUT_AFTER
        message included) before it sees the end of the connection, and the client learns of
        the cut only once the server has answered and hung up: by then the message is applied.
        """
        conn.muted = conn.muted or mute
        _shutdown(conn.server, socket.SHUT_WR)
        conn.server_gone.wait(WAIT_SECONDS)
        conn.kill()

    def _server_pump(self, conn: _Conn) -> None:
        """Server -> client: a plain byte stream, dropped once the connection is cut."""
        try:
            while data := conn.server.recv(65536):
                if not conn.muted:
                    conn.client.sendall(data)
        except OSError:
            pass
        finally:
            conn.server_gone.set()
            if not conn.muted:
                _shutdown(conn.client)  # the server hung up by itself: so does the proxy
