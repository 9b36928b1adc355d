"""The draw of a scheduled start at scale: how soon the line is usable after it.

    .venv/bin/python bench/draw.py [--pre-queue 2000000] [--arrivals 20000]

Fills a fresh event's pre-queue through the join script (pipelined, not HTTP), then
moves the start to a few seconds ahead, as the operator's admin would, and runs the
draw as the Celery task runs it (queue_app/draw.py), in this process: begun before
the start, as the tick dispatches it (draw.LEAD_MS ahead), it reads the pre-queue
ahead and draws at the start, while one other process polls a pre-queue place the
whole time and another keeps joining from the start on. Reports:

- the draw, start to DONE, and each of its steps after the start; the line is
  usable (polls show ranks, the next tick admits) from DONE on.
- polls while the draw runs: their answers (DRAWING, then WAITING) and round trips.
- Redis memory per person: after the fill (the pre-queue), at the peak while
  drawing (sampled by the polling process), and after the draw.

Run it against a Redis of its own (REDIS_URL), as the figures in docs/benchmarks.md
were: other keys on the server would blur the memory figures.
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")

import django  # noqa: E402

django.setup()

from django.utils import timezone  # noqa: E402

from queue_app import admission, draw, events, services, tokens  # noqa: E402
from queue_app.models import Event  # noqa: E402
from ticketing import store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pre-queue", type=int, default=2_000_000)
    parser.add_argument("--arrivals", type=int, default=20_000, help="joins after the start, during the draw")
    parser.add_argument(
        "--lead", type=float, default=5.0, help="seconds from the run's beginning to the start"
    )
    args = parser.parse_args()

    event_id = f"bench-draw-{uuid.uuid4().hex[:8]}"
    event = Event.objects.create(
        event_id=event_id, total_seats=100, admit_per_second=70, opens_at=timezone.now() + timedelta(hours=1)
    )
    client = store.client()
    events.event_publish(event)
    try:
        base = client.info("memory")["used_memory"]
        started = time.perf_counter()
        services.queue_join_many(event_id=event_id, count=args.pre_queue)
        fill = time.perf_counter() - started
        filled = client.info("memory")["used_memory"] - base
        middle = 16 * (args.pre_queue // 2)
        watched = tokens.Token.of(client.getrange(store.event_keys(event_id).pre, middle, middle + 15))

        fork = multiprocessing.get_context("fork")  # children use Redis only
        done, results = fork.Event(), fork.Queue()
        opens = timezone.now() + timedelta(seconds=args.lead)
        Event.objects.filter(pk=event.pk).update(opens_at=opens)
        event.refresh_from_db()
        events.event_publish(event)
        children = [
            fork.Process(target=_poller, args=(event_id, watched, base, done, results)),
            fork.Process(target=_arrivals, args=(event_id, args.arrivals, opens.timestamp())),
        ]
        for child in children:
            child.start()
        outcome = draw.run(event_id)
        usable = time.time() - opens.timestamp()
        start = time.perf_counter() - usable  # the start, on the pollers' clock
        time.sleep(0.2)
        done.set()
        polls, peak = results.get()
        for child in children:
            child.join()
        after = client.info("memory")["used_memory"] - base
        position = services.queue_poll(event_id=event_id, token=watched)
        tick = admission.event_admit(event_id)

        during = [p for p in polls if start <= p[0] < start + usable]
        trips = [ms for _, ms, _ in during]
        statuses = sorted({s for _, _, s in polls})
        n = args.pre_queue
        print(f"pre-queue:          {n:,} (filled in {fill:.1f} s); {args.arrivals:,} joins after the start")
        print(
            f"draw:               {outcome.outcome} in {outcome.seconds:.2f} s, "
            f"start to usable {usable:.2f} s"
        )
        print("  steps:            " + ", ".join(f"{k} {v:.2f} s" for k, v in outcome.stages.items()))
        print(
            f"polls while drawing: {len(during)}, answers {statuses}; round trip median "
            f"{statistics.median(trips):.2f} ms, max {max(trips):.1f} ms"
        )
        print(
            f"after: the watched place polls {position.status} rank {position.rank}, "
            f"drawn {position.draw_position}"
        )
        print(f"first tick after:   {tick.outcome}, admitted {tick.admitted}")
        print(
            f"Redis memory/person: pre-queue {filled / n:.1f} B, "
            f"peak while drawing {max(peak, filled) / n:.1f} B, "
            f"after the draw {after / (n + args.arrivals):.1f} B"
        )
    finally:
        events.event_wipe(event_id)
        client.srem(store.EVENTS_KEY, event_id)
        Event.objects.filter(pk=event.pk).delete()


def _arrivals(event_id: str, count: int, opens: float) -> None:
    time.sleep(max(opens - time.time(), 0))
    services.queue_join_many(event_id=event_id, count=count, chunk=500)


def _poller(event_id: str, token: tokens.Token, base: int, done, results) -> None:
    """Poll one place until told to stop; hand back (at, round trip ms, status) of
    each poll, and the most memory seen above `base`."""
    client, polls, peak = store.client(), [], 0
    while not done.is_set():
        t0 = time.perf_counter()
        status = services.queue_poll(event_id=event_id, token=token).status
        polls.append((t0, (time.perf_counter() - t0) * 1000, status))
        peak = max(peak, client.info("memory")["used_memory"] - base)
        time.sleep(0.005)
    results.put((polls, peak))


if __name__ == "__main__":
    main()
