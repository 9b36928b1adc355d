"""An event's line in Redis as the tests reach it: tokens for places in it, the
admission tick and the Redis clock it runs on, and the state of its keys."""

import time
import uuid

from queue_app import admission, tokens
from ticketing import metrics, store


def unknown_token(event_id: str) -> str:
    """A token this service could have issued for the event (signed) but never did:
    the way to ask about a stranger now that made-up tokens are refused."""
    return str(uuid.UUID(bytes=tokens.mint(event_id, tokens.MAX_NUMBER)))


def line_token(event_id: str, number: int) -> tokens.Token:
    """The token the join script issued for this arrival number in the event's
    line as it is now: tokens are (generation, number), so a test can name a place
    without keeping every token."""
    k = store.event_keys(event_id)
    gen = bytes.fromhex(store.client().hget(k.meta, "gen").decode())
    nonce = store.client().getrange(k.nonces, number * 2 - 2, number * 2 - 1)
    return tokens.Token.of(tokens.mint(event_id, number, gen, nonce))


def end_windows(event_id: str) -> None:
    """End the active window of everyone admitted so far, as time would: each entry
    of the admission log (lua/lib/line.lua) gets an end in the past."""
    c, k = store.client(), store.event_keys(event_id)
    ended = store.now_ms(event_id) - 1
    for entry, score in c.zrange(k.windows, 0, -1, withscores=True):
        to, first, _, admitted = entry.split(b":")
        c.zrem(k.windows, entry)
        c.zadd(k.windows, {b":".join([to, first, str(ended).encode(), admitted]): score})


def next_redis_second(event_id: str | None = None, *, margin: float = 0.005) -> None:
    """Sleep until `margin` seconds into the next second of Redis' clock (the event's
    node's on a cluster). The admission tick runs once per Redis second (a second
    tick in it is ALREADY_TICKED): a test wanting a tick of its own, or several
    ticks racing in one second, starts there."""
    if event_id is None:
        _, micros = store.client().time()
        into = micros / 1e6
    else:
        into = store.now_ms(event_id) % 1000 / 1000
    time.sleep(1 - into + margin)


def fresh_tick(event_id: str) -> admission.Tick:
    """One admission tick, in a second of Redis' clock that had none yet: a second
    that had its tick admits nobody (ALREADY_TICKED), so this one waits for the next
    second and tries again, until Redis says it came."""
    tick = admission.event_admit(event_id)
    while tick.outcome == "ALREADY_TICKED":
        next_redis_second(event_id, margin=0)
        tick = admission.event_admit(event_id)
    return tick


def admit_all(event_id: str) -> None:
    """One admission tick in a fresh Redis second."""
    tick = fresh_tick(event_id)
    assert tick.outcome in {"ADMITTED", "EMPTY"}, tick


def event_state(event_id: str) -> dict:
    """Every Redis key of an event with its type and value: to prove nothing changed.
    But the operator's counts, which a refusal is meant to move: refused joins
    (test_refused_joins_are_counted_per_event_and_reason) and the metrics' counters
    (bookings by outcome, ticketing/tests/test_metrics.py)."""
    c = store.client()
    state = {}
    counts = {store.EventKeys(event_id).refused.encode(), metrics.event_key(event_id).encode()}
    for name in sorted(store.scan(store.EventKeys(event_id).pattern())):
        if name in counts:
            continue
        kind = c.type(name).decode()
        value = {
            "string": c.get,
            "list": lambda n: c.lrange(n, 0, -1),
            "hash": c.hgetall,
            "zset": lambda n: c.zrange(n, 0, -1, withscores=True),
            "set": c.smembers,
            "stream": lambda n: c.xrange(n),
        }[kind](name)
        state[name] = (kind, value)
    return state


def claim_time_passes(event_id: str) -> None:
    """Every admission's claim time (docs/modes.md) ends now, as if claimSeconds had
    gone by; those the tick counted already keep their count."""
    c, k = store.client(), store.event_keys(event_id)
    for to, deadline in c.hgetall(k.claims).items():
        if b":" not in deadline:
            c.hset(k.claims, to, store.now_ms(event_id) - 1)


def refusals(event_id: str, total: int) -> dict:
    """The event's refused joins by reason once `total` of them are written (at most
    5 s): a server process writes its own within a second of them
    (ticketing/store/scripts.py: _Refusals); this process's are written as it reads."""
    from queue_app import events

    deadline = time.monotonic() + 5
    while True:
        found = events.event_live_numbers(event_id)["joinsRefused"]
        if sum(found.values()) >= total or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
