"""A stadium's seat map under load: what the seat engine costs at 50,000 seats.

    .venv/bin/python bench/seats.py [--seats 50000] [--holds 2000] [--duration 10] [--repeats 3]

On the private stack of bench/stack.py (its own redis-server, the bench database,
gunicorn as production starts it), with a map of 10 sections of 50 rows (aisles
every 25 seats):

- Redis bytes per numbered seat: MEMORY USAGE of the map's keys (lua/lib/seats.lua).
- Holds per second in one process, one after another: the Redis step alone
  (lua/reserve.lua) by seat id and best-available, with the time Redis spent in it
  (INFO commandstats); and whole bookings (Redis, then Postgres).
- Best-available as a section fills: a pick's time at 0, 50, 90 and 99 % taken.
- Availability reads per second of one web process (wrk, GET /api/events/<id>/seats)
  against the poll of the same server in the same run (the baseline), and the Redis
  commands per 1,000 reads: each process reads Redis once per refresh (200 ms).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.serving import pick_broker, prepare, running_stack, say, setup_django  # noqa: E402
from bench.stack import RABBITMQ_URL, procfile_web  # noqa: E402
from bench.wrkrun import Load, run_wrk  # noqa: E402
from ticketing import servers  # noqa: E402

SECTIONS, ROWS = 10, 50


def stadium(seats: int) -> dict:
    """10 sections of 50 rows, `seats` in all, an aisle every 25 seats of a row."""
    per_row = seats // (SECTIONS * ROWS)
    labels: list[str | None] = []
    for n in range(1, per_row + 1):
        labels.append(str(n))
        if n % 25 == 0 and n < per_row:
            labels.append(None)
    return {
        "sections": [
            {
                "id": f"S{s}",
                "name": f"Section {s}",
                "rows": [{"row": str(r), "seats": labels} for r in range(1, ROWS + 1)],
            }
            for s in range(1, SECTIONS + 1)
        ]
    }


def commands(client) -> tuple[int, int]:
    """Every command Redis has run so far, and the microseconds of EVALSHA."""
    stats = client.info("commandstats")
    return sum(v["calls"] for v in stats.values()), stats.get("cmdstat_evalsha", {}).get("usec", 0)


def active_tokens(event_id: str, n: int) -> list:
    from queue_app import admission
    from queue_app import services as queue

    joined = [queue.queue_join(event_id=event_id).token for _ in range(n)]
    while admission.event_admit(event_id).admitted:
        pass
    return joined


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seats", type=int, default=50_000)
    parser.add_argument("--holds", type=int, default=2_000, help="bookings per hold measurement")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--repeats", type=int, default=3, help="wrk runs per figure (median)")
    parser.add_argument("--broker", choices=("auto", "rabbitmq", "redis"), default="auto")
    args = parser.parse_args()
    broker = pick_broker(args.broker)
    results: dict = {"seats": args.seats}
    with running_stack(False, None) as stack:
        prepare(stack, broker)
        setup_django(stack)
        from booking_app import services as booking
        from queue_app import availability, events, seating, tokens
        from queue_app.models import Event
        from ticketing import store

        client = store.client()
        event_id = f"stadium-{uuid.uuid4().hex[:6]}"
        plain_id = f"plain-{uuid.uuid4().hex[:6]}"
        try:
            event = Event.objects.create(
                event_id=event_id, total_seats=args.seats, admit_per_second=10_000, active_window_seconds=3600
            )
            started = time.monotonic()
            total = seating.seat_map_apply(event, stadium(args.seats))
            Event.objects.filter(pk=event.pk).update(total_seats=total)
            event.refresh_from_db()
            events.event_publish(event)
            say(f"{total} seats in Postgres and Redis in {time.monotonic() - started:.1f} s")
            k = store.EventKeys(event_id)
            keys = {
                name: getattr(k, name) for name in ("sections", "seat_index", "seat_state", "section_left")
            }
            used = {name: client.memory_usage(key, samples=0) or 0 for name, key in keys.items()}
            results["redis_bytes"] = {**used, "per_seat": round(sum(used.values()) / total, 1)}
            say(f"Redis: {results['redis_bytes']}")

            people = active_tokens(event_id, 3 * args.holds + 3000)
            say(f"{len(people)} people active")

            # The baseline of the same run: an event without a map, as many seats.
            plain = Event.objects.create(
                event_id=plain_id, total_seats=total, admit_per_second=10_000, active_window_seconds=3600
            )
            events.event_publish(plain)
            plain_people = active_tokens(plain_id, 2 * args.holds)

            def steps(bookings: list, together: bool = False, stop_when_refused: bool = False) -> dict:
                """The Redis step (lua/reserve.lua) of each booking, one after another."""
                usec0, took = commands(client)[1], []
                for b in bookings:
                    t = time.perf_counter()
                    reply = store.run(booking.reserve_call(b, together=together))
                    if reply.outcome != b"OK":
                        if stop_when_refused:
                            break
                        raise SystemExit(f"{b}: {reply}")
                    took.append(time.perf_counter() - t)
                return {
                    "holds": len(took),
                    "per_s": round(len(took) / sum(took)),
                    "median_ms": round(statistics.median(took) * 1000, 3),
                    "redis_usec": round((commands(client)[1] - usec0) / len(took), 1),
                    "took": took,
                }

            def whole(event: str, people: list, **where: object) -> dict:
                """Whole bookings, Redis then Postgres, one after another."""
                took = []
                for n, token in enumerate(people):
                    fields = {key: value(n) if callable(value) else value for key, value in where.items()}
                    t = time.perf_counter()
                    booking.booking_reserve(
                        event_id=event, token=tokens.parse_token(token), seat_count=2, **fields
                    )
                    took.append(time.perf_counter() - t)
                return {
                    "per_s": round(len(took) / sum(took)),
                    "median_ms": round(statistics.median(took) * 1000, 3),
                }

            def pair(section: str, n: int) -> tuple[str, str]:
                """The n-th pair of seats of a section, row after row."""
                row, first = 1 + n // 50, 1 + 2 * (n % 50)
                return (f"{section}-{row}-{first}", f"{section}-{row}-{first + 1}")

            mine, people = people[: args.holds], people[args.holds :]
            by_id = steps(
                [
                    booking.Booking(uuid.uuid4(), event_id, t, 2, seat_ids=pair("S2", n))
                    for n, t in enumerate(mine)
                ]
            )
            baseline = steps(
                [booking.Booking(uuid.uuid4(), plain_id, t, 2) for t in plain_people[: args.holds]]
            )
            results["hold_redis_step"] = {
                "by_id": {k: v for k, v in by_id.items() if k != "took"},
                "no_map_baseline": {k: v for k, v in baseline.items() if k != "took"},
                "ratio_to_baseline": round(by_id["per_s"] / baseline["per_s"], 2),
            }
            say(f"Redis step: {results['hold_redis_step']}")

            # Best-available in S1 (5,000 seats), 2 side by side, until no pair is left:
            # a pick's time as the section fills.
            mine, people = people[:2_600], people[2_600:]
            picks = steps(
                [booking.Booking(uuid.uuid4(), event_id, t, 2, section="S1") for t in mine],
                together=True,
                stop_when_refused=True,
            )
            per_section = total // SECTIONS
            at = {}
            for share in (0, 50, 90, 99):
                n = min(per_section * share // 200, picks["holds"] - 1)  # 2 seats a pick
                at[f"{share}%"] = round(statistics.median(picks["took"][max(0, n - 10) : n + 10]) * 1000, 3)
            results["best_available"] = {
                **{k: v for k, v in picks.items() if k != "took"},
                "median_ms_at_fill": at,
            }
            say(f"Redis step, best available: {results['best_available']}")

            mine, people = people[: args.holds], people[args.holds :]
            results["booking_whole"] = {
                "by_id": whole(event_id, mine, seats=lambda n: pair("S3", n)),
                "no_map_baseline": whole(plain_id, plain_people[args.holds :]),
            }
            say(f"whole bookings: {results['booking_whole']}")

            # Availability reads against the poll, one web process.
            port = servers.free_port()
            env = {**stack.env, "HOST": "127.0.0.1", "PORT": str(port), "WEB_CONCURRENCY": "1"}
            stack.start_gunicorn("app", procfile_web(stack.app_dir), env, f"http://127.0.0.1:{port}/health")
            base = f"http://127.0.0.1:{port}"
            token_file = Path(tempfile.mkstemp(prefix="seats-bench-", suffix=".txt")[1])
            token_file.write_text("\n".join(people[:2000]) + "\n")
            load = Load(threads=2, connections=64, duration_s=args.duration)
            reads, polls, per_thousand = [], [], []
            for _ in range(args.repeats):
                calls0 = commands(client)[0]
                run = run_wrk(f"{base}/api/events/{event_id}/seats", "get", [], load)
                calls1 = commands(client)[0]
                reads.append(run.ok_per_s)
                per_thousand.append((calls1 - calls0) * 1000 / max(run.ok, 1))
                polls.append(run_wrk(base, "poll", [str(token_file), event_id], load).ok_per_s)
            results["availability"] = {
                "reads_per_s": round(statistics.median(reads)),
                "poll_per_s": round(statistics.median(polls)),
                "ratio_to_poll": round(statistics.median(reads) / statistics.median(polls), 2),
                "redis_commands_per_1000_reads": round(statistics.median(per_thousand), 2),
                "body_bytes": len(json.dumps(availability.seats_available(event_id))),
            }
            say(f"availability: {results['availability']}")
            token_file.unlink()
        finally:
            stack.forget([event_id, plain_id], RABBITMQ_URL if broker == "rabbitmq" else None)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
