"""The admission tick at N waiting: how long one tick takes.

    .venv/bin/python bench/tick.py [--waiting 2000000] [--samples 200]
        [--holes 100000 --spread head|even] [--hot-sale]

With --holes, that many people leave first: the first ones in line (head), or one
in every waiting/holes along the whole line (even). The runs of holes at the head
are bits of the leavers' bitmap that the admit script passes with BITPOS (a byte
of 8 holes at a time, and whole runs of empty bytes at once). With --hot-sale, the
event has the hot-sale protections on and every person joins from another address
with a proof of work of their own: the most Redis keeps per person.

Fills a fresh event's line through the join script (pipelined, not HTTP), then
times the admit script: the round trip seen by the worker and the time Redis spent
in it (INFO commandstats). A PING round trip in the same run is the baseline.
The once-per-second guard is cleared before each sample (not timed) so that a
sample needs no wait for the next second.

`measure()` is also what `bench/run.py` calls on the line it filled itself.
"""

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")

import django  # noqa: E402
import redis  # noqa: E402

django.setup()

from queue_app import admission, events, services, tokens  # noqa: E402
from queue_app.models import Event  # noqa: E402
from ticketing import store  # noqa: E402


def evalsha_usec(client: redis.Redis) -> tuple[int, int]:
    """Calls and microseconds Redis has spent in EVALSHA so far."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return stats["calls"], stats["usec"]


def measure(event_id: str, *, samples: int, batch: int) -> dict:
    """Time `samples` ticks of an event whose line is already long enough.

    The event's admitPerSecond must be `batch` (each tick must admit exactly that
    many, or it did not do the work being timed). Every tick admits `batch` people
    off the head of the line.
    """
    client = store.client()
    k = store.EventKeys(event_id)
    tick_ms, ping_ms = [], []
    calls0, usec0 = evalsha_usec(client)
    for _ in range(samples):
        client.delete(k.tick)
        t0 = time.perf_counter()
        tick = admission.event_admit(event_id)
        tick_ms.append((time.perf_counter() - t0) * 1000)
        if tick.admitted != batch:
            raise RuntimeError(f"a tick admitted {tick.admitted}, not {batch}: {tick}")
        t0 = time.perf_counter()
        client.ping()
        ping_ms.append((time.perf_counter() - t0) * 1000)
    calls1, usec1 = evalsha_usec(client)
    p = statistics.quantiles(tick_ms, n=100)
    return {
        "samples": samples,
        "batch": batch,
        "round_trip_median_ms": statistics.median(tick_ms),
        "round_trip_p99_ms": p[98],
        "inside_redis_mean_ms": (usec1 - usec0) / max(1, calls1 - calls0) / 1000,
        "ping_median_ms": statistics.median(ping_ms),
        "ratio_to_ping": statistics.median(tick_ms) / statistics.median(ping_ms),
    }


def make_holes(event_id: str, holes: int, spread: str, waiting: int) -> None:
    """`holes` people leave, through the leave script, pipelined: each with the token
    the join script issued them (the line's generation and the number's nonce)."""

    client = store.client()
    k = store.event_keys(event_id)
    gen = bytes.fromhex(client.hget(k.meta, "gen").decode())
    step = 1 if spread == "head" else max(1, waiting // holes)
    numbers = range(1, step * holes + 1, step)
    store.load("leave")
    chunk = 50_000
    for i in range(0, len(numbers), chunk):
        part = numbers[i : i + chunk]
        nonces = client.getrange(k.nonces, part[0] * 2 - 2, part[-1] * 2 - 1)
        pipe = store.event_pipeline(event_id)
        for n in part:
            at = (n - part[0]) * 2
            token = tokens.Token.of(tokens.mint(event_id, n, gen, nonces[at : at + 2]))
            store.run(services._leave_call(event_id, token), on=pipe)
        if sum(pipe.execute()) != len(part):
            raise RuntimeError("a leave was refused")


def memory_by_key(event_id: str) -> dict[str, int]:
    """Bytes of each of the event's keys (MEMORY USAGE), by the key's last parts."""
    client = store.client()
    prefix = len(store.key(event_id, ""))
    return {
        name.decode()[prefix:]: client.memory_usage(name, samples=0) or 0
        for name in store.scan(store.EventKeys(event_id).pattern())
    }


def main() -> None:
    """Fill a fresh event's line, time its ticks, print, wipe the event."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--waiting", type=int, default=2_000_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch", type=int, default=70)
    parser.add_argument("--holes", type=int, default=0)
    parser.add_argument("--spread", choices=("head", "even"), default="head")
    parser.add_argument(
        "--hot-sale",
        action="store_true",
        help="the hot-sale protections on, everyone from another address with a proof of work",
    )
    args = parser.parse_args()

    event_id = f"bench-tick-{uuid.uuid4().hex[:8]}"
    event = Event(event_id=event_id, total_seats=100, admit_per_second=args.batch)
    if args.hot_sale:
        event.apply_hot_sale()
    client = store.client()
    events.event_publish(event)
    try:
        memory = client.info("memory")["used_memory"]
        started = time.perf_counter()
        services.queue_join_many(event_id=event_id, count=args.waiting, distinct=args.hot_sale)
        fill = time.perf_counter() - started
        memory = client.info("memory")["used_memory"] - memory
        if args.holes:
            memory = client.info("memory")["used_memory"]
            make_holes(event_id, args.holes, args.spread, args.waiting)
            leaving = client.info("memory")["used_memory"] - memory
            print(
                f"holes:              {args.holes:,} ({args.spread}), {leaving / args.holes:.1f} B per leaver"
            )
        held = memory_by_key(event_id)
        m = measure(event_id, samples=args.samples, batch=args.batch)
        print(
            f"waiting:            {args.waiting:,} (filled in {fill:.1f} s, "
            f"{args.waiting / fill:,.0f} joins/s through the join script)"
        )
        per_person = memory / args.waiting
        print(f"Redis memory:       {memory / 2**20:.1f} MiB, {per_person:.1f} B per person (the joins)")
        keys = sum(held.values())
        print(
            f"event's keys:       {keys / 2**20:.2f} MiB, {keys / args.waiting:.2f} B per person waiting"
            f"{' with the leavers' if args.holes else ''}: "
            + ", ".join(f"{name} {size:,}" for name, size in sorted(held.items(), key=lambda kv: -kv[1])[:6])
        )
        print(
            f"tick, round trip:   median {m['round_trip_median_ms']:.3f} ms, "
            f"p99 {m['round_trip_p99_ms']:.3f} ms ({args.samples} ticks of {args.batch})"
        )
        print(f"tick, inside Redis: mean {m['inside_redis_mean_ms']:.3f} ms")
        print(f"PING round trip:    median {m['ping_median_ms']:.3f} ms (baseline)")
        print(f"ratio tick/PING:    {m['ratio_to_ping']:.1f}x")
    finally:
        events.event_wipe(event_id)
        client.srem(store.EVENTS_KEY, event_id)


if __name__ == "__main__":
    main()
