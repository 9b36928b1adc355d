"""What the fast lane's join costs in the process alone: CPU µs per join, no HTTP.

The ASGI application production serves (ticketing/asgi.py), called in a loop on
uvloop, 64 joins at a time, each a new person of a plain event (`POST
/api/queue/join {}` as wrk's join script sends it), on a private Redis. What it
leaves out of a served join's cost is the HTTP server's part (the parse, the
socket calls, uvicorn's request cycle): bench/bare.py measures that part alone, and
`python -m bench.join_commands --workers 1` the whole (docs/benchmarks.md, "Where a
join's time goes").

    .venv/bin/python -m bench.lane [--joins 60000] [--runs 3]
"""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.serving import prepare
from bench.stack import PYTHON, Stack

EVENT = "lanecost"
CONCURRENT = 64
_SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "POST",
    "path": "/api/queue/join",
    "raw_path": b"/api/queue/join",
    "query_string": b"",
    "root_path": "",
    "scheme": "http",
    "server": ("127.0.0.1", 8000),
    "client": ("127.0.0.1", 40000),
    "headers": [
        (b"host", b"127.0.0.1:8000"),
        (b"content-length", b"2"),
        (b"content-type", b"application/json"),
    ],
}


def _measure(joins: int) -> dict:
    """In the child process, whose environment is the stack's: one run."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")
    django.setup()
    import uvloop

    from ticketing.asgi import application

    statuses: list[int] = []
    body = {"type": "http.request", "body": b"{}", "more_body": False}

    async def receive() -> dict:
        return body

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def joiner(n: int) -> None:
        for _ in range(n):
            await application(dict(_SCOPE, state={}), receive, send)

    async def run() -> dict:
        application.routes  # noqa: B018 (the routes read, as the lifespan reads them)
        await joiner(2_000)  # warm: scripts loaded, blocks grown
        statuses.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(joiner(joins // CONCURRENT) for _ in range(CONCURRENT)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        refused = sum(status != 200 for status in statuses)
        if refused:
            raise SystemExit(f"{refused} joins were not answered 200")
        return {"joins": len(statuses), "cpu_usec_per_join": round(cpu * 1e6 / len(statuses), 1),
                "wall_usec_per_join": round(wall * 1e6 / len(statuses), 1)}  # fmt: skip

    return uvloop.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--joins", type=int, default=60_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(_measure(args.joins)))
        return
    workdir = Path(tempfile.mkdtemp(prefix="lane-"))
    stack = Stack(workdir)
    try:
        prepare(stack, "redis")
        stack.manage("init_event", EVENT, "--seats", "100", "--batch", "0", "--ttl", "600")
        env = {**stack.env, "EVENT_ID": EVENT, "RATE_LIMIT_JOIN": "1000000000"}
        results = []
        for _ in range(args.runs):
            out = subprocess.run(
                [PYTHON, "-m", "bench.lane", "--inner", "--joins", str(args.joins)],
                cwd=stack.app_dir, env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if out.returncode:
                sys.exit(out.stderr)
            results.append(json.loads(out.stdout.splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
        median = statistics.median(r["cpu_usec_per_join"] for r in results)
        print(json.dumps({"median_cpu_usec_per_join": median}))
    finally:
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
