"""An event as operators run it: its record published to Redis, where the hot paths
read it, wiped when it is done with, and its live numbers."""

import json
import time

from queue_app import presale, seating, tokens
from queue_app.models import Draw, Event, EventMessage
from ticketing import metrics, store
from ticketing.errors import REDIS_ERRORS

_EVENT_SYNC = store.Caller("event_sync", passes="total_seats sold opened_at opens_at gen settings")


class SeatsBelowSold(ValueError):
    pass


class LineStarted(ValueError):
    """A start cannot be set for a line anyone has joined, nor removed from a
    pre-queue anyone has joined."""


def event_publish(event: Event, *, sold: int | None = None) -> int:
    """Copy the operator's record into Redis, where the hot paths read it, with the
    seats it has sold (the event's ledger, unless a recount says otherwise) and the
    message to the crowd shown now.

    Takes effect on the next request and the next admission tick: no restart.
    Returns seats left.
    """
    k = store.EventKeys(event.event_id)
    fields = {
        "status": event.status,
        "name": event.name,
        "admitPerSecond": event.admit_per_second,
        "windowSeconds": event.active_window_seconds,
        "maxActive": event.max_active_users,
        "maxPerBooking": event.max_seats_per_booking,
        "requireAccount": int(event.require_account),
        "proofOfWork": event.proof_of_work,
        "maxPerAddress": event.max_places_per_address,
        "maxPerBuyer": event.max_seats_per_buyer,
        "price": event.price,
        "currency": event.currency,
        "holdSeconds": event.hold_seconds,
        "mode": event.mode,
        "claimSeconds": event.claim_seconds,
        "claimGrace": int(event.claim_grace),
        "presaleUntil": presale.until_ms(event),
        "priorityShare": event.priority_share,
        "message": _published_message(event),
    }
    if event.priority_share:
        # Kept once written (HSET leaves the fields it is not given): its lane's
        # tokens outlive a share set back to 0, and the join script reads them.
        fields["hasLane"] = 1
    pairs = [x for item in fields.items() for x in item]
    # A start whose draw has happened is history: a line rebuilt after it (a reset,
    # a Redis that lost its data) is first come, first served.
    drawn = event.opens_at is not None and Draw.objects.filter(event=event, drawn_at__isnull=False).exists()
    opens_at = "" if event.opens_at is None or drawn else int(event.opens_at.timestamp() * 1000)
    outcome, left = store.run(
        _EVENT_SYNC.call(
            k,
            total_seats=event.total_seats,
            sold=event.seats_sold if sold is None else sold,
            opened_at=int(time.time() * 1000),
            opens_at=opens_at,
            gen=tokens.new_generation(),
            settings=pairs,
        )
    )
    if outcome == b"SEATS_BELOW_SOLD":
        raise SeatsBelowSold(f"{event.event_id}: {event.total_seats} seats is fewer than already sold.")
    if outcome == b"LINE_STARTED":
        raise LineStarted(f"{event.event_id}: people have joined the line; it cannot get a start time now.")
    if outcome == b"PRE_QUEUE_JOINED":
        raise LineStarted(f"{event.event_id}: people have joined the pre-queue; its start can move, not go.")
    presale.codes_publish(event)
    mapped = seating.seat_map_publish(event)
    store.client().sadd(store.EVENTS_KEY, event.event_id)
    return left if mapped is None else mapped


def _published_message(event: Event) -> str:
    """The message to the crowd shown now (the newest not cleared), as the event's
    record in Redis holds it for every poll to carry (queue_app/line.py): compact
    JSON, or '' for none."""
    shown = EventMessage.shown_now(event)
    if shown is None:
        return ""
    return json.dumps(shown.as_polled(), ensure_ascii=False, separators=(",", ":"))


def line_started(event_id: str) -> bool:
    """Whether anyone has joined the line (or its pre-queue): too late to give it a
    scheduled start, or to take one away."""
    return int(store.client().get(store.event_keys(event_id).seq) or 0) > 0


def event_wipe(event_id: str) -> int:
    """Delete every Redis key of the event (its line, counters, marks). Returns how many.

    The record (meta) goes first, in one command: every script that writes checks it,
    so nothing running meanwhile writes back a key the wipe has passed."""
    k = store.EventKeys(event_id)
    return store.client().unlink(k.meta) + store.delete_matching(k.pattern())


def event_live_numbers(event_id: str) -> dict:
    """Waiting (in both lines: `waitingPriority` of them in the priority lane),
    active, seats left, admitted in the last minute and joins refused by reason, for
    operators."""
    k = store.EventKeys(event_id)
    store.flush_refusals()
    now = store.now_ms(event_id)
    pipe = store.event_pipeline(event_id)
    pipe.get(k.seq).get(k.popped).get(k.holes).get(k.lane_seq).get(k.lane_popped).get(k.lane_holes)
    pipe.get(k.active).get(k.seats).hget(k.meta, "status").lrange(k.admit_log, 0, 60)
    pipe.hgetall(k.refused)
    *counters, active, seats, status, ticks, refused = pipe.execute()
    seq, popped, holes, lane_seq, lane_popped, lane_holes = (int(n or 0) for n in counters)
    recent = (tick.split(b":") for tick in ticks)
    lane_waiting = lane_seq - lane_popped - lane_holes
    return {
        "waiting": seq - popped - holes + lane_waiting,
        "waitingPriority": lane_waiting,
        "active": int(active or 0),
        "seatsLeft": int(seats) if seats is not None else None,
        "status": status.decode() if status else None,
        "admittedLastMinute": sum(int(n) for second, n in recent if int(second) * 1000 > now - 60_000),
        "joinsRefused": {reason.decode(): int(n) for reason, n in sorted(refused.items())},
    }


def events_seats_left(events: list[Event]) -> dict[str, int]:
    """Seats left of each event as its waiting room counts them: Redis' count, which
    every hold, sale and release moves at once (one pipelined round trip for the
    list). An event whose Redis state is gone (purged after it closed, or lost and
    not yet recovered), or a Redis out of reach, reads from Postgres' seat ledger:
    the list still shows something true rather than an error page."""
    if not events:
        return {}
    pipe = store.client().pipeline(transaction=False)
    for event in events:
        pipe.get(store.EventKeys(event.event_id).seats)
    try:
        counts = pipe.execute()
    except REDIS_ERRORS:
        counts = [None] * len(events)
    return {
        # A recount may leave Redis below 0 until releases land (as the poll says).
        event.event_id: max(int(count), 0) if count is not None else event.total_seats - event.seats_sold
        for event, count in zip(events, counts, strict=True)
    }


metrics.register_live_numbers(event_live_numbers)  # /metrics reads them at scrape time
