"""People who walk away: how long a sale takes to sell out when half of the line is
gone by the time its turn comes, with and without a claim time (docs/modes.md).

    .venv/bin/python bench/abandonment.py [--people 600] [--seats 100] [--gone 0.5]
        [--claim 5] [--repeats 3]

On the private stack of bench/stack.py (its own redis-server, the bench database),
with the real scripts in this process: everyone joins at the start; the people who
stayed poll at the `nextPollMs` each answer gives and book one seat a few seconds
after their turn comes; the people who left never come back. The admission tick runs
once a second, as beat runs it. An event with a cap of people active at once (the
usual setting of a sale whose booking site has a fixed capacity) is sold out sooner
when the slots of the people who left go on: the figure is the time from the first
tick to the last seat, claim time 0 (off) against `--claim`, each the median of
`--repeats` runs with the same seeds.
"""

import argparse
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.serving import prepare, running_stack, say, setup_django  # noqa: E402


def sale(args: argparse.Namespace, claim: int, seed: int) -> dict:
    """One sale; its time to sell out (s) and what happened."""
    from booking_app import services as booking
    from queue_app import admission, events
    from queue_app import services as queue
    from queue_app.models import Event
    from queue_app.tokens import parse_token
    from ticketing import store
    from ticketing.errors import DomainError

    rng = random.Random(seed)
    event = Event.objects.create(
        event_id=f"walkaway-{uuid.uuid4().hex[:6]}",
        total_seats=args.seats,
        admit_per_second=args.rate,
        max_active_users=args.cap,
        active_window_seconds=args.window,
        claim_seconds=claim,
    )
    events.event_publish(event)
    people = [parse_token(queue.queue_join(event_id=event.event_id).token) for _ in range(args.people)]
    gone = {i for i in range(args.people) if rng.random() < args.gone}
    next_poll = {i: 0.0 for i in range(args.people) if i not in gone}
    book_at: dict[int, float] = {}
    booked = refused = unclaimed = 0
    started = time.monotonic()
    next_tick = started
    sold_out_at = None
    while time.monotonic() - started < args.limit:
        now = time.monotonic()
        if now >= next_tick:
            admission.event_admit(event.event_id)
            next_tick += 1.0
            if events.event_live_numbers(event.event_id)["seatsLeft"] <= 0:
                sold_out_at = now - started
                break
        for i, due in list(next_poll.items()):
            if due > now:
                continue
            at = queue.queue_poll(event_id=event.event_id, token=people[i])
            if at.status == "ACTIVE":
                del next_poll[i]
                book_at[i] = now + rng.uniform(*args.think)
            elif at.status == "WAITING":
                next_poll[i] = now + at.next_poll_ms / 1000
            else:
                unclaimed += at.status == "UNCLAIMED"
                del next_poll[i]
        for i, due in list(book_at.items()):
            if due > now:
                continue
            del book_at[i]
            try:
                booking.booking_reserve(event_id=event.event_id, token=people[i], seat_count=1)
                booked += 1
            except DomainError:
                refused += 1
        time.sleep(0.02)
    claims = store.client().hvals(store.EventKeys(event.event_id).claims)
    passed_on = sum(int(v.split(b":")[1]) for v in claims if b":" in v)
    events.event_wipe(event.event_id)
    return {
        "claim_seconds": claim,
        "seed": seed,
        "sold_out_s": round(sold_out_at, 1) if sold_out_at is not None else None,
        "booked": booked,
        "refused": refused,
        "gone": len(gone),
        "slots_passed_on": passed_on,
        "polls_answered_unclaimed": unclaimed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, default=600)
    parser.add_argument("--seats", type=int, default=100)
    parser.add_argument("--gone", type=float, default=0.5, help="share of the line gone by its turn")
    parser.add_argument("--cap", type=int, default=30, help="most people active at once")
    parser.add_argument("--rate", type=int, default=10, help="admitted per second")
    parser.add_argument("--window", type=int, default=30, help="the active window, s")
    parser.add_argument("--claim", type=int, default=5, help="the claim time measured against none, s")
    parser.add_argument("--think", type=float, nargs=2, default=(1.0, 4.0), help="admitted: time to book, s")
    parser.add_argument("--limit", type=float, default=600, help="give a sale up after this many s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    runs: list[dict] = []
    with running_stack(False, None) as stack:
        prepare(stack, "redis")
        setup_django(stack)
        for seed in range(1, args.repeats + 1):
            for claim in (0, args.claim):  # interleaved: the machine's noise falls on both
                run = sale(args, claim, seed)
                say(json.dumps(run))
                runs.append(run)
    medians = {
        claim: statistics.median(r["sold_out_s"] for r in runs if r["claim_seconds"] == claim)
        for claim in (0, args.claim)
    }
    result = {
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "runs": runs,
        "median_sold_out_s": medians,
        "ratio": round(medians[args.claim] / medians[0], 2),
    }
    say(json.dumps({"median_sold_out_s": medians, "ratio": result["ratio"]}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
