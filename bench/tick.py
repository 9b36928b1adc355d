"""The admission tick at N waiting: how long one tick takes.

    .venv/bin/python bench/tick.py [--waiting 2000000] [--samples 200]
        [--holes 100000 --spread head|even] [--hot-sale]

With --holes, that many people leave first: the first ones in line (head), or one
in every waiting/holes along the whole line (even). The runs of holes at the head
are compacted away before a tick (lua/compact.lua, in calls of COMPACT_CHUNK), off
the admit script's path: each compaction call is timed too. With --hot-sale, the
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

from queue_app import services  # noqa: E402
from queue_app.models import Event  # noqa: E402
from ticketing import redis as r  # noqa: E402


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
    client = r.client()
    k = r.EventKeys(event_id)
    tick_ms, ping_ms = [], []
    calls0, usec0 = evalsha_usec(client)
    for _ in range(samples):
        client.delete(k.tick)
        t0 = time.perf_counter()
        tick = services.event_admit(event_id)
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


def make_holes(event_id: str, holes: int, spread: str) -> None:
    """`holes` people leave, through the leave script, pipelined."""
    client = r.client()
    k = r.event_keys(event_id)
    length = client.llen(k.line)
    step = 1 if spread == "head" else max(1, length // holes)
    wanted = range(0, step * holes, step)
    r.load("leave")
    chunk = 100_000
    for start in range(0, wanted[-1] + 1, chunk):
        tokens = client.lrange(k.line, start, start + chunk - 1)
        pipe = client.pipeline(transaction=False)
        for i in range(start, start + len(tokens)):
            if i % step == 0 and i < len(wanted) * step:
                raw = tokens[i - start]
                r.run("leave", [k.meta, k.bucket(raw), k.left, k.popped], [raw], on=pipe)
        pipe.execute()


def measure_compaction(event_id: str) -> dict:
    """Compact the head of the line, one timed call at a time."""
    k = r.event_keys(event_id)
    calls_ms, passed = [], []
    while True:
        t0 = time.perf_counter()
        n = r.run("compact", [k.popped, k.line, k.left], [services.COMPACT_CHUNK])
        calls_ms.append((time.perf_counter() - t0) * 1000)
        passed.append(n)
        if n < services.COMPACT_CHUNK:
            break
    return {
        "holes_passed": sum(passed),
        "calls": len(calls_ms),
        "call_max_ms": max(calls_ms),
        "call_median_ms": statistics.median(calls_ms),
        "total_ms": sum(calls_ms),
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
    client = r.client()
    services.event_publish(event)
    try:
        memory = client.info("memory")["used_memory"]
        started = time.perf_counter()
        services.queue_join_many(event_id=event_id, count=args.waiting, distinct=args.hot_sale)
        fill = time.perf_counter() - started
        memory = client.info("memory")["used_memory"] - memory
        if args.holes:
            make_holes(event_id, args.holes, args.spread)
            c = measure_compaction(event_id)
            print(
                f"holes:              {args.holes:,} ({args.spread}); compaction passed "
                f"{c['holes_passed']:,} in {c['calls']} calls, each median {c['call_median_ms']:.2f} ms, "
                f"max {c['call_max_ms']:.2f} ms ({c['total_ms']:.1f} ms in all)"
            )
        m = measure(event_id, samples=args.samples, batch=args.batch)
        print(
            f"waiting:            {args.waiting:,} (filled in {fill:.1f} s, "
            f"{args.waiting / fill:,.0f} joins/s through the join script)"
        )
        per_person = memory / args.waiting
        print(f"Redis memory:       {memory / 2**20:.1f} MiB, {per_person:.1f} B per person waiting")
        print(
            f"tick, round trip:   median {m['round_trip_median_ms']:.3f} ms, "
            f"p99 {m['round_trip_p99_ms']:.3f} ms ({args.samples} ticks of {args.batch})"
        )
        print(f"tick, inside Redis: mean {m['inside_redis_mean_ms']:.3f} ms")
        print(f"PING round trip:    median {m['ping_median_ms']:.3f} ms (baseline)")
        print(f"ratio tick/PING:    {m['ratio_to_ping']:.1f}x")
    finally:
        services.event_wipe(event_id)
        client.srem(r.EVENTS_KEY, event_id)


if __name__ == "__main__":
    main()
