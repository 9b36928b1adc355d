"""Queue tokens this service can recognise as its own, carrying their arrival number.

A token is a UUID (version 8, RFC 9562), so clients that check for a UUID keep
working. Its 122 free bits hold:

    bytes 0-1    the generation of the event's line (meta gen, in hex): 2 random bytes
                 chosen when the line is first written to Redis, new whenever it
                 is rebuilt from nothing
    bytes 2-3    random, chosen at the join; the line keeps them by number (its
                 one record per person, lua/lib/line.lua). The top bit says which
                 line: set for the event's priority lane (docs/modes.md), clear
                 for its general line, whose keys a script then reads
    bytes 9-13   the arrival number, big-endian (40 bits)
    the rest     50 bits of HMAC-SHA1(key, line 0x00 bytes 0-3 number), where the
                 line is the event id, or "<eventId>~p" for its priority lane: bytes
                 4, 5, 7, 14, 15 whole, the low 4 bits of byte 6 (its high nibble
                 is the version, 8) and the low 6 bits of byte 8 (its top two bits
                 are the variant, 0b10)

The number is issued inside the join script (one INCR for every app server), so the
script signs the token (lua/join.lua): Redis' Lua has SHA-1, and the app hands it
the key's HMAC pads. Every other use verifies here, without Redis: a token that was
not signed with the current key, or with the previous one during its grace period,
is refused before it reaches Redis. The token is the place: the line keeps only
the two random bytes per number, so a token of a line that was wiped and rebuilt
(another generation), or one whose number was issued again after Redis came back
from an older snapshot (other random bytes), is never taken for a place of the line.
Forging one means guessing 50 bits, at the join rate limit.

Keys: QUEUE_TOKEN_KEY (default: derived from SECRET_KEY) signs and verifies;
QUEUE_TOKEN_KEY_PREVIOUS still verifies until QUEUE_TOKEN_KEY_PREVIOUS_UNTIL, so a
rotation does not throw everyone in line out.
"""

import hashlib
import hmac
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.crypto import salted_hmac

from ticketing import store
from ticketing.errors import DomainError, validation_error

_NUMBER = slice(9, 14)
MAX_NUMBER = 2**40 - 1
# What a priority lane's tokens are signed for, after the event id.
LANE_SUFFIX = "~p"


@dataclass(frozen=True)
class Key:
    secret: bytes
    until: float | None = None  # unix time after which it no longer verifies

    @cached_property
    def pads(self) -> tuple[bytes, bytes]:
        """HMAC's inner and outer padded keys, for the join script (every join:
        computed once per key)."""
        block = self.secret.ljust(64, b"\0")
        return bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)

    @cached_property
    def hashed_pads(self) -> tuple["hashlib._Hash", "hashlib._Hash"]:
        """SHA-1 states with the pads already hashed: each MAC then hashes only the
        message, and a poll verifies its token in a few microseconds."""
        inner, outer = self.pads
        return hashlib.sha1(inner), hashlib.sha1(outer)


@cache
def keys() -> tuple[Key, ...]:
    """The signing key first, then a previous one still in its grace period."""
    current = (
        settings.QUEUE_TOKEN_KEY.encode()
        or salted_hmac(
            "queue_app.tokens", "queue token key", secret=settings.SECRET_KEY, algorithm="sha256"
        ).digest()
    )
    found = [Key(_fit(current))]
    if settings.QUEUE_TOKEN_KEY_PREVIOUS:
        previous = _fit(settings.QUEUE_TOKEN_KEY_PREVIOUS.encode())
        found.append(Key(previous, until=settings.QUEUE_TOKEN_KEY_PREVIOUS_UNTIL))
    return tuple(found)


def _fit(secret: bytes) -> bytes:
    """A key of at most one SHA-1 block, so that the script's pads are the key's."""
    return hashlib.sha256(secret).digest() if len(secret) > 64 else secret


@receiver(setting_changed)
def _forget_keys(*, setting: str, **kwargs: object) -> None:
    if setting.startswith("QUEUE_TOKEN_KEY") or setting == "SECRET_KEY":
        keys.cache_clear()


GENERATION_BYTES = 2
NONCE_BYTES = 2  # the random part


def new_generation() -> str:
    """A line's generation, as meta keeps it: 4 hex digits (lua/event_sync.lua keeps
    the first one written)."""
    return os.urandom(GENERATION_BYTES).hex()


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def _mac(key: Key, line: str, head: bytes, number: bytes) -> bytes:
    """HMAC-SHA1(key, line 0x00 head number), from the key's hashed pads (`line`:
    what its tokens are signed for, `signed_for`)."""
    return _hmac(key, line.encode() + b"\0" + head + number)


def _hmac(key: Key, message: bytes) -> bytes:
    inner, outer = key.hashed_pads
    inner, outer = inner.copy(), outer.copy()
    inner.update(message)
    outer.update(inner.digest())
    return outer.digest()


def _assemble(head: bytes, number: bytes, mac: bytes) -> bytes:
    return (
        head + mac[0:2] + bytes([0x80 | (mac[2] & 0x0F), mac[3], 0x80 | (mac[4] & 0x3F)]) + number + mac[5:7]
    )


def signed_for(event_id: str, lane: bool) -> str:
    """What a line's tokens are signed for: the event, or its priority lane."""
    return event_id + LANE_SUFFIX if lane else event_id


def lane_nonce(nonce: bytes, lane: bool) -> bytes:
    """The random bytes as a line keeps them: the top bit set in the priority lane's,
    clear in the general line's (lua/join.lua sets it the same way)."""
    return bytes([nonce[0] | 0x80 if lane else nonce[0] & 0x7F]) + nonce[1:]


def mint(
    event_id: str, number: int, gen: bytes | None = None, nonce: bytes | None = None, *, lane: bool = False
) -> bytes:
    """The token the join script would issue for this number, generation and random
    bytes (tests, drills); random ones where none are given."""
    nonce = lane_nonce(new_nonce() if nonce is None else nonce, lane)
    head = (os.urandom(GENERATION_BYTES) if gen is None else gen) + nonce
    encoded = number.to_bytes(5, "big")
    return _assemble(head, encoded, _mac(keys()[0], signed_for(event_id, lane), head, encoded))


def minter(event_id: str, gen: bytes) -> Callable[[int, bytes], bytes]:
    """`mint` for the general line's numbers of one generation, each with random bytes
    as the line keeps them (`lane_nonce`): a block of arrival numbers
    (queue_app/arrivals.py), whose tokens share what is made here once."""
    prefix = event_id.encode() + b"\0" + gen

    def minted(number: int, nonce: bytes) -> bytes:
        encoded = number.to_bytes(5, "big")
        return _assemble(gen + nonce, encoded, _hmac(keys()[0], prefix + nonce + encoded))

    return minted


def reissued(event_id: str, number: int, head: bytes, lane: bool) -> list[bytes]:
    """The tokens the join script would have issued for this number and these first
    4 bytes (the line's generation and the random bytes it keeps for the number) in
    that line (`lane`: the priority lane), one for each key that still verifies: the
    token issued is among them. How an operator's support lookup finds a token from
    the line (queue_app/support.py)."""
    encoded, now = number.to_bytes(5, "big"), time.time()
    line = signed_for(event_id, lane)
    return [
        _assemble(head, encoded, _mac(key, line, head, encoded))
        for key in keys()
        if key.until is None or now <= key.until
    ]


def verify(event_id: str, raw: bytes) -> int | None:
    """The arrival number a token carries, or None when this service did not issue
    it for this event (or its key's grace period is over)."""
    found = place_of(event_id, raw)
    return None if found is None else found[0]


def place_of(event_id: str, raw: bytes) -> tuple[int, bool] | None:
    """The arrival number a token carries and whether it is of the event's priority
    lane, or None when this service did not issue it for this event. A token whose
    random bytes say the lane is checked as the lane's first, then as the general
    line's (a token issued before the event had a lane may have the bit set)."""
    if len(raw) != 16 or raw[6] >> 4 != 8 or raw[8] >> 6 != 2:
        return None
    head, number = raw[:4], raw[_NUMBER]
    for lane in (True, False) if raw[2] & 0x80 else (False,):
        line, now = signed_for(event_id, lane), None
        for key in keys():
            if key.until is not None:
                now = time.time() if now is None else now
                if now > key.until:
                    continue
            if hmac.compare_digest(_assemble(head, number, _mac(key, line, head, number)), raw):
                return int.from_bytes(number, "big"), lane
    return None


def line_keys(event_id: str, raw: bytes) -> store.EventKeys:
    """The keys of the line a token holds its place in: the event's priority lane's
    for a token of the lane, else the general line's (also for a token this service
    did not issue, which no script takes for a place)."""
    found = place_of(event_id, raw)
    return store.event_keys(event_id, found is not None and found[1])


# --- The token as the API carries it ------------------------------------------


@dataclass(frozen=True, slots=True)
class Token:
    text: str  # canonical UUID form, as clients see it
    raw: bytes  # the 16 bytes kept in Redis

    @classmethod
    def of(cls, raw: bytes) -> "Token":
        """The token of 16 bytes, in the UUID form str(uuid.UUID(bytes=raw)) writes
        (spelled out here: a join writes one, at a third of the UUID's cost)."""
        h = raw.hex()
        return cls(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", raw)


def parse_token(value: object) -> Token:
    if value is None or value == "":
        raise DomainError("MISSING_TOKEN")
    if not isinstance(value, str) or len(value) > 45:
        raise validation_error("token must be a UUID string.")
    if len(value) == 36 and value[8] == value[13] == value[18] == value[23] == "-" and value.islower():
        # The form this service hands out, as every poll sends it back: read without
        # building a UUID object.
        try:
            raw = bytes.fromhex(value.replace("-", ""))
        except ValueError:
            raw = b""  # not hex after all: uuid's own refusal below
        if len(raw) == 16:  # (fromhex passes over spaces)
            return Token(value, raw)
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise validation_error("token must be a UUID string.") from None
    return Token(str(parsed), parsed.bytes)


def issued(event_id: str, token: Token) -> int:
    """The token's arrival number; INVALID_TOKEN when this service did not issue it
    for this event. Checked before Redis is asked anything."""
    return issued_place(event_id, token)[0]


def issued_place(event_id: str, token: Token) -> tuple[int, bool]:
    """`issued`, with whether the token is of the event's priority lane."""
    found = place_of(event_id, token.raw)
    if found is None:
        raise DomainError("INVALID_TOKEN")
    return found
