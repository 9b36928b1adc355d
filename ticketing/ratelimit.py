"""Per-client request limits, counted in Redis so every app server shares them."""

import asyncio
import ipaddress
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import ClassVar, NamedTuple

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from ticketing import store
from ticketing.conf import setting
from ticketing.errors import rate_limited

WINDOW_MS = 1000
logger = logging.getLogger(__name__)


@lru_cache(maxsize=4096)
def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in settings.TRUSTED_PROXIES)


_warned_untrusted_xff = False


def _warn_untrusted_xff(peer: str) -> None:
    """Once per process: a proxy we do not trust is in front of us. Every client
    then counts as the proxy's address, and all of them share one rate limit."""
    global _warned_untrusted_xff
    _warned_untrusted_xff = True
    logger.warning(
        "A request carries X-Forwarded-For from %s, which is not in TRUSTED_PROXIES (%s): "
        "rate limits count that address, not the client. If it is your proxy, add it "
        "to TRUSTED_PROXIES.",
        peer,
        ", ".join(map(str, settings.TRUSTED_PROXIES)) or "empty",
    )


def client_ip(meta: Mapping) -> str:
    """The address of the person, not of our load balancer.

    X-Forwarded-For is believed only when the peer is a trusted proxy, and then
    read from the right: each trusted hop appended the address it saw, and the
    first untrusted one is the client. Anything further left could be forged.
    """
    peer = meta.get("REMOTE_ADDR", "")
    if not _trusted(peer):
        if not _warned_untrusted_xff and "HTTP_X_FORWARDED_FOR" in meta:
            _warn_untrusted_xff(peer)
        return peer
    hops = [h.strip() for h in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [h for h in hops if h]
    for hop in reversed(hops):
        if not _trusted(hop):
            return hop
    return hops[0] if hops else peer


@lru_cache(maxsize=65536)
def client_units(address: str) -> tuple[str, ...]:
    """What one client is counted as, narrowest first (docs/fairness.md: Who is a
    client): an IPv4 address; or an IPv6 /64 (a home or a phone is handed a whole
    /64, 2^64 addresses to rotate through) and its /48 (a site: a tunnel broker
    hands out /48s for free, 65,536 /64s each), which count with limits of their
    own. IPv6 that carries an IPv4 address (IPv4-mapped ::ffff:0:0/96, 6to4
    2002::/16, Teredo 2001::/32) is that IPv4 address: whoever holds the IPv4
    address holds them all."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return (address,)
    if ip.version == 4:
        return (str(ip),)
    carried = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
    if carried is not None:
        return (str(carried),)
    return tuple(str(ipaddress.IPv6Network((ip, bits), strict=False)) for bits in (64, 48))


class Verdict(NamedTuple):
    """lua/ratelimit.lua's answer (its header names these fields in this order)."""

    granted: int
    reset_ms: int


_RATELIMIT = store.Caller("ratelimit", passes="counter site limit window count site_limit", reply=Verdict)


def limit_call(counter: str, limit: int, window_ms: int, count: int = 1) -> store.Call:
    """lua/ratelimit.lua counting `count` more against `counter`, for `store.run`."""
    return _RATELIMIT.call(counter=counter, limit=limit, window=window_ms, count=count)


def _counted(scope: str, meta: Mapping) -> tuple[str, ...]:
    return _counters(scope, client_ip(meta))


@lru_cache(maxsize=65536)
def _counters(scope: str, address: str) -> tuple[str, ...]:
    """The counters of an address in a scope (kept, as `client_units` keeps its
    units: a client that joins again is counted again)."""
    return tuple(store.ratelimit_keys(scope, client_units(address)))


def _units_call(keys: Sequence[str], limit: int, window_ms: int, count: int = 1) -> store.Call:
    """lua/ratelimit.lua on a client's counters (`_counted`): `limit` in its own,
    IPV6_48_LIMIT_FACTOR times it in its /48."""
    if len(keys) == 1:
        return limit_call(keys[0], limit, window_ms, count)
    counter, site = keys
    site_limit = limit * settings.IPV6_48_LIMIT_FACTOR
    return _RATELIMIT.call(
        counter=counter, site=site, limit=limit, window=window_ms, count=count, site_limit=site_limit
    )


def client_limit_call(scope: str, meta: Mapping, limit: int, window_ms: int) -> store.Call:
    """lua/ratelimit.lua counting the request's client in each of its units, for
    `store.run`."""
    return _units_call(_counted(scope, meta), limit, window_ms)


@lru_cache(maxsize=65536)
def packed_net(net: str) -> bytes:
    """A unit of `client_units` in its few bytes (4 for IPv4, 8 for an IPv6 /64, 6
    for a /48): what the join script keeps per client address."""
    try:
        network = ipaddress.ip_network(net)
    except ValueError:
        return net.encode()  # not an address (a test client, a Unix socket): as it is
    return network.network_address.packed[: network.prefixlen // 8]


def client_address(meta: Mapping) -> tuple[bytes, bytes]:
    """The request's client for the join's cap on places (`packed_net`): its address
    (IPv4, or IPv6 /64), and its IPv6 /48 (b"" for IPv4)."""
    return packed_address(client_ip(meta))


@lru_cache(maxsize=65536)
def packed_address(address: str) -> tuple[bytes, bytes]:
    """`client_address` of an address (`client_ip`)."""
    units = [packed_net(unit) for unit in client_units(address)]
    return units[0], units[1] if len(units) > 1 else b""


def _wait_ms(verdict: Verdict) -> int:
    """0 when the request was let through, else ms until its window ends."""
    return 0 if verdict.granted else max(1, verdict.reset_ms)


# A process holds at most this many of a client's requests unused, and at most a
# quarter of its limit.
LEASE_MOST = 1024


class _Lease:
    __slots__ = ("left", "until", "size", "full")

    def __init__(self, size: int) -> None:
        self.left = 0  # requests taken from the counters, not yet let through
        self.until = 0.0  # (monotonic) the counters' window ends, and the lease with it
        self.size = size  # the last ask's count: the next one asks twice that
        self.full = False  # the counters are at their limit until `until`


class Leases:
    """A client's requests let through by this process from a lease on its shared
    counters, so that a client who asks again costs no Redis round trip.

    The first request of a client in a window asks lua/ratelimit.lua for one; if the
    same client asks again on this process within the window, the next ask takes
    two, then four (at most LEASE_MOST, and a quarter of the limit), and the process
    lets the lease's requests through itself. Every request let through was counted
    in Redis before it was, so the limit holds across every process: a client
    spraying several processes gets at most the limit per window, and loses what a
    process leased for it and it did not use there (at most a quarter of its limit
    per process). A client at its limit is refused here, without asking, until its
    window ends: a flood past the limit costs Redis nothing.
    On the fast lane, the requests of a client that arrive while an ask for it is
    in flight wait for it rather than ask too.
    """

    def __init__(self) -> None:
        self._table: dict[tuple[str, ...], _Lease] = {}
        self._lock = threading.Lock()
        self._asking: dict[tuple[asyncio.AbstractEventLoop, tuple[str, ...]], asyncio.Future] = {}
        self._swept = 0.0

    def take(self, keys: tuple[str, ...]) -> int | None:
        """0: let it through; ms until the window ends: refuse it; None: ask."""
        now = time.monotonic()
        with self._lock:
            lease = self._table.get(keys)
            if lease is None or now >= lease.until:
                return None
            if lease.left > 0:
                lease.left -= 1
                return 0
            return max(1, int((lease.until - now) * 1000)) if lease.full else None

    def size(self, keys: tuple[str, ...], limit: int) -> int:
        """How many the next ask for this client takes."""
        now = time.monotonic()
        with self._lock:
            if now >= self._swept + 1:
                self._table = {k: lease for k, lease in self._table.items() if lease.until > now}
                self._swept = now
            lease = self._table.get(keys)
            if lease is None or now >= lease.until:
                return 1
            return max(1, min(2 * lease.size, LEASE_MOST, limit // 4))

    def heard(self, keys: tuple[str, ...], asked_at: float, asked: int, verdict: Verdict) -> int:
        """An ask's answer, of which the asking request takes one if granted: 0 to
        let it through, else ms until its window ends."""
        granted, reset_ms = verdict
        with self._lock:
            lease = self._table[keys] = _Lease(asked)
            lease.until = asked_at + reset_ms / 1000
            lease.left = max(0, granted - 1)
            lease.full = granted < asked
        return _wait_ms(verdict)

    def check(self, keys: Sequence[str], limit: int) -> int:
        """Let one request through (0) or refuse it (ms until its window ends),
        asking Redis on this thread when the lease has none left."""
        counted = tuple(keys)
        verdict = self.take(counted)
        if verdict is None:
            size, asked_at = self.size(counted, limit), time.monotonic()
            verdict = self.heard(
                counted, asked_at, size, store.run(_units_call(keys, limit, WINDOW_MS, size))
            )
        return verdict

    async def acheck(self, keys: Sequence[str], limit: int) -> int:
        """`check` on the fast lane: one ask in flight per client, the others wait."""
        counted = tuple(keys)
        verdict = self.take(counted)
        if verdict is not None:
            return verdict  # (nearly always: from the lease)
        loop = asyncio.get_running_loop()
        while (verdict := self.take(counted)) is None:
            asking = self._asking.get((loop, counted))
            if asking is None:
                break
            # Then take from what it leased; shielded: a waiter cancelled must not
            # cancel the ask that the others wait for.
            await asyncio.shield(asking)
        else:
            return verdict
        done = self._asking[(loop, counted)] = loop.create_future()
        try:
            size, asked_at = self.size(counted, limit), time.monotonic()
            reply = await store.arun(_units_call(keys, limit, WINDOW_MS, size))
        finally:
            del self._asking[(loop, counted)]
            done.set_result(None)
        return self.heard(counted, asked_at, size, reply)

    def forget(self) -> None:
        """A forked child starts with no leases: its parent's are the parent's."""
        self._table, self._lock, self._asking = {}, threading.Lock(), {}


class RedisRateThrottle(BaseThrottle):
    """A DRF throttle counted by lua/ratelimit.lua: per client (`client_units`: an
    IPv4 address, or an IPv6 /64 and its /48) and scope, per second, shared by every
    app server. The limit is a setting read on each request (0 turns it off). The
    fast lane runs the same count with `acheck`."""

    scope: ClassVar[str]
    setting: ClassVar[str]
    # Requests let through from the process's leases on the counters, rather than
    # each counted by a round trip (`Leases`).
    leases: ClassVar[Leases | None] = None

    def _keys(self, meta: Mapping, who: str | None) -> Sequence[str]:
        return _counted(self.scope, meta) if who is None else (store.ratelimit_key(self.scope, who),)

    def who(self, request: Request) -> str | None:
        """What is counted: None for the client's address, "" for nothing."""
        return None

    def allow_request(self, request: Request, view: APIView) -> bool:
        who, limit = self.who(request), getattr(settings, self.setting)
        if who == "" or limit <= 0:
            return True
        keys = self._keys(request.META, who)
        if self.leases is not None:
            wait_ms = self.leases.check(keys, limit)
        else:
            wait_ms = _wait_ms(store.run(_units_call(keys, limit, WINDOW_MS)))
        self._wait = wait_ms / 1000
        return not wait_ms

    def wait(self) -> float:
        return self._wait

    async def acheck(self, address: str) -> None:
        """Raise RATE_LIMIT past the limit for the client at `address` (`client_ip`),
        as DRF's Throttled would read."""
        limit = setting(self.setting)
        if limit <= 0:
            return
        keys = _counters(self.scope, address)
        if self.leases is None:
            wait_ms = _wait_ms(await store.arun(_units_call(keys, limit, WINDOW_MS)))
        elif (wait_ms := self.leases.take(keys)) is None:  # (nearly always from the lease)
            wait_ms = await self.leases.acheck(keys, limit)
        if wait_ms:
            raise rate_limited(wait_ms / 1000)


class JoinThrottle(RedisRateThrottle):
    """Joins and rejoins per client, as in the seed. Arrivals are the load of an
    opening, so a client that joins again is let through from a lease (`Leases`)."""

    scope, setting = "join", "RATE_LIMIT_JOIN"
    leases = Leases()


os.register_at_fork(after_in_child=JoinThrottle.leases.forget)


class ChallengeThrottle(RedisRateThrottle):
    """Proof-of-work challenges per client: each costs a signature, and a script
    should not stock up on them."""

    scope, setting = "challenge", "RATE_LIMIT_CHALLENGE"


class LeaveThrottle(RedisRateThrottle):
    scope, setting = "leave", "RATE_LIMIT_LEAVE"


class NotifyThrottle(RedisRateThrottle):
    """Notify-me requests per client: each names an address to mail, and a script
    should not make this service mail strangers (one mail per place at most)."""

    scope, setting = "notify", "RATE_LIMIT_NOTIFY"


class BookingThrottle(RedisRateThrottle):
    """Bookings per client address: a script holding many tokens books from one place."""

    scope, setting = "booking", "RATE_LIMIT_BOOKING"


class BookingTokenThrottle(RedisRateThrottle):
    """Bookings per token: one person hammering the button, or a script retrying one
    token in a loop. A body without a token string is left to validation."""

    scope, setting = "booking-token", "RATE_LIMIT_BOOKING_TOKEN"

    def who(self, request: Request) -> str | None:
        data = request.data
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str) or len(token) > 45:
            return ""
        try:
            return str(uuid.UUID(token))  # one spelling per token: case or braces change nothing
        except ValueError:
            return ""
