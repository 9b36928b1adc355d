"""Per-client request limits, counted in Redis so every app server shares them."""

import ipaddress
import math
from collections.abc import Mapping
from functools import lru_cache

from django.conf import settings

from ticketing import redis as r
from ticketing.errors import ApiError

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


def rate_limit(meta: Mapping, scope: str, per_second: int) -> None:
    """Refuse with 429 RATE_LIMIT past `per_second` requests; 0 turns the limit off."""
    if per_second <= 0:
        return
    counter = f"ticket:ratelimit:{scope}:{client_ip(meta)}"
    allowed, reset_ms = r.run("ratelimit", [counter], [per_second, WINDOW_MS])
    if not allowed:
        raise ApiError(
            429,
            "RATE_LIMIT",
            "Too many requests; slow down.",
            headers={"Retry-After": str(max(1, math.ceil(reset_ms / 1000)))},
        )
