"""Admission: the per-second tick that lets the head of each line into its booking
window (lua/admit.lua), run by Celery beat for every known event at once."""

import logging
from dataclasses import dataclass

from redis.exceptions import NoScriptError

from queue_app import arrivals, draw, live
from ticketing import metrics, store
from ticketing.errors import REDIS_ERRORS

log = logging.getLogger(__name__)

_ADMIT = store.Caller("admit", passes="lead lost_claim_ms")


@dataclass(frozen=True, slots=True)
class Tick:
    event_id: str
    outcome: str  # ADMITTED, ALREADY_TICKED, NOT_OPEN, DRAW_DUE, SOLD_OUT, EMPTY, FULL, EVENT_NOT_FOUND
    admitted: int
    waiting: int
    active: int


if store.script("admit").reply != tuple(Tick.__dataclass_fields__)[1:]:
    raise store.ScriptError("lua/admit.lua replies other fields than Tick's after event_id")


def _admit_call(event_id: str) -> store.Call:
    return _ADMIT.call(store.EventKeys(event_id), lead=draw.LEAD_MS, lost_claim_ms=arrivals.LOST_CLAIM_MS)


def _tick(event_id: str, reply: list) -> Tick:
    """lua/admit.lua's reply (its header names the fields after `event_id`, in this
    order, as the start-up check below holds)."""
    outcome, admitted, waiting, active = reply
    return Tick(event_id, outcome.decode(), admitted, waiting, active)


def event_admit(event_id: str) -> Tick:
    """One admission tick for one event (at most once per second, see lua/admit.lua)."""
    return _tick(event_id, store.run(_admit_call(event_id)))


@metrics.observe_tick
def events_admit() -> list[Tick]:
    """The tick for every known event: every event's admission script runs, in
    one pipelined round trip.

    Each event's script decides for itself: only OPEN events with seats admit.
    """
    event_ids = sorted(e.decode() for e in store.client().smembers(store.EVENTS_KEY))
    if not event_ids:
        return []
    replies = _admit_all(event_ids)
    refused = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if refused:
        # A restarted or flushed server: a script refused NOSCRIPT did not run, so
        # those events' ticks run again once the script is loaded (rather than a
        # SCRIPT LOAD before every tick, for nothing).
        store.load("admit")
        for i, reply in zip(refused, _admit_all([event_ids[i] for i in refused]), strict=True):
            replies[i] = reply
    ticks = []
    for event_id, reply in zip(event_ids, replies, strict=True):
        if isinstance(reply, Exception):
            log.error("admission tick failed for %s: %s", event_id, reply)
            continue
        tick = _tick(event_id, reply)
        if tick.outcome == "EVENT_NOT_FOUND":  # wiped from Redis: stop ticking it
            store.client().srem(store.EVENTS_KEY, event_id)
            continue
        ticks.append(tick)
    _sample(ticks)
    return ticks


def _admit_all(event_ids: list[str]) -> list:
    pipe = store.client().pipeline(transaction=False)
    for event_id in event_ids:
        store.run(_admit_call(event_id), on=pipe)
    return pipe.execute(raise_on_error=False)


def _sample(ticks: list[Tick]) -> None:
    """The operators' live page's sample of this second (queue_app/live.py); a tick
    that another beat already ran this second adds none. Losing one is only logged."""
    try:
        live.record({t.event_id: (t.waiting, t.admitted) for t in ticks if t.outcome != "ALREADY_TICKED"})
    except REDIS_ERRORS as exc:
        log.warning("live samples not recorded: %r", exc)
