"""The Redis clients: the process's client, the fast lane's batchers, and the
Redis Cluster support.

On a Redis Cluster (REDIS_CLUSTER=true) the clients are redis-py's cluster clients,
built here, and the differences stay here: the fast lane's batcher sends each
command to the node owning its key, `now_ms(event_id)` reads the clock of the
event's node, `event_pipeline` goes to the event's node, and `scan` and
`delete_matching` visit every primary.
Callers never ask which kind of Redis they have.
"""

import asyncio
import inspect
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
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
from ticketing.store.keys import event_keys

log = logging.getLogger(__name__)

_client: redis.Redis | redis.cluster.RedisCluster | None = None

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


# This process's id, kept here: a forked child sets its own. (`wake` runs on every
# request, and os.getpid() is a system call.)
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


class EverySecond:
    """Counts the process keeps itself (request latencies, refused joins) and adds to
    Redis once a second, on a thread of its own started by the first `wake` in each
    process (a forked child starts its own). A write that fails keeps its counts for
    the next one, and is logged once until one succeeds. A subclass counts into
    `counts` under `lock` (and wakes the thread there), and says how they are written
    (`write`)."""

    def __init__(self, name: str) -> None:
        self.name, self.pid, self.failing = name, 0, False
        self.lock = threading.Lock()
        self.counts: Counter = Counter()

    def wake(self) -> None:
        if self.pid != _pid:
            self.pid = _pid
            threading.Thread(target=self._run, name=self.name, daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(1)
            self.flush()

    def taken(self) -> Counter:
        """Under `lock`: the counts to write now, which the process no longer holds."""
        counts, self.counts = self.counts, Counter()
        return counts

    def write(self, counts: Counter) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        with self.lock:
            counts = self.taken()
        if not counts:
            return
        try:
            self.write(counts)
        except REDIS_ERRORS as exc:
            with self.lock:
                self.counts.update(counts)
            if not self.failing:
                log.warning("could not write %s (kept for the next try): %r", self.name, exc)
            self.failing = True
        else:
            self.failing = False


# What must reach Redis before a worker ends (queue_app/arrivals.py gives back its
# blocks of arrival numbers), run by `aclose` in the order registered.
_on_close: list[Callable[[], Awaitable[None]]] = []


def on_close(callback: Callable[[], Awaitable[None]]) -> None:
    """Have `callback` run when an ASGI worker shuts down, before its client closes."""
    _on_close.append(callback)


async def aclose() -> None:
    """Close the running loop's asyncio client (an ASGI worker shutting down), after the
    callbacks `on_close` registered (a failing one is logged, and the others run)."""
    for callback in _on_close:
        try:
            await callback()
        except Exception:
            log.exception("a callback before the Redis client's close failed")
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
