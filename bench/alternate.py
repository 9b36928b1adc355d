"""Two revisions' joins, in alternating rounds of one run: the change's figure
against its baseline, each measured beside the other.

On a machine whose speed drifts by a fifth from minute to minute, a figure of one
revision measured now says little against another's measured an hour ago. Here both
revisions' production servers (the Procfile's `web:`, one worker each, as
side-by-side.sh runs one process against the seed's) run at once on one private
Redis, and wrk joins each in turn, the order swapped every round: each round gives a
pair, and the medians of the pairs' ratios say how the two compare. Joins as the
seed's wrk script sends them (../shared/peers/wrk/join.lua: every request a new
person), the join rate limit raised but running, as side by side.

Each round reports requests a second and the worker's CPU µs per join (from /proc:
bench/cpu.py).

    .venv/bin/python -m bench.alternate [--base HEAD~1] [--head WORKTREE] [--rounds 10]
                                         [--duration 5s] [--conns 64]
"""

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from bench import cpu
from bench.bare import _run
from bench.serving import prepare
from bench.stack import BASE_DIR, Stack, export, procfile_web
from ticketing import servers

EVENT = "alternate"


def _rounded(found: dict) -> dict:
    return {k: round(v, 1) for k, v in found.items()}


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 1)


def _summary(base: str, head: str, rounds: dict[str, list[dict]]) -> dict:
    """Each revision's medians, and the median of the rounds' ratios (head / base)."""
    pairs = list(zip(rounds["base"], rounds["head"], strict=True))
    return {
        "base": base,
        "head": head,
        "median_rps": {name: _median(runs, "rps") for name, runs in rounds.items()},
        "median_cpu_usec_per_join": {n: _median(runs, "cpu_usec_per_join") for n, runs in rounds.items()},
        "median_round_rps_ratio": round(statistics.median(h["rps"] / b["rps"] for b, h in pairs), 3),
        "median_round_cpu_ratio": round(
            statistics.median(h["cpu_usec_per_join"] / b["cpu_usec_per_join"] for b, h in pairs), 3
        ),
        "rounds_head_faster": f"{sum(h['rps'] > b['rps'] for b, h in pairs)} of {len(pairs)}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD~1", help="the baseline's revision")
    parser.add_argument("--head", default="WORKTREE", help="the change's revision (WORKTREE: as checked out)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", default="5s")
    parser.add_argument("--conns", type=int, default=64)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="alternate-"))
    stack = Stack(workdir)
    try:
        prepare(stack, "redis")
        stack.manage("init_event", EVENT, "--seats", "100", "--batch", "0", "--ttl", "600")
        dirs = {"base": export(args.base, workdir / "base")[0]}
        dirs["head"] = BASE_DIR if args.head == "WORKTREE" else export(args.head, workdir / "head")[0]
        urls, masters = {}, {}
        for name, app_dir in dirs.items():
            port = servers.free_port()
            env = {**stack.env, "EVENT_ID": EVENT, "WEB_CONCURRENCY": "1", "RATE_LIMIT_JOIN": "1000000000",
                   "HOST": "127.0.0.1", "PORT": str(port), "PYTHONPATH": f"{app_dir}:{BASE_DIR}"}  # fmt: skip
            urls[name] = f"http://127.0.0.1:{port}/api/queue/join"
            runner = Stack(workdir / name, app_dir)
            runner.procs = stack.procs  # stopped with the rest
            (workdir / name).mkdir(exist_ok=True)
            masters[name] = runner.start_gunicorn(
                name, procfile_web(app_dir), env, f"http://127.0.0.1:{port}/health"
            ).pid
        for url in urls.values():
            _run(url, "3s", args.conns)  # warm: scripts loaded, blocks and leases grown
        rounds: dict[str, list[dict]] = {name: [] for name in urls}
        for n in range(args.rounds):
            for name in ("base", "head") if n % 2 == 0 else ("head", "base"):
                master = masters[name]
                before = cpu.snapshot()
                found = _run(urls[name], args.duration, args.conns)
                used = cpu.usage(
                    before, cpu.snapshot(), 1, {"app": lambda pid, _, ppid, m=master: m in (pid, ppid)}
                )
                if int(found["non2xx"]):
                    raise SystemExit(f"{name}: joins were refused: {found}")
                joins = int(found["requests"])
                cpu_usec = used["app"] * 1e6 / joins
                rounds[name].append({"rps": float(found["rps"]), "cpu_usec_per_join": cpu_usec})
            print(json.dumps({name: _rounded(runs[-1]) for name, runs in rounds.items()}), flush=True)
        print(json.dumps(_summary(args.base, args.head, rounds)))
    finally:
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
