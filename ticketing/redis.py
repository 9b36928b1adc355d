"""The one place that talks to Redis: the client, the key names and the Lua scripts.

Every key of an event carries the hash tag `{<eventId>}` so that all of them live in
one Redis Cluster slot and a script may touch them together.

On a Redis Cluster (REDIS_CLUSTER=true) the clients are redis-py's cluster clients,
built here, and the differences stay here: the fast lane's batcher sends each
command to the node owning its key, `now_ms(event_id)` reads the clock of the
event's node, `event_pipeline` goes to the event's node, and `scan` and
`delete_matching` visit every primary.
Callers never ask which kind of Redis they have.
"""

import asyncio
import hashlib
import inspect
import logging
import zlib
from collections.abc import Awaitable, Iterator
from functools import cache, lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django_redis import get_redis_connection
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from ticketing.errors import REDIS_ERRORS

log = logging.getLogger(__name__)

LUA_DIR = Path(settings.BASE_DIR) / "lua"

# Every known event id, so the admission tick can find them without the database.
EVENTS_KEY = "ticket:events"

# The tokens of an event that counts places per owner are kept in this many small
# hashes (by owner), which stay in Redis' compact listpack encoding.
OWNER_BUCKET_BYTES = 2


_client: redis.Redis | redis.cluster.RedisCluster | None = None

# What `run(..., on=...)` queues a script on rather than runs it.
_PIPELINES = (redis.client.Pipeline, redis.cluster.ClusterPipeline)

# A fast-lane command that has not had its answer from Redis by then fails, and its
# request with 503.
ASYNC_REQUEST_TIMEOUT = 5.0


class Batcher:
    """The asyncio client, with the commands of one event-loop turn sent together.

    A fast-lane worker has dozens of requests in flight; each would write its own
    command and read its own reply, a syscall pair each, on a machine where Redis
    and wrk compete for the same cores. Commands issued during one turn of the
    loop go out as one pipeline instead (one write, one read); each caller still
    gets its own reply or error. Pipelines of successive turns run concurrently,
    on connections of the client's pool.

    Each turn's commands share one timer: those still unanswered after
    ASYNC_REQUEST_TIMEOUT fail with TimeoutError (a stuck Redis fails requests in
    seconds), at the cost of one timer per turn rather than one per request.
    """

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client
        self.pending: list[tuple[tuple, asyncio.Future]] = []
        self.timer: asyncio.TimerHandle | None = None  # the pending commands' deadline
        self.sending: set[asyncio.Task] = set()  # held, or the loop might drop them midway
        # Never more pipelines in flight than the pool has connections: past that the
        # pool would refuse one. Commands arriving meanwhile wait, and go out
        # together when a pipeline comes back.
        self.limit = client.connection_pool.max_connections

    async def script_load(self, source: bytes, key: str | None) -> None:
        """Load a script where `key`'s commands run (here: the one server)."""
        await self.execute("SCRIPT", "LOAD", source)

    async def aclose(self) -> None:
        await self.client.aclose()

    def execute(self, *args: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.pending:
            self.timer = loop.call_later(ASYNC_REQUEST_TIMEOUT, _expire, self.pending)
            if len(self.sending) < self.limit:
                loop.call_soon(self._flush)
        self.pending.append((args, future))
        return future

    def _flush(self) -> None:
        if not self.pending or len(self.sending) >= self.limit:
            return  # sent already, or `_sent` sends it when a connection frees
        batch, timer, self.pending = self.pending, self.timer, []
        task = asyncio.ensure_future(self._send(batch, timer))
        self.sending.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task) -> None:
        self.sending.discard(task)
        self._flush()

    async def _send(self, batch: list[tuple[tuple, asyncio.Future]], timer: asyncio.TimerHandle) -> None:
        try:
            await self._pipeline(batch)
        finally:
            timer.cancel()

    async def _pipeline(self, batch: list[tuple[tuple, asyncio.Future]]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for args, _ in batch:
            pipe.execute_command(*args)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # the connection failed: every caller hears it
            replies = [exc] * len(batch)
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():  # its caller gave up (a timeout)
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)


def _expire(batch: list[tuple[tuple, asyncio.Future]]) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(TimeoutError("no answer from Redis in time"))


# Keyless commands: on a cluster they go to the cluster client, which knows where.
_KEYLESS = frozenset({"SCRIPT", "PING", "TIME", "ECHO", "INFO", "CLUSTER", "DBSIZE", "FLUSHDB"})


def _key_of(args: tuple) -> Any:
    """The key a command is routed by (its first), or None for a keyless one."""
    name = args[0].upper() if isinstance(args[0], str) else args[0].decode().upper()
    if name in ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO"):
        return args[3] if int(args[2]) else None
    if name in _KEYLESS or len(args) < 2:
        return None
    return args[1]


class ClusterBatcher:
    """The Batcher on a Redis Cluster: each command goes to the node owning its key.

    Each primary gets a Batcher of its own (a plain asyncio client and pool for that
    node): a turn's commands are thus grouped by node and pipelined to each, as
    on one server. The slot map is the cluster client's. A command a node no
    longer owns (MOVED, ASK, TRYAGAIN, CLUSTERDOWN), or whose node cannot be
    reached, is sent once more through the cluster client itself, which follows
    the redirection and refreshes the slot map for the commands after it.
    Keyless commands (SCRIPT LOAD without a key) go through the cluster client too.
    """

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self.url = url
        self.options = options
        # The asyncio cluster client takes the pool's options but a few (it has no
        # retry_on_timeout: its own retries cover that).
        accepted = inspect.signature(redis.asyncio.cluster.RedisCluster).parameters
        self.client = redis.asyncio.cluster.RedisCluster.from_url(
            url, **{name: value for name, value in options.items() if name in accepted}
        )
        self.nodes: dict[str, Batcher] = {}
        self.ready = False
        self.redirecting = asyncio.Lock()

    def execute(self, *args: Any) -> Awaitable:
        """The reply to one command, as Batcher.execute (awaited by the caller)."""
        return self._execute(args)

    async def _execute(self, args: tuple) -> Any:
        if not self.ready:
            await self.client.initialize()
            self.ready = True
        key = _key_of(args)
        if key is None:
            return await self.client.execute_command(*args)
        try:
            return await self._node_of(key).execute(*args)
        except (MovedError, AskError, TryAgainError, ClusterDownError, redis.ConnectionError):
            # One at a time: the cluster client rebuilds its nodes on a redirection,
            # and a command of another coroutine on a connection it is closing fails
            # (redis-py 8). Redirections are rare: a resharding, a failover. Bounded
            # as a turn's commands are (a stuck node fails requests in seconds).
            async with asyncio.timeout(ASYNC_REQUEST_TIMEOUT), self.redirecting:
                return await self.client.execute_command(*args)

    def _node_of(self, key: Any) -> Batcher:
        node = self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key))
        found = self.nodes.get(node.name)
        if found is None:
            found = self.nodes[node.name] = Batcher(
                redis.asyncio.Redis.from_url(_node_url(self.url, node.host, node.port), **self.options)
            )
        return found

    async def script_load(self, source: bytes, key: str | None) -> None:
        """Load a script on the node owning `key` (every primary without a key)."""
        if not self.ready or key is None:
            await self.client.script_load(source)
            return
        await self._node_of(key).execute("SCRIPT", "LOAD", source)

    async def aclose(self) -> None:
        for found in self.nodes.values():
            await found.aclose()
        await self.client.aclose()


def _node_url(url: str, host: str, port: int) -> str:
    """`url` (its scheme, user and password) for one node of the cluster."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}:{port}", path="/0"))


# One per event loop (a uvicorn worker has one; tests may have more).
_batchers: dict[asyncio.AbstractEventLoop, Batcher | ClusterBatcher] = {}


def clustered() -> bool:
    """Whether Redis is a Redis Cluster (REDIS_CLUSTER)."""
    return settings.REDIS_CLUSTER


def _pool_options() -> dict[str, Any]:
    return dict(settings.CACHES["default"]["OPTIONS"].get("CONNECTION_POOL_KWARGS", {}))


def client() -> redis.Redis | redis.cluster.RedisCluster:
    """The process-wide Redis client (django-redis' pool, hiredis parser); on a
    cluster, redis-py's cluster client with the same options (django-redis' pool
    knows one server only).

    Kept here once fetched: asking django-redis every time costs more than a poll's
    own Redis round trip.
    """
    global _client
    if _client is None:
        if clustered():
            _client = redis.cluster.RedisCluster.from_url(
                settings.CACHES["default"]["LOCATION"], **_pool_options()
            )
        else:
            _client = get_redis_connection("default")
    return _client


def batcher() -> Batcher | ClusterBatcher:
    """The running event loop's asyncio client, for the fast lane: the same server,
    options and hiredis parser as `client()`."""
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        options = _pool_options()
        # Per-command timeouts and health checks cost a task and a clock read on
        # every command; the fast lane bounds each request as a whole instead
        # (ASYNC_REQUEST_TIMEOUT).
        options.update(socket_timeout=None, health_check_interval=0)
        url = settings.CACHES["default"]["LOCATION"]
        if clustered():
            found = ClusterBatcher(url, options)
        else:
            found = Batcher(redis.asyncio.Redis.from_url(url, **options))
        _batchers[loop] = found
    return found


async def aclose() -> None:
    """Close the running loop's asyncio client (an ASGI worker shutting down)."""
    found = _batchers.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.aclose()


@receiver(setting_changed)
def _forget_client(*, setting: str, **kwargs: Any) -> None:
    global _client
    if setting in ("CACHES", "REDIS_CLUSTER"):  # tests point the app at another server
        _client = None
        _batchers.clear()


def now_ms(event_id: str) -> int:
    """Redis' clock, the one that arrival order and active windows are measured on.

    On a cluster every node has its own clock: an event's times are read from the
    node holding the event, the one its scripts read TIME on.
    """
    c = client()
    if isinstance(c, redis.cluster.RedisCluster):
        seconds, micros = c.time(target_nodes=c.get_node_from_key(event_keys(event_id).meta))
    else:
        seconds, micros = c.time()
    return seconds * 1000 + micros // 1000


def event_pipeline(event_id: str) -> redis.client.Pipeline:
    """A pipeline (no transaction) for commands on one event's keys only. On a
    cluster it goes straight to the node holding the event (its keys share one
    slot) rather than through the cluster pipeline, which routes every command on
    its own: several times slower for the millions of joins of a drill."""
    c = client()
    if isinstance(c, redis.cluster.RedisCluster):
        return c.get_redis_connection(c.get_node_from_key(event_keys(event_id).meta)).pipeline(
            transaction=False
        )
    return c.pipeline(transaction=False)


def scan(match: str, *, count: int = 1000) -> Iterator[bytes]:
    """Every key matching `match`, of every primary on a cluster."""
    yield from client().scan_iter(match=match, count=count)


def delete_matching(pattern: str) -> int:
    """Delete every key matching `pattern` (on every primary); returns how many.
    UNLINK of many keys goes slot by slot on a cluster."""
    c = client()
    deleted = 0
    batch: list[bytes] = []
    for name in scan(pattern):
        batch.append(name)
        if len(batch) >= 1000:
            deleted += c.unlink(*batch)
            batch.clear()
    if batch:
        deleted += c.unlink(*batch)
    return deleted


def ratelimit_key(scope: str, client: str) -> str:
    """A client's request counter for one scope (join, leave), shared by all events."""
    return f"ticket:ratelimit:{scope}:{client}"


def ratelimit_keys(scope: str, units: tuple[str, ...]) -> list[str]:
    """The counters of a client counted in several units, narrowest first (an IPv6
    /64, then its /48): under one hash tag, the widest unit, so that one script
    counts them together on a Redis Cluster. One unit: `ratelimit_key`."""
    if len(units) == 1:
        return [ratelimit_key(scope, units[0])]
    tagged = ratelimit_key(scope, f"{{{units[-1]}}}")
    return [f"{tagged}:{unit}" for unit in units[:-1]] + [tagged]


def proof_spent_key(purpose: str, mark: bytes) -> str:
    """A proof-of-work solution used outside an event's line (sign-up), kept until
    its challenge expires. (A join's are kept by the join script: EventKeys.proofs.)"""
    return f"ticket:proof:{purpose}:{mark.hex()}"


def key(event_id: str, *parts: str) -> str:
    """`ticket:{<eventId>}:<entity>[:<id>]`, the naming rule of DESIGN.md."""
    return f"ticket:{{{event_id}}}:" + ":".join(parts)


def _bucket(owner: bytes) -> str:
    """Which of the 65,536 owner hashes an owner's id picks."""
    return (zlib.crc32(owner) & 0xFFFF).to_bytes(OWNER_BUCKET_BYTES, "big").hex()


@lru_cache(maxsize=4096)
def event_keys(event_id: str) -> "EventKeys":
    """An event's key names, built once per process (a sale has few events)."""
    return EventKeys(event_id)


class EventKeys:
    """All key names of one event."""

    __slots__ = (
        "event_id",
        "meta",
        "seq",
        "nonces",
        "popped",
        "left",
        "leftpre",
        "leftlog",
        "holes",
        "windows",
        "per_window",
        "active",
        "booked_places",
        "seats",
        "outbox",
        "returned",
        "recount",
        "reconciling",
        "tick",
        "admit_log",
        "refused",
        "live",
        "metrics",
        "bucket_prefix",
        "site_bucket_prefix",
        "proofs_prefix",
        "pre",
        "drawpos",
        "draw_claim",
    )

    def __init__(self, event_id: str) -> None:
        self.event_id = event_id
        self.meta = key(event_id, "meta")
        # Arrival order: one counter for all app servers, so no server's clock decides.
        self.seq = key(event_id, "queue", "seq")
        # The random bytes of each number's token, 2 bytes a number: what tells a
        # token of this line from one of a number issued twice (lua/lib/line.lua).
        self.nonces = key(event_id, "queue", "nonces")
        # The line is counters (lua/lib/line.lua): places up to `popped` have been
        # taken off its head; a place is the arrival number a token carries.
        self.popped = key(event_id, "queue", "popped")
        # People who left while waiting: a bitmap by place; by pre-queue number
        # before a scheduled start's draw; 5 bytes each in the order they left (what
        # the web processes' caches read on); and how many are still ahead of the head.
        self.left = key(event_id, "queue", "left")
        self.leftpre = key(event_id, "queue", "leftpre")
        self.leftlog = key(event_id, "queue", "leftlog")
        self.holes = key(event_id, "queue", "holes")
        # The admission log: which places each tick admitted and when their window
        # ends; bookings made per window; and how many people are active now.
        self.windows = key(event_id, "admit", "windows")
        self.per_window = key(event_id, "admit", "booked")
        self.active = key(event_id, "active", "count")
        # The places whose token booked, a bitmap: no longer active, even once a
        # cancellation took the booking back.
        self.booked_places = key(event_id, "booking", "places")
        self.seats = key(event_id, "seats", "remaining")
        # Bookings between their Redis step and their decision in Postgres.
        self.outbox = key(event_id, "booking", "outbox")
        # reservation id -> seats, for every cancellation whose seats are back on sale:
        # the guard that returns each exactly once.
        self.returned = key(event_id, "booking", "returned")
        # Held while reconcile recounts seats left from Postgres (lua/seats_heal.lua).
        self.recount = key(event_id, "seats", "recount")
        # Held by the one reconcile working on the event.
        self.reconciling = key(event_id, "booking", "reconciling")
        self.tick = key(event_id, "admit", "tick")
        self.admit_log = key(event_id, "admit", "log")
        # reason -> joins refused for it (lua/refused.lua), for the operator.
        self.refused = key(event_id, "refused")
        # "<second>:<waiting>:<admitted>" per tick, newest first (queue_app/live.py).
        self.live = key(event_id, "live")
        # The event's counters for /metrics (ticketing/metrics.py).
        self.metrics = key(event_id, "metrics")
        # A scheduled start's pre-queue (lua/join.lua): its tokens, 16 bytes each, by
        # arrival number, read by its draw (queue_app/draw.py); the drawn position of
        # each pre-queue number, 4 bytes big-endian at (number - 1) * 4; and the
        # claim of the one draw run under way.
        self.pre = key(event_id, "queue", "pre")
        self.drawpos = key(event_id, "queue", "drawpos")
        self.draw_claim = key(event_id, "queue", "draw", "claim")
        self.bucket_prefix = key(event_id, "tokens", "")
        self.site_bucket_prefix = key(event_id, "tokens", "site", "")
        self.proofs_prefix = key(event_id, "proofs", "")

    def owned(self, owner: bytes) -> str:
        """The hash of an owner's tokens (an account's, or a client address's), on
        an event that counts places per owner (lua/join.lua): small hashes, in
        Redis' compact encoding, whichever an owner's id picks."""
        return self.bucket_prefix + _bucket(owner)

    def site_owned(self, owner: bytes) -> str:
        """`owned`, for the tokens of an IPv6 /48: a family of hashes of its own, so
        that a token's entry for its /64 and for its /48 never meet in one hash."""
        return self.site_bucket_prefix + _bucket(owner)

    def proofs(self, mark: bytes, expires_at: int) -> str:
        """The set of the proof-of-work solutions used, of challenges expiring in the
        same minute as this one (the set expires with them)."""
        return f"{self.proofs_prefix}{expires_at // 60}:{mark[:2].hex()}"

    def draw_run(self, run: str) -> str:
        """One draw run's own positions, renamed into place by lua/draw_done.lua."""
        return key(self.event_id, "queue", "draw", run, "pos")

    def booked(self, token: str) -> str:
        return key(self.event_id, "booking", "done", token)

    def pattern(self) -> str:
        return key(self.event_id, "*")


class Script:
    """A Lua script of `lua/`, run by its SHA: one round trip in the normal case."""

    __slots__ = ("name", "source", "sha")

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = _with_libraries((LUA_DIR / f"{name}.lua").read_bytes())
        self.sha = hashlib.sha1(self.source).hexdigest()

    def __call__(self, keys: list[str], args: list[Any], on: Any) -> Any:
        try:
            return on.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            # A restarted or flushed server: load the source once, then by SHA again.
            on.script_load(self.source)
            return on.evalsha(self.sha, len(keys), *keys, *args)


def _with_libraries(source: bytes) -> bytes:
    """A script's source after the shared parts it asks for with `-- needs: <lib>`
    (lua/lib/<lib>.lua): Redis runs one self-contained chunk per script, so the
    line's reading lives once in lua/lib/ and is prepended here."""
    libraries = [
        line.split(b":", 1)[1].strip() for line in source.splitlines() if line.startswith(b"-- needs:")
    ]
    parts = [(LUA_DIR / "lib" / f"{lib.decode()}.lua").read_bytes() for lib in libraries]
    return b"\n".join([*parts, source])


@cache
def script(name: str) -> Script:
    return Script(name)


def load(name: str) -> None:
    """Make sure the server has the script, before queueing it in a pipeline
    (NOSCRIPT cannot be caught per command there). SCRIPT LOAD is idempotent."""
    client().script_load(script(name).source)


async def arun(name: str, keys: list[str], args: list[Any]) -> Any:
    """`run` on the asyncio client (batched, see Batcher); NOSCRIPT answered by a reload."""
    found, on = script(name), batcher()
    try:
        return await on.execute("EVALSHA", found.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        # Batched too: after a restart every request in flight is told NOSCRIPT at once.
        await on.script_load(found.source, keys[0] if keys else None)
        return await on.execute("EVALSHA", found.sha, len(keys), *keys, *args)


def _refusal_call(event_id: str, reason: str) -> tuple[str, list[str], list[str]]:
    k = event_keys(event_id)
    return "refused", [k.meta, k.refused], [reason]


def count_refusal(event_id: str, reason: str) -> None:
    """Count a refused join of an existing event; a failure to count is only logged
    (the refusal the client gets matters more than the count)."""
    try:
        run(*_refusal_call(event_id, reason))
    except REDIS_ERRORS as exc:
        log.warning("could not count a refusal (%s) for %s: %r", reason, event_id, exc)


async def acount_refusal(event_id: str, reason: str) -> None:
    try:
        async with asyncio.timeout(ASYNC_REQUEST_TIMEOUT):
            await arun(*_refusal_call(event_id, reason))
    except (*REDIS_ERRORS, TimeoutError) as exc:
        log.warning("could not count a refusal (%s) for %s: %r", reason, event_id, exc)


def run(name: str, keys: list[str], args: list[Any], *, on: Any = None) -> Any:
    """Run a script on the default client, or on `on`: another client, or a pipeline
    (after `load(name)`), where it is queued rather than run."""
    if isinstance(on, _PIPELINES):
        # As a command: a cluster's pipeline refuses its `evalsha` method, not EVALSHA.
        return on.execute_command("EVALSHA", script(name).sha, len(keys), *keys, *args)
    return script(name)(keys, args, client() if on is None else on)
