"""What joins cost the event's Redis node: commands and server time per HTTP join.

The app as production serves it (the Procfile's `web:`, WEB_CONCURRENCY workers) on
a private Redis, an event with the protections off (no account, address cap, proof
of work; RATE_LIMIT_JOIN=0), joined over HTTP by wrk with the seed's script
(../shared/peers/wrk/join.lua): a warm-up, then Redis' statistics reset (CONFIG
RESETSTAT), then joins for --duration, then every
worker's last block given back, then INFO commandstats: every command Redis ran in
that time (scripts and the commands inside them, the line's refreshes, the metrics),
and the microseconds it spent on them. That last figure is the hot node's load per
arrival, the unit of docs/scaling.md's capacity model. Beside it, the app's own CPU
per join (its master and workers, from /proc: bench/cpu.py), the web tier's unit.

    .venv/bin/python -m bench.join_commands [--duration 5s] [--workers 2] [--conns 64]
                                             [--block-ms 100] [--runs 3] [--rate-limit 0]
"""

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from bench import cpu
from bench.serving import prepare
from bench.stack import Stack, procfile_web
from ticketing import servers

EVENT = "joincost"
PEERS = Path(__file__).resolve().parent.parent.parent / "shared" / "peers"


def _joins(url: str, seconds: str, conns: int) -> tuple[int, float]:
    """Joins by wrk for `seconds` (the seed's script: every request a new person);
    how many, and their rate. Any answer but 200 fails the run."""
    out = subprocess.run(
        ["wrk", "-t2", f"-c{conns}", f"-d{seconds}", "-s", str(PEERS / "wrk" / "join.lua"), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = dict(part.split("=") for part in out.split("RESULT ", 1)[1].split())
    if int(found["non2xx"]) or int(found["sock_errors"]):
        raise SystemExit(f"joins failed: {found}")
    return int(found["requests"]), float(found["rps"])


def _commandstats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    """command -> (calls, usec)."""
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in r.info("commandstats").items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default="5s", help="each run's joins, by wrk")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--conns", type=int, default=64)
    parser.add_argument("--block-ms", type=int, default=100, help="QUEUE_BLOCK_MS (0: a number per join)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--rate-limit", type=int, default=0, help="RATE_LIMIT_JOIN (0: off; wrk joins from one address)"
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="join-commands-"))
    stack = Stack(workdir)
    try:
        prepare(stack, "redis")
        stack.manage("init_event", EVENT, "--seats", "100", "--batch", "0", "--ttl", "600")
        port = servers.free_port()
        env = {**stack.env, "EVENT_ID": EVENT, "WEB_CONCURRENCY": str(args.workers),
               "QUEUE_BLOCK_MS": str(args.block_ms),
               "RATE_LIMIT_JOIN": str(args.rate_limit), "HOST": "127.0.0.1", "PORT": str(port)}  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        app = stack.start_gunicorn("app", procfile_web(stack.app_dir), env, f"{url}/health").pid
        groups = {"app": lambda pid, name, ppid: app in (pid, ppid)}
        r = redis.Redis.from_url(stack.redis_url)
        blocks = f"ticket:{{{EVENT}}}:queue:blocks"
        results = []
        for run in range(1, args.runs + 1):
            _joins(url, "2s", args.conns)  # warm: scripts loaded, blocks grown
            time.sleep(0.5)  # the warm-up's last blocks given back
            r.config_resetstat()
            before = cpu.snapshot()
            joins, rate = _joins(url, args.duration, args.conns)
            app_seconds = cpu.usage(before, cpu.snapshot(), 1, groups)["app"]
            deadline = time.monotonic() + 10
            while r.zcard(blocks) and time.monotonic() < deadline:
                time.sleep(0.01)
            stats = _commandstats(r)
            stats.pop("info", None)
            stats.pop("zcard", None)  # this harness's own
            stats.pop("config|resetstat", None)
            calls = sum(c for c, _ in stats.values())
            usec = sum(u for _, u in stats.values())
            result = {
                "run": run,
                "joins": joins,
                "joins_per_second": round(rate),
                "commands": calls,
                "commands_per_10000_joins": round(calls * 10_000 / joins, 1),
                "redis_usec_per_join": round(usec / joins, 3),
                "app_cpu_usec_per_join": round(app_seconds * 1e6 / joins, 1),
                "by_command": {k: c for k, (c, _) in sorted(stats.items(), key=lambda kv: -kv[1][0])},
            }
            results.append(result)
            print(json.dumps(result), flush=True)
        print(
            json.dumps(
                {
                    "workers": args.workers,
                    "block_ms": args.block_ms,
                    "rate_limit_join": args.rate_limit,
                    "median_commands_per_10000_joins": statistics.median(
                        x["commands_per_10000_joins"] for x in results
                    ),
                    "median_redis_usec_per_join": statistics.median(
                        x["redis_usec_per_join"] for x in results
                    ),
                    "median_joins_per_second": statistics.median(x["joins_per_second"] for x in results),
                    "median_app_cpu_usec_per_join": statistics.median(
                        x["app_cpu_usec_per_join"] for x in results
                    ),
                }
            )
        )
    finally:
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
