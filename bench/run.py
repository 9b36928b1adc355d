"""`make bench`: the service as production runs it, measured against a baseline.

    .venv/bin/python bench/run.py                 # full run: 100,000 then 2,000,000 waiting
    .venv/bin/python bench/run.py --quick         # 100,000 only, short wrk runs
    .venv/bin/python bench/run.py --ref HEAD      # the app's code of a commit (a git export)
    .venv/bin/python bench/run.py --profile /tmp/bench-profiles   # also py-spy each path
    .venv/bin/python bench/run.py --serve         # only the stack and a 1/s tick (for Locust)

Everything runs against private services so that it never disturbs (or is disturbed
by the data of) tests running on the same machine: a redis-server of its own on a
free port, the Postgres database `ticketing_bench`, and its own RabbitMQ queue.
The app is started with the Procfile's `web:` command (of the revision under test).
Figures are only meaningful next to references measured in the same run on the same
machine: the baseline, a bare Django view doing one Redis GET under one sync gunicorn
worker; and the Python ceiling, the poll itself in a raw ASGI app (no framework) under
one uvicorn worker (bench/baseline/ceiling.py).
What each figure means and what limits it: docs/benchmarks.md.
"""

# The run's parts: bench/serving.py (the stack and the servers), bench/measure.py
# (the phases and their figures), bench/report.py (progress, targets and the table).

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import Bench, Plan, machine  # noqa: E402
from bench.report import say, table, targets  # noqa: E402
from bench.serving import (  # noqa: E402
    Servers,
    pick_broker,
    prepare,
    running_stack,
    setup_django,
    tick_forever,
)
from bench.stack import BASE_DIR, RABBITMQ_URL, procfile_web  # noqa: E402
from bench.wrkrun import Load  # noqa: E402

RESULTS_DIR = BASE_DIR / "bench" / "results"


def bench(args: argparse.Namespace) -> int:
    """The measured run: servers, the phases, the report and its JSON."""
    quick = args.quick
    plan = Plan(
        load=Load(
            threads=args.threads,
            connections=args.connections,
            duration_s=args.duration or (5 if quick else 15),
        ),
        repeats=args.repeats or (1 if quick else 3),
        lines=(100_000,) if quick else (100_000, 2_000_000),
        poll_tokens=args.poll_tokens,
        booking_tokens=args.booking_tokens or (10_000 if quick else 60_000),
        tick_samples=50 if quick else 200,
        warmup_s=2,
        profile_dir=Path(args.profile) if args.profile else None,
        profile_s=args.profile_seconds,
    )
    if plan.profile_dir:
        plan.profile_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    broker = pick_broker(args.broker)
    with running_stack(args.keep, args.ref) as stack:
        prepare(stack, broker)
        say(f"code: {stack.code}")
        servers = Servers(stack, broker)
        run = Bench(plan, stack, servers)
        run.results["code"] = stack.code
        # Django runs in this process too (filling lines, admitting, reading Redis), with
        # the same environment as the server under test: set up only once that exists.
        setup_django(stack)
        try:
            run.results["machine"] = machine()
            run.results.update(servers.start())
            run.line_phase(plan.lines[0])
            run.booking_phase()
            for waiting in plan.lines[1:]:
                run.line_phase(waiting)
        finally:
            stack.forget(run.events, RABBITMQ_URL if broker == "rabbitmq" else None)
        results = run.results
        results["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
        results.update(
            {
                "started_utc": stamp,
                "quick": quick,
                "wrk": {**plan.load.__dict__, "repeats": plan.repeats, "statistic": "median"},
                "seconds": time.monotonic() - started,
            }
        )
        results["targets"] = targets(results, plan.lines)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{stamp}{'-quick' if quick else ''}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table(results))
    print(f"\n{out.relative_to(BASE_DIR)} ({results['seconds'] / 60:.1f} min)")
    return 0


def serve(args: argparse.Namespace) -> int:
    """The stack for a Locust run: gunicorn as in production, an event, a 1/s tick."""
    broker = pick_broker(args.broker)
    with running_stack(args.keep, args.ref) as stack:
        prepare(stack, broker)
        setup_django(stack)
        from queue_app import admission

        port = args.port
        env = {**stack.env, "HOST": "127.0.0.1", "PORT": str(port)}
        stack.manage(
            "init_event",
            args.event_id,
            "--seats",
            str(args.seats),
            "--batch",
            str(args.batch),
            "--ttl",
            "180",
        )
        proc = stack.start_gunicorn(
            "app", procfile_web(stack.app_dir), env, f"http://127.0.0.1:{port}/health"
        )
        say(f"serving http://127.0.0.1:{port} (event {args.event_id}, {args.batch}/s); Ctrl-C stops")
        try:
            tick_forever(admission.events_admit, proc)
        finally:
            stack.forget([args.event_id], RABBITMQ_URL if broker == "rabbitmq" else None)
    return 0


def main() -> int:
    """Parse the command line; run from the repository root whatever the cwd."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="100,000 waiting only, 5 s wrk runs, no repeats")
    parser.add_argument("--duration", type=int, help="seconds per wrk run (15; --quick 5)")
    parser.add_argument(
        "--repeats", type=int, help="wrk runs per measurement, median reported (3; --quick 1)"
    )
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--poll-tokens", type=int, default=5_000, help="tokens the poll run cycles through")
    parser.add_argument("--booking-tokens", type=int, help="ACTIVE tokens for the booking runs (60,000)")
    parser.add_argument("--broker", choices=("auto", "rabbitmq", "redis"), default="auto")
    parser.add_argument("--profile", metavar="DIR", help="also record py-spy profiles of each path into DIR")
    parser.add_argument("--profile-seconds", type=int, default=12)
    parser.add_argument("--keep", action="store_true", help="keep logs and token files")
    parser.add_argument(
        "--ref", help="run the app's code of this git revision (e.g. HEAD) instead of the working tree"
    )
    parser.add_argument("--serve", action="store_true", help="only run the stack and a 1/s tick (Locust)")
    parser.add_argument("--port", type=int, default=8000, help="--serve: the port")
    parser.add_argument("--event-id", default="bench-journey", help="--serve: the event")
    parser.add_argument("--seats", type=int, default=100_000, help="--serve: seats of the event")
    parser.add_argument("--batch", type=int, default=70, help="--serve: people admitted per second")
    args = parser.parse_args()
    os.chdir(BASE_DIR)
    return serve(args) if args.serve else bench(args)


if __name__ == "__main__":
    sys.exit(main())
