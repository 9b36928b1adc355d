"""Per-client request limits, counted in Redis so every app server shares them."""

import ipaddress
from collections.abc import Mapping
from functools import lru_cache
from typing import ClassVar

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from ticketing import redis as r
from ticketing.errors import rate_limited

WINDOW_MS = 1000


@lru_cache(maxsize=4096)
def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in settings.TRUSTED_PROXIES)


def client_ip(meta: Mapping) -> str:
    """The address of the person, not of our load balancer.

    X-Forwarded-For is believed only when the peer is a trusted proxy, and then
    read from the right: each trusted hop appended the address it saw, and the
    first untrusted one is the client. Anything further left could be forged.
    """
    peer = meta.get("REMOTE_ADDR", "")
    if not _trusted(peer):
        return peer
    hops = [h.strip() for h in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [h for h in hops if h]
    for hop in reversed(hops):
        if not _trusted(hop):
            return hop
    return hops[0] if hops else peer


class RedisRateThrottle(BaseThrottle):
    """A DRF throttle counted by lua/ratelimit.lua: per client address and scope, per
    second, shared by every app server. The limit is a setting read on each request
    (0 turns it off). The fast lane runs the same count with `acheck`."""

    scope: ClassVar[str]
    setting: ClassVar[str]

    def _call(self, meta: Mapping) -> tuple[str, list[str], list] | None:
        per_second = getattr(settings, self.setting)
        if per_second <= 0:
            return None
        return "ratelimit", [r.ratelimit_key(self.scope, client_ip(meta))], [per_second, WINDOW_MS]

    def allow_request(self, request: Request, view: APIView) -> bool:
        call = self._call(request.META)
        if call is None:
            return True
        allowed, reset_ms = r.run(*call)
        self._wait = reset_ms / 1000
        return bool(allowed)

    def wait(self) -> float:
        return self._wait

    async def acheck(self, meta: Mapping) -> None:
        """Raise RATE_LIMIT past the limit, as DRF's Throttled would read."""
        call = self._call(meta)
        if call is None:
            return
        allowed, reset_ms = await r.arun(*call)
        if not allowed:
            raise rate_limited(reset_ms / 1000)


class JoinThrottle(RedisRateThrottle):
    scope, setting = "join", "RATE_LIMIT_JOIN"  # join and rejoin share it, as in the seed


class LeaveThrottle(RedisRateThrottle):
    scope, setting = "leave", "RATE_LIMIT_LEAVE"
