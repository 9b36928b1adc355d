"""The waiting room: thin Python over the Lua scripts in `lua/`.

Each public function is one atomic script call (one Redis round trip), so two app
servers can never interleave a check and an act.
"""

import logging
import random
import re
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from queue_app.models import EVENT_ID_PATTERN, Event
from ticketing import redis as r
from ticketing.errors import ApiError, validation_error

log = logging.getLogger(__name__)
_EVENT_ID = re.compile(EVENT_ID_PATTERN)


@dataclass(frozen=True, slots=True)
class Token:
    text: str  # canonical UUID form, as clients see it
    raw: bytes  # the 16 bytes kept in Redis

    @classmethod
    def new(cls) -> "Token":
        value = uuid.uuid4()
        return cls(str(value), value.bytes)


def parse_token(value: object) -> Token:
    if value is None or value == "":
        raise ApiError(400, "MISSING_TOKEN", "token is required.")
    if not isinstance(value, str) or len(value) > 45:
        raise validation_error("token must be a UUID string.")
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise validation_error("token must be a UUID string.") from None
    return Token(str(parsed), parsed.bytes)


def parse_event_id(value: object) -> str:
    if value is None or value == "":
        return settings.EVENT_ID
    if not isinstance(value, str) or not _EVENT_ID.match(value):
        raise validation_error("eventId must be 1-64 letters, digits, '.', '_' or '-'.")
    return value


def _event_not_found(event_id: str) -> ApiError:
    return ApiError(404, "EVENT_NOT_FOUND", f"No event {event_id!r}.")


def _event_closed() -> ApiError:
    return ApiError(403, "EVENT_CLOSED", "Booking for this event has closed.")


def _already_booked(reservation_id: bytes) -> ApiError:
    return ApiError(
        409,
        "ALREADY_BOOKED",
        "This token has already booked.",
        reservationId=reservation_id.decode(),
    )


def _enqueue(event_id: str, token: Token) -> tuple[str, int | None]:
    k = r.EventKeys(event_id)
    outcome, *rest = r.run(
        "join",
        [k.meta, k.seq, k.line, k.bucket(token.raw), k.active, k.booked(token.text)],
        [token.raw],
    )
    outcome = outcome.decode()
    if outcome == "EVENT_NOT_FOUND":
        raise _event_not_found(event_id)
    if outcome == "EVENT_CLOSED":
        raise _event_closed()
    if outcome == "ALREADY_BOOKED":
        raise _already_booked(rest[1])
    return outcome, (rest[0] if outcome == "JOINED" else None)


def queue_join(*, event_id: str) -> dict:
    """A new person: a fresh token at the back of the line."""
    token = Token.new()
    _, joined_at = _enqueue(event_id, token)
    return {"token": token.text, "eventId": event_id, "joinedAt": joined_at}


def queue_rejoin(*, event_id: str, token: Token) -> dict:
    """A returning person (F5): same place if still waiting or active, else the back."""
    outcome, joined_at = _enqueue(event_id, token)
    return {
        "token": token.text,
        "eventId": event_id,
        "joinedAt": joined_at,
        "rejoined": outcome != "JOINED",
        "status": "ACTIVE" if outcome == "ACTIVE" else "WAITING",
    }


def queue_leave(*, event_id: str, token: Token) -> dict:
    k = r.EventKeys(event_id)
    removed = r.run("leave", [k.meta, k.bucket(token.raw), k.left], [token.raw])
    if removed < 0:
        raise _event_not_found(event_id)
    return {"removed": removed == 1}


# The seed's adaptive polling: the further back, the less often.
_POLL_STEPS_MS = ((100_000, 10_000), (10_000, 5_000), (1_000, 3_000), (100, 2_000))
_ACTIVE_POLL_MS = 2_000


def next_poll_ms(status: str, rank: int | None) -> int:
    """Base interval of the seed's table with +/-20 % jitter, so that a crowd that
    joined in the same second does not poll in the same millisecond forever."""
    if status == "ACTIVE":
        base = _ACTIVE_POLL_MS
    elif status == "WAITING":
        base = next((ms for above, ms in _POLL_STEPS_MS if rank is not None and rank > above), 1_000)
    else:
        return 0  # nothing left to wait for
    return int(base * random.uniform(0.8, 1.2))


def queue_poll(*, event_id: str, token: Token) -> dict:
    k = r.EventKeys(event_id)
    reply = r.run(
        "poll",
        [k.meta, k.seq, k.popped, k.left, k.bucket(token.raw), k.active, k.booked(token.text), k.seats],
        [token.raw],
    )
    state = reply[0].decode()
    if state == "EVENT_NOT_FOUND":
        raise _event_not_found(event_id)
    _, waiting, seats, event_status, detail, rate = reply
    rank = detail if state == "WAITING" else None
    rate = float(rate)
    return {
        "status": state,
        "rank": rank,
        "totalWaiting": waiting,
        "ahead": rank - 1 if rank is not None else None,
        "behind": waiting - rank if rank is not None else None,
        "remainingSeats": max(seats, 0),  # a recount may go below 0 until releases land
        "nextPollMs": next_poll_ms(state, rank),
        "activeExpiresAt": int(detail) if state == "ACTIVE" else None,
        "reservationId": detail.decode() if state == "BOOKED" else None,
        "eventId": event_id,
        "eventStatus": event_status.decode(),
        "soldOut": seats <= 0,
        "etaSeconds": (
            round((rank - 1) / rate)
            if rank is not None and rate > 0 and seats > 0 and event_status == b"OPEN"
            else None
        ),
    }


# --- Admission -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    event_id: str
    outcome: str  # ADMITTED, ALREADY_TICKED, NOT_OPEN, SOLD_OUT, EMPTY, FULL, EVENT_NOT_FOUND
    admitted: int
    waiting: int
    active: int


def _admit_args(event_id: str) -> tuple[list[str], list[str]]:
    k = r.EventKeys(event_id)
    keys = [k.meta, k.seq, k.popped, k.line, k.left, k.active, k.seats, k.tick, k.admit_log]
    return keys, [k.bucket_prefix]


def event_admit(event_id: str) -> Tick:
    """One admission tick for one event (at most once per second, see lua/admit.lua)."""
    outcome, *numbers = r.run("admit", *_admit_args(event_id))
    return Tick(event_id, outcome.decode(), *numbers)


def events_admit() -> list[Tick]:
    """The tick for every known event, in one pipelined round trip.

    Each event's script decides for itself: only OPEN events with seats admit.
    """
    event_ids = sorted(e.decode() for e in r.client().smembers(r.EVENTS_KEY))
    if not event_ids:
        return []
    r.load("admit")
    pipe = r.client().pipeline(transaction=False)
    for event_id in event_ids:
        r.run("admit", *_admit_args(event_id), on=pipe)
    replies = pipe.execute(raise_on_error=False)
    ticks = []
    for event_id, reply in zip(event_ids, replies, strict=True):
        if isinstance(reply, Exception):
            log.error("admission tick failed for %s: %s", event_id, reply)
            continue
        outcome, *numbers = reply
        if outcome == b"EVENT_NOT_FOUND":  # wiped from Redis: stop ticking it
            r.client().srem(r.EVENTS_KEY, event_id)
            continue
        ticks.append(Tick(event_id, outcome.decode(), *numbers))
    return ticks


def queue_join_many(*, event_id: str, count: int, chunk: int = 10_000) -> None:
    """Put `count` fresh tokens in line through the join script, pipelined: the way
    load tests and drills fill a line with millions without HTTP."""
    k = r.EventKeys(event_id)
    r.load("join")
    while count > 0:
        pipe = r.client().pipeline(transaction=False)
        for _ in range(min(chunk, count)):
            token = Token.new()
            r.run(
                "join",
                [k.meta, k.seq, k.line, k.bucket(token.raw), k.active, k.booked(token.text)],
                [token.raw],
                on=pipe,
            )
        count -= len(pipe.execute())


# --- Operator side -------------------------------------------------------------


class SeatsBelowSold(ValueError):
    pass


def event_publish(event: Event, *, sold: int = 0) -> int:
    """Copy the operator's record into Redis, where the hot paths read it.

    Takes effect on the next request and the next admission tick: no restart.
    Returns seats left.
    """
    k = r.EventKeys(event.event_id)
    fields = {
        "status": event.status,
        "name": event.name,
        "admitPerSecond": event.admit_per_second,
        "windowSeconds": event.active_window_seconds,
        "maxActive": event.max_active_users,
        "maxPerBooking": event.max_seats_per_booking,
    }
    pairs = [x for item in fields.items() for x in item]
    outcome, left = r.run(
        "event_sync",
        [k.meta, k.seats],
        [event.total_seats, sold, int(time.time() * 1000), *pairs],
    )
    if outcome == b"SEATS_BELOW_SOLD":
        raise SeatsBelowSold(f"{event.event_id}: {event.total_seats} seats is fewer than already sold.")
    r.client().sadd(r.EVENTS_KEY, event.event_id)
    return left


def event_wipe(event_id: str) -> int:
    """Delete every Redis key of the event (its line, counters, marks). Returns how many."""
    client = r.client()
    deleted = 0
    batch: list[bytes] = []
    for name in client.scan_iter(match=r.EventKeys(event_id).pattern(), count=1000):
        batch.append(name)
        if len(batch) >= 1000:
            deleted += client.unlink(*batch)
            batch.clear()
    if batch:
        deleted += client.unlink(*batch)
    return deleted


def event_live_numbers(event_id: str) -> dict:
    """Waiting, active, seats left and admitted in the last minute, for operators."""
    k = r.EventKeys(event_id)
    now = r.now_ms()
    pipe = r.client().pipeline(transaction=False)
    pipe.get(k.seq).get(k.popped).zcard(k.left)
    pipe.zcount(k.active, now, "+inf").get(k.seats).hget(k.meta, "status").lrange(k.admit_log, 0, 60)
    seq, popped, left, active, seats, status, ticks = pipe.execute()
    recent = (tick.split(b":") for tick in ticks)
    return {
        "waiting": int(seq or 0) - int(popped or 0) - left,
        "active": active,
        "seatsLeft": int(seats) if seats is not None else None,
        "status": status.decode() if status else None,
        "admittedLastMinute": sum(int(n) for second, n in recent if int(second) * 1000 > now - 60_000),
    }
