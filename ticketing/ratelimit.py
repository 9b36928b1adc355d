"""Per-client request limits, counted in Redis so every app server shares them."""

import ipaddress
import logging
import uuid
from collections.abc import Mapping
from functools import lru_cache
from typing import ClassVar, NamedTuple

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from ticketing import store
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

    allowed: int
    reset_ms: int


_RATELIMIT = store.Caller("ratelimit", passes="counter site limit window site_limit", reply=Verdict)


def limit_call(counter: str, limit: int, window_ms: int) -> store.Call:
    """lua/ratelimit.lua counting one more against `counter`, for `store.run`."""
    return _RATELIMIT.call(counter=counter, limit=limit, window=window_ms)


def client_limit_call(scope: str, meta: Mapping, limit: int, window_ms: int) -> store.Call:
    """lua/ratelimit.lua counting the request's client in each of its units, for
    `store.run`: `limit` in its own, IPV6_48_LIMIT_FACTOR times it in its /48."""
    keys = store.ratelimit_keys(scope, client_units(client_ip(meta)))
    if len(keys) == 1:
        return limit_call(keys[0], limit, window_ms)
    counter, site = keys
    site_limit = limit * settings.IPV6_48_LIMIT_FACTOR
    return _RATELIMIT.call(counter=counter, site=site, limit=limit, window=window_ms, site_limit=site_limit)


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
    units = [packed_net(unit) for unit in client_units(client_ip(meta))]
    return units[0], units[1] if len(units) > 1 else b""


class RedisRateThrottle(BaseThrottle):
    """A DRF throttle counted by lua/ratelimit.lua: per client (`client_units`: an
    IPv4 address, or an IPv6 /64 and its /48) and scope, per second, shared by every
    app server. The limit is a setting read on each request (0 turns it off). The
    fast lane runs the same count with `acheck`."""

    scope: ClassVar[str]
    setting: ClassVar[str]

    def _call(self, meta: Mapping, who: str | None = None) -> store.Call | None:
        per_second = getattr(settings, self.setting)
        if per_second <= 0:
            return None
        if who is None:
            return client_limit_call(self.scope, meta, per_second, WINDOW_MS)
        return limit_call(store.ratelimit_key(self.scope, who), per_second, WINDOW_MS)

    def who(self, request: Request) -> str | None:
        """What is counted: None for the client's address, "" for nothing."""
        return None

    def allow_request(self, request: Request, view: APIView) -> bool:
        who = self.who(request)
        call = None if who == "" else self._call(request.META, who)
        if call is None:
            return True
        allowed, reset_ms = store.run(call)
        self._wait = reset_ms / 1000
        return bool(allowed)

    def wait(self) -> float:
        return self._wait

    async def acheck(self, meta: Mapping) -> None:
        """Raise RATE_LIMIT past the limit, as DRF's Throttled would read."""
        call = self._call(meta)
        if call is None:
            return
        allowed, reset_ms = await store.arun(call)
        if not allowed:
            raise rate_limited(reset_ms / 1000)


class JoinThrottle(RedisRateThrottle):
    scope, setting = "join", "RATE_LIMIT_JOIN"  # join and rejoin share it, as in the seed


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
