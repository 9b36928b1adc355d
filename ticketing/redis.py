"""The one place that talks to Redis: the client, the key names and the Lua scripts.

Every key of an event carries the hash tag `{<eventId>}` so that all of them live in
one Redis Cluster slot and a script may touch them together.
"""

from functools import cache
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django_redis import get_redis_connection
from redis.commands.core import Script

LUA_DIR = Path(settings.BASE_DIR) / "lua"

# Every known event id, so the admission tick can find them without the database.
EVENTS_KEY = "ticket:events"

# The token index is split into this many small hashes. Small hashes stay in Redis'
# compact listpack encoding (up to 128 entries): ~25 bytes per person instead of ~90
# for one big hash. 65,536 buckets keep 2,000,000 people at ~30 per bucket.
TOKEN_BUCKET_BYTES = 2


def client() -> redis.Redis:
    """The process-wide Redis client (django-redis' pool, hiredis parser)."""
    return get_redis_connection("default")


def now_ms() -> int:
    """Redis' clock, the one that arrival order and active windows are measured on."""
    seconds, micros = client().time()
    return seconds * 1000 + micros // 1000


def key(event_id: str, *parts: str) -> str:
    """`ticket:{<eventId>}:<entity>[:<id>]`, the naming rule of DESIGN.md."""
    return f"ticket:{{{event_id}}}:" + ":".join(parts)


class EventKeys:
    """All key names of one event, built once per request."""

    __slots__ = (
        "event_id",
        "meta",
        "seq",
        "popped",
        "line",
        "left",
        "active",
        "seats",
        "outbox",
        "tick",
        "admit_log",
        "bucket_prefix",
    )

    def __init__(self, event_id: str) -> None:
        self.event_id = event_id
        self.meta = key(event_id, "meta")
        # Arrival order: one counter for all app servers, so no server's clock decides.
        self.seq = key(event_id, "queue", "seq")
        # How many arrival numbers have left the head of the line.
        self.popped = key(event_id, "queue", "popped")
        # The waiting line itself: tokens (16 raw bytes) in arrival order.
        self.line = key(event_id, "queue", "line")
        # Arrival numbers of people who left while still in line (holes in `line`).
        self.left = key(event_id, "queue", "left")
        self.active = key(event_id, "active", "users")
        self.seats = key(event_id, "seats", "remaining")
        self.outbox = key(event_id, "booking", "outbox")
        self.tick = key(event_id, "admit", "tick")
        self.admit_log = key(event_id, "admit", "log")
        self.bucket_prefix = key(event_id, "tokens", "")

    def bucket(self, token: bytes) -> str:
        """The token-index hash that holds this token's state."""
        return self.bucket_prefix + token[:TOKEN_BUCKET_BYTES].hex()

    def booked(self, token: str) -> str:
        return key(self.event_id, "booking", "done", token)

    def pattern(self) -> str:
        return key(self.event_id, "*")


@cache
def script(name: str) -> Script:
    """The Lua script `lua/<name>.lua`.

    redis-py's Script runs it by SHA and, on NOSCRIPT (a restarted or flushed
    server), loads the source once and retries: one round trip in the normal case.
    """
    return Script(client(), (LUA_DIR / f"{name}.lua").read_text())


def run(name: str, keys: list[str], args: list[Any], *, on: Any = None) -> Any:
    """Run a script on the default client (or on `on`, a pipeline or another client)."""
    return script(name)(keys=keys, args=args, client=client() if on is None else on)
