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

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import cpu  # noqa: E402
from bench.stack import (  # noqa: E402
    BASE_DIR,
    PYTHON,
    RABBITMQ_URL,
    Stack,
    ensure_database,
    export,
    free_port,
    port_open,
    procfile_web,
    revision,
)
from bench.wrkrun import WRK_DIR, Load, Run, Series, run_wrk, wrk_version  # noqa: E402

if TYPE_CHECKING:
    from queue_app.services import Tick

RESULTS_DIR = BASE_DIR / "bench" / "results"
PROFILE_RATE = 100  # py-spy samples per second
TARGETS = {
    "poll_ratio": 2.5,  # poll req/s >= 2.5 x the baseline's
    "poll_rps": 2_500,  # the "about 2,500 req/s"
    "join_rps": 2_000,
    "memory_2m_bytes": 128 * 2**20,
    "tick_2m_ms": 5.0,
    "bookings_per_s": 1_000,
    "commands_per_1000_polls": 10,
}


@dataclass(frozen=True)
class Plan:
    """What one run measures; --quick shrinks it."""

    load: Load
    repeats: int
    lines: tuple[int, ...]
    poll_tokens: int
    booking_tokens: int
    tick_samples: int
    warmup_s: int
    profile_dir: Path | None
    profile_s: int


_T0 = time.monotonic()


def say(message: str) -> None:
    """Progress, with seconds since start (a full run takes minutes)."""
    print(f"[{time.monotonic() - _T0:6.0f}s] {message}", flush=True)


# --- The run -------------------------------------------------------------------


class Bench:
    """One benchmark run: the stack, the events it made and the figures."""

    def __init__(self, plan: Plan, stack: Stack, broker: str) -> None:
        self.plan = plan
        self.stack = stack
        self.broker = broker
        self.run_id = uuid.uuid4().hex[:8]
        self.events: list[str] = []
        self.results: dict = {"phases": {}}
        self.app_url = ""
        self.baseline_url = ""
        self.ceiling_url = ""
        self.app_proc: subprocess.Popen | None = None
        # The app as the Procfile starts it; its wall profile needs to know which kind.
        self.app_args = procfile_web(stack.app_dir)
        self.app_is_wsgi = ".wsgi:" in self.app_args[0]

    # Django runs in this process too (filling lines, admitting, reading Redis), with
    # the same environment as the server under test: set up only once that exists.
    def setup_django(self) -> None:
        setup_django(self.stack)

    # --- servers -------------------------------------------------------------------

    def start_servers(self) -> None:
        """The two references (one worker each) and the app (the Procfile's command)."""
        from ticketing import redis as r

        r.client().set("bench:baseline", "x" * 32)
        port = free_port()
        env = {**self.stack.env, "DJANGO_SETTINGS_MODULE": "bench.baseline.settings"}
        self.baseline_url = f"http://127.0.0.1:{port}"
        args = ["bench.baseline.wsgi:application", "--workers", "1", "--worker-class", "sync"]
        baseline = self.stack.start_gunicorn(
            "baseline", [*args, "--bind", f"127.0.0.1:{port}"], env, f"{self.baseline_url}/baseline"
        )
        self.results["baseline_server"] = {
            "command": " ".join(["gunicorn", *args]),
            "workers": len(Stack.children(baseline.pid)),
            "worker_class": "sync",
        }

        port = free_port()
        # The script of the code under test, so that both polls run the same Lua.
        env = {**self.stack.env, "POLL_SCRIPT": str(self.stack.app_dir / "lua" / "poll.lua")}
        self.ceiling_url = f"http://127.0.0.1:{port}"
        args = ["bench.baseline.ceiling:app", "--workers", "1", "-k", "bench.baseline.ceiling.Worker"]
        args += ["--keep-alive", "5"]  # as ticketing/gunicorn_conf.py
        ceiling = self.stack.start_gunicorn(
            "ceiling", [*args, "--bind", f"127.0.0.1:{port}"], env, f"{self.ceiling_url}/health"
        )
        batched = env.get("RAW_BATCH", "1") != "0"  # as bench/baseline/ceiling.py reads it
        self.results["ceiling_server"] = {
            "command": " ".join(["gunicorn", *args]),
            "workers": len(Stack.children(ceiling.pid)),
            "worker_class": "uvicorn (uvloop, httptools), redis.asyncio with hiredis, orjson",
            "redis_calls": (
                "the EVALSHAs of one event-loop turn in one pipeline, as the app's fast lane"
                if batched
                else "one `await client.evalsha()` per request (RAW_BATCH=0)"
            ),
        }

        port = free_port()
        env = {**self.stack.env, "HOST": "127.0.0.1", "PORT": str(port)}
        self.app_url = f"http://127.0.0.1:{port}"
        self.app_proc = self.stack.start_gunicorn("app", self.app_args, env, f"{self.app_url}/health")
        self.results["app_server"] = {
            "command": " ".join(["gunicorn", *self.app_args]),
            **gunicorn_conf(env, self.stack.app_dir),
            "env": {k: env[k] for k in ("WEB_CONCURRENCY",) if k in env},
            "rate_limit_join": env["RATE_LIMIT_JOIN"],
            "broker": self.broker,
        }
        say(
            f"baseline on {self.baseline_url}, ceiling on {self.ceiling_url}, "
            f"app on {self.app_url}: {self.results['app_server']}"
        )

    def check_ceiling(self, tokens_file: Path, event_id: str) -> None:
        """The ceiling must do the app's poll, or the ratio to it means nothing: both
        answer the same for a token (but nextPollMs, which is jittered)."""
        token = tokens_file.read_text().split()[0]
        query = f"/api/status/poll?token={token}&eventId={event_id}"
        answers = []
        for url in (self.app_url, self.ceiling_url):
            with urllib.request.urlopen(url + query, timeout=5) as answer:
                body = json.loads(answer.read())
            body["data"].pop("nextPollMs")
            answers.append(body)
        if answers[0] != answers[1]:
            raise SystemExit(
                f"the ceiling's poll is not the app's:\n  app     {answers[0]}\n  ceiling {answers[1]}"
            )

    # --- events and lines ------------------------------------------------------------

    def new_event(self, label: str, *, batch: int) -> str:
        """An event of this run, created as an operator would (init_event)."""
        event_id = f"bench-{label}-{self.run_id}"
        self.stack.manage("init_event", event_id, "--seats", "100000", "--batch", str(batch), "--ttl", "600")
        self.events.append(event_id)
        return event_id

    def fill(self, event_id: str, count: int) -> dict:
        """Fill the line through the join script, pipelined; Redis memory per person."""
        from queue_app import services
        from ticketing import redis as r

        client = r.client()
        before = client.info("memory")["used_memory"]
        t0 = time.perf_counter()
        services.queue_join_many(event_id=event_id, count=count)
        seconds = time.perf_counter() - t0
        after = client.info("memory")["used_memory"]
        k = r.EventKeys(event_id)
        # The line is counters (docs/line.md): the nonces are its only bytes per person.
        nonces = client.memory_usage(k.nonces, samples=0) or 0
        keys = sum(
            client.memory_usage(name, samples=0) or 0
            for name in client.scan_iter(match=k.pattern(), count=1000)
        )
        delta = after - before
        result = {
            "people": count,
            "fill_seconds": seconds,
            "fill_joins_per_s": count / seconds,
            "used_memory_before": before,
            "used_memory_after": after,
            "delta_bytes": delta,
            "delta_mib": delta / 2**20,
            "bytes_per_person": delta / count,
            "event_keys_bytes_per_person": keys / count,
            "nonces_bytes_per_person": nonces / count,
        }
        say(
            f"filled {count:,} in {seconds:.1f} s ({count / seconds:,.0f}/s): "
            f"{delta / 2**20:.1f} MiB, {delta / count:.1f} B/person "
            f"(the event's keys {keys / count:.2f}, of which nonces {nonces / count:.2f})"
        )
        return result

    def join_tokens(self, event_id: str, count: int, path: Path) -> list[str]:
        """People with known tokens (queue_join returns them; the bulk fill does not)."""
        from queue_app import services

        joined = [services.queue_join(event_id=event_id) for _ in range(count)]
        # A dict before the ASGI fast lane (f13399a): --ref of such a revision.
        tokens = [j["token"] if isinstance(j, dict) else j.token for j in joined]
        path.write_text("\n".join(tokens) + "\n")
        return tokens

    # --- wrk -------------------------------------------------------------------------

    def measure(self, series: Series, url: str, script: str, args: list[str]) -> Run:
        """One measured wrk run, with the CPU each part of the machine used."""
        before = cpu.snapshot()
        run = run_wrk(url, script, args, self.plan.load)
        run.cpu_cores = cpu.usage(before, cpu.snapshot(), run.duration_s, self.cpu_groups())
        series.runs.append(run)
        cores = " ".join(f"{k} {v:.2f}" for k, v in run.cpu_cores.items() if v >= 0.01)
        say(
            f"  {series.name:<10} {run.rps:7,.0f} req/s  p50 {run.latency_ms['p50']:6.1f} ms  "
            f"p99 {run.latency_ms['p99']:6.1f} ms  non-2xx {run.non_2xx}  cores: {cores}"
            + (f"  codes {run.codes}" if run.codes else "")
            + ("  (disturbed: other work on the machine)" if cpu.disturbed(run.cpu_cores) else "")
        )
        return run

    def commands_per_1000_polls(self, tokens_file: Path, event_id: str) -> float:
        """Commands Redis ran while the app served one wrk run of waiting people's
        polls, per 1,000 polls: their copies' refreshes, and the metrics each process
        adds once a second (INFO's own calls left out)."""
        from ticketing import redis as r

        def calls() -> int:
            stats = r.client().info("commandstats")
            return sum(v["calls"] for name, v in stats.items() if name != "cmdstat_info")

        before = calls()
        run = run_wrk(self.app_url, "poll", [str(tokens_file), event_id], self.plan.load)
        sent = calls() - before
        say(
            f"  Redis commands during {run.requests:,} polls: {sent:,} "
            f"({1000 * sent / run.requests:.2f} per 1,000)"
        )
        return 1000 * sent / run.requests

    def cpu_groups(self) -> dict[str, Callable[[int, str, int], bool]]:
        """The parts of the machine whose CPU use each measurement reports."""
        app, baseline, ceiling = self.app_proc.pid, self.pid("baseline"), self.pid("ceiling")
        redis_pid = self.pid("redis")
        return {
            "app": lambda pid, name, ppid: app in (pid, ppid),
            "baseline": lambda pid, name, ppid: baseline in (pid, ppid),
            "ceiling": lambda pid, name, ppid: ceiling in (pid, ppid),
            "redis": lambda pid, name, ppid: pid == redis_pid,
            "postgres": lambda pid, name, ppid: name == "postgres",
            "rabbitmq": lambda pid, name, ppid: (
                name.startswith("beam") or name in ("erl_child_setup", "epmd")
            ),
        }

    def warm(self, url: str, script: str, args: list[str]) -> None:
        """A short unrecorded run: lazy imports, pools and threads get started."""
        if self.plan.warmup_s:
            run_wrk(url, script, args, self.plan.load, duration_s=self.plan.warmup_s)

    def line_phase(self, waiting: int) -> None:
        """A line of `waiting` people: memory, then poll (next to the baseline) and join."""
        say(f"--- {waiting:,} waiting")
        event_id = self.new_event(f"line{waiting // 1000}k", batch=1000)
        phase: dict = {"event_id": event_id, "memory": self.fill(event_id, waiting)}
        tokens_file = self.stack.workdir / f"poll-tokens-{waiting}.txt"
        self.join_tokens(event_id, self.plan.poll_tokens, tokens_file)

        baseline, ceiling, poll = Series("baseline"), Series("ceiling"), Series("poll")
        health, join = Series("health"), Series("join")
        self.check_ceiling(tokens_file, event_id)
        specs: list[tuple[Series, str, str, list[str]]] = [
            (baseline, f"{self.baseline_url}/baseline", "get", []),
            (ceiling, self.ceiling_url, "poll", [str(tokens_file), event_id]),
            (poll, self.app_url, "poll", [str(tokens_file), event_id]),
        ]
        first = waiting == self.plan.lines[0]
        if first:  # the app's stack without Redis; the line's length cannot matter to it
            specs.append((health, f"{self.app_url}/health", "get", []))
        for _, url, script, args in specs:
            self.warm(url, script, args)
        # Interleaved, so that a noisy neighbour slows each series alike.
        for _ in range(self.plan.repeats):
            for series, url, script, args in specs:
                self.measure(series, url, script, args)
        phase["redis_commands_per_1000_polls"] = self.commands_per_1000_polls(tokens_file, event_id)
        self.warm(self.app_url, "join", [event_id])
        for _ in range(self.plan.repeats):
            self.measure(join, self.app_url, "join", [event_id])

        # Threads start on demand (gthread's; asgiref's for Django's sync code under
        # ASGI): count them once they have worked.
        self.results["app_server"].update(observed_workers(self.app_proc.pid))
        base_rps, ceiling_rps = baseline.median("rps"), ceiling.median("rps")
        for series in (baseline, ceiling, poll, health, join):
            if series.runs:
                phase[series.name] = {
                    **series.summary(),
                    "ratio_to_baseline": series.median("rps") / base_rps,
                }
                if series in (ceiling, poll):  # the ceiling is a poll's: no other path's
                    phase[series.name]["ratio_to_ceiling"] = series.median("rps") / ceiling_rps
        # The app may run more workers than the ceiling's one: server CPU per poll
        # compares the two alike.
        cpu = phase["poll"]["cpu_ms_per_request"]["app"], phase["ceiling"]["cpu_ms_per_request"]["ceiling"]
        phase["poll"]["cpu_per_request_to_ceiling"] = cpu[0] / cpu[1] if cpu[1] else None
        self.results["phases"][str(waiting)] = phase

        if self.plan.profile_dir and first:
            for name, url, script, args in (
                ("baseline", f"{self.baseline_url}/baseline", "get", []),
                ("ceiling", self.ceiling_url, "poll", [str(tokens_file), event_id]),
                ("health", f"{self.app_url}/health", "get", []),
                ("poll", self.app_url, "poll", [str(tokens_file), event_id]),
                ("join", self.app_url, "join", [event_id]),
            ):
                pid = self.pid(name) if name in ("baseline", "ceiling") else self.app_proc.pid
                self.profile(name, pid, url, script, args)

        if waiting == max(self.plan.lines):
            self.tick_phase(event_id, waiting)

    def booking_phase(self) -> None:
        """Bookings end to end: each request one ACTIVE token, one Postgres row."""
        from booking_app.models import Reservation

        say("--- booking")
        event_id = self.new_event("booking", batch=100_000)
        count = self.plan.booking_tokens
        extra = self.plan.profile_s * 2_000 if self.plan.profile_dir else 0
        t0 = time.perf_counter()
        tokens = self.join_tokens(event_id, count + extra, self.stack.workdir / "booking-all.txt")
        say(f"joined {len(tokens):,} through queue_join in {time.perf_counter() - t0:.1f} s")
        tick = admit_once(event_id)
        if tick.admitted != len(tokens):
            raise SystemExit(f"admitted {tick.admitted} of {len(tokens)}: {tick}")
        say(f"admitted {tick.admitted:,} in one tick")

        per_run = count // self.plan.repeats
        files = []
        for i in range(self.plan.repeats):
            path = self.stack.workdir / f"booking-{i}.txt"
            path.write_text("\n".join(tokens[i * per_run : (i + 1) * per_run]) + "\n")
            files.append(path)
        series = Series("booking")
        args = [str(self.plan.load.threads)]
        for path in files:
            self.measure(series, self.app_url, "booking", [str(path), event_id, *args])
        rows = Reservation.objects.filter(event_id=event_id).count()
        ok = series.total("ok")
        summary = series.summary()
        self.results["booking"] = {
            **summary,
            "event_id": event_id,
            "bookings_per_s": series.median("ok_per_s"),
            "tokens_per_run": per_run,
            "tokens_ran_out": any(run.exhausted_threads for run in series.runs),
            "rows_in_postgres": rows,
            "successful_answers": ok,
            "ratio_to_baseline": series.median("ok_per_s") / self.first_baseline_rps(),
        }
        # Requests still in flight when wrk stops are answered to nobody but do book:
        # up to one per connection and run more rows than 200s. Fewer would be a bug.
        if not ok <= rows <= ok + self.plan.load.connections * len(series.runs):
            say(f"WARNING: {ok} bookings answered 200 but {rows} rows are in Postgres")
        if self.results["booking"]["tokens_ran_out"]:
            say("WARNING: a booking run ran out of tokens: its bookings/s understate; raise --booking-tokens")
        if self.plan.profile_dir:
            path = self.stack.workdir / "booking-profile.txt"
            path.write_text("\n".join(tokens[count:]) + "\n")
            self.profile("booking", self.app_proc.pid, self.app_url, "booking", [str(path), event_id, *args])

    def tick_phase(self, event_id: str, waiting: int) -> None:
        """The admission tick on the longest line: the default 70/s, then this event's 1000/s."""
        from bench import tick

        say(f"--- admission tick at {waiting:,} waiting")
        ticks = []
        for batch, samples in ((70, self.plan.tick_samples), (1000, max(20, self.plan.tick_samples // 4))):
            self.stack.manage("init_event", event_id, "--batch", str(batch))
            m = {"waiting": waiting, **tick.measure(event_id, samples=samples, batch=batch)}
            say(
                f"  tick of {batch}: median {m['round_trip_median_ms']:.3f} ms, p99 "
                f"{m['round_trip_p99_ms']:.3f} ms, inside Redis {m['inside_redis_mean_ms']:.3f} ms, "
                f"PING {m['ping_median_ms']:.3f} ms"
            )
            ticks.append(m)
        self.results["tick"] = ticks

    # --- profiles --------------------------------------------------------------------

    def pid(self, name: str) -> int:
        """The pid of a started process (gunicorn's master for a server)."""
        return next(p.pid for n, p in self.stack.procs if n == name)

    def first_baseline_rps(self) -> float:
        first = self.results["phases"][str(self.plan.lines[0])]
        return first["baseline"]["rps"]

    def profile(self, name: str, pid: int, url: str, script: str, args: list[str]) -> None:
        """py-spy on every worker of `pid` while wrk drives one path (not a measured run).

        Two samplers at once, both non-blocking: `--gil` (only the thread holding the
        GIL: Python's CPU time; without it, on an oversubscribed machine, threads
        preempted right after a send pile up on socket calls) and `--idle` (every
        thread: where the wall time of a request goes, waits included). Under WSGI the
        wall report keeps the samples inside Django's handler; an event loop has no
        thread per request (a waiting coroutine is on no stack), so under ASGI it is
        the workers' whole wall time, the loop's idle time included.
        """
        from bench import profile_report

        wsgi = name == "baseline" or (self.app_is_wsgi and name != "ceiling")
        spy = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
        seconds = self.plan.profile_s
        outputs = {kind: self.plan.profile_dir / f"{name}.{kind}.txt" for kind in ("cpu", "wall")}
        common = ["record", "--pid", str(pid), "--subprocesses", "--duration", str(seconds)]
        common += ["--rate", str(PROFILE_RATE), "--format", "raw", "--nonblocking"]
        wrk = subprocess.Popen(
            [
                "wrk",
                f"-t{self.plan.load.threads}",
                f"-c{self.plan.load.connections}",
                f"-d{seconds + 3}s",
                "--latency",
                "-s",
                str(WRK_DIR / f"{script}.lua"),
                url,
                "--",
                *args,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1)
        spies = [
            subprocess.Popen(
                [spy, *common, flag, "--output", str(outputs[kind])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for kind, flag in (("cpu", "--gil"), ("wall", "--idle"))
        ]
        out, _ = wrk.communicate()
        for proc in spies:
            proc.wait(seconds + 60)
        data = json.loads(next(ln for ln in out.splitlines() if ln.startswith("BENCH_JSON "))[11:])
        rps = data["requests"] / (data["duration_us"] / 1e6)
        requests = int(rps * seconds)
        reports = [
            profile_report.report(outputs["cpu"], requests=requests, rate=PROFILE_RATE),
            profile_report.report(
                outputs["wall"],
                requests=requests,
                rate=PROFILE_RATE,
                within="WSGIHandler.__call__" if wsgi else "",
            ),
        ]
        report_path = self.plan.profile_dir / f"{name}.report.txt"
        report_path.write_text(f"{name}: {rps:,.0f} req/s under py-spy\n\n" + "\n".join(reports))
        say(f"profiled {name} ({rps:,.0f} req/s under py-spy): {report_path}")
        self.results.setdefault("profiles", {})[name] = {
            "cpu": str(outputs["cpu"]),
            "wall": str(outputs["wall"]),
            "report": str(report_path),
            "rps_under_profiler": rps,
        }


def admit_once(event_id: str) -> "Tick":
    """One admission tick; a second that already had one is waited out."""
    from queue_app import services

    for _ in range(50):
        tick = services.event_admit(event_id)
        if tick.outcome != "ALREADY_TICKED":
            return tick
        time.sleep(0.1)
    raise SystemExit(f"{event_id}: the admission tick never ran")


def setup_django(stack: Stack) -> None:
    """Django in this process (filling lines, admitting, reading Redis), with the code
    and the environment of the server under test."""
    os.environ.update(stack.env)
    sys.path.insert(0, str(stack.app_dir))
    # Celery (imported with the app) puts the current directory first on sys.path.
    os.chdir(stack.app_dir)
    import django

    django.setup()


def gunicorn_conf(env: dict[str, str], app_dir: Path) -> dict:
    """The settings ticketing/gunicorn_conf.py gives in this environment."""
    # `threads`: gthread's, for a --ref of a WSGI revision; the uvicorn worker's options.
    code = (
        "import json, ticketing.gunicorn_conf as c; print(json.dumps({k: getattr(c, k) "
        "for k in ('bind', 'workers', 'worker_class', 'threads', 'keepalive', 'accesslog') if hasattr(c, k)}"
        " | {'worker_options': getattr(getattr(c, 'Worker', None), 'CONFIG_KWARGS', None)},"
        " default=lambda o: f'{o.__module__}.{o.__qualname__}'))"  # (a class: the protocol)
    )
    done = subprocess.run([PYTHON, "-c", code], cwd=app_dir, env=env, capture_output=True, text=True)
    return json.loads(done.stdout)


def observed_workers(master: int) -> dict:
    """What is actually running: worker processes and each one's OS threads."""
    workers = Stack.children(master)
    threads = [len(list(Path(f"/proc/{w}/task").iterdir())) for w in workers]
    return {"observed_workers": len(workers), "observed_os_threads_per_worker": threads}


def machine() -> dict:
    """What the figures were measured on: they mean little without it."""
    from django import get_version
    from django.db import connection

    from ticketing import redis as r

    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    os_name = next(
        (
            line.split("=", 1)[1].strip('"')
            for line in Path("/etc/os-release").read_text().splitlines()
            if line.startswith("PRETTY_NAME=")
        ),
        platform.platform(),
    )
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg = cursor.fetchone()[0]
    import gunicorn

    return {
        "cpu": cpu_model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "os": os_name,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "django": get_version(),
        "gunicorn": gunicorn.__version__,
        "redis": r.client().info("server")["redis_version"],
        "postgres": pg,
        "wrk": wrk_version(),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }


# --- Report --------------------------------------------------------------------------


def targets(results: dict, lines: tuple[int, ...]) -> list[dict]:
    """Each target of the issue against the figure that answers it."""
    big = results["phases"][str(max(lines))]
    out = [
        {
            "name": f"poll req/s >= {TARGETS['poll_ratio']}x baseline ({max(lines):,} waiting)",
            "measured": big["poll"]["ratio_to_baseline"],
            "met": big["poll"]["ratio_to_baseline"] >= TARGETS["poll_ratio"],
        },
        {
            "name": f"poll >= {TARGETS['poll_rps']:,} req/s ({max(lines):,} waiting)",
            "measured": big["poll"]["rps"],
            "met": big["poll"]["rps"] >= TARGETS["poll_rps"],
        },
        {
            "name": f"join >= {TARGETS['join_rps']:,} req/s",
            "measured": big["join"]["rps"],
            "met": big["join"]["rps"] >= TARGETS["join_rps"],
        },
        {
            "name": f"bookings end to end >= {TARGETS['bookings_per_s']:,}/s",
            "measured": results["booking"]["bookings_per_s"],
            "met": results["booking"]["bookings_per_s"] >= TARGETS["bookings_per_s"],
        },
    ]
    if "2000000" in results["phases"]:
        mem = results["phases"]["2000000"]["memory"]["delta_bytes"]
        out.append(
            {
                "name": "Redis memory for 2,000,000 waiting <= 128 MiB",
                "measured": mem / 2**20,
                "met": mem <= TARGETS["memory_2m_bytes"],
            }
        )
    out.append(
        {
            "name": f"Redis commands per 1,000 polls (waiting) <= {TARGETS['commands_per_1000_polls']}",
            "measured": big["redis_commands_per_1000_polls"],
            "met": big["redis_commands_per_1000_polls"] <= TARGETS["commands_per_1000_polls"],
        }
    )
    tick = results["tick"][0]
    out.append(
        {
            "name": f"tick of 70 at {tick['waiting']:,} waiting <= {TARGETS['tick_2m_ms']} ms (median)",
            "measured": tick["round_trip_median_ms"],
            "met": tick["round_trip_median_ms"] <= TARGETS["tick_2m_ms"],
        }
    )
    return out


def table(results: dict) -> str:
    """The human-readable summary printed at the end of a run."""
    rows = [
        (
            "measurement",
            "req/s",
            "x baseline",
            "x ceiling",
            "p50 ms",
            "p99 ms",
            "non-2xx",
            "server CPU ms/req",
            "cores used",
        )
    ]

    def row(label: str, s: dict, rate: float, server: str) -> tuple[str, ...]:
        return (
            label,
            f"{rate:,.0f}",
            f"{s['ratio_to_baseline']:.2f}",
            f"{s['ratio_to_ceiling']:.2f}" if "ratio_to_ceiling" in s else "",
            f"{s['p50_ms']:.2f}",
            f"{s['p99_ms']:.2f}",
            str(s["non_2xx_total"]),
            f"{s['cpu_ms_per_request'].get(server, 0):.2f}",
            f"{s['cpu_cores'].get('machine', 0):.2f}",
        )

    for waiting, phase in results["phases"].items():
        for name in ("baseline", "ceiling", "poll", "health", "join"):
            if name in phase:
                label = f"{name} ({int(waiting):,} waiting)"
                server = name if name in ("baseline", "ceiling") else "app"
                rows.append(row(label, phase[name], phase[name]["rps"], server))
    b = results["booking"]
    rows.append(row("booking (200s/s)", b, b["bookings_per_s"], "app"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    app, ceiling = results["app_server"], results["ceiling_server"]
    lines.append(
        f"baseline: {results['baseline_server']['command']}\n"
        f"ceiling:  {ceiling['command']}\n"
        f"          raw ASGI poll, {ceiling['worker_class']}; {ceiling['redis_calls']}\n"
        f"app:      {app['command']} ({app['observed_workers']} workers)"
    )
    for waiting, phase in results["phases"].items():
        poll, top, base = phase["poll"], phase["ceiling"], phase["baseline"]
        lines.append(
            f"poll at {int(waiting):,} waiting: {poll['rps']:,.0f} req/s = "
            f"{poll['ratio_to_ceiling']:.2f} x the Python ceiling ({top['rps']:,.0f}), "
            f"{poll['ratio_to_baseline']:.2f} x the baseline ({base['rps']:,.0f}); server CPU per poll "
            f"{poll['cpu_ms_per_request']['app']:.3f} ms = {poll['cpu_per_request_to_ceiling'] or 0:.2f} x "
            f"the ceiling's {top['cpu_ms_per_request']['ceiling']:.3f} ms"
        )
    lines.append("")
    for waiting, phase in results["phases"].items():
        m = phase["memory"]
        lines.append(
            f"Redis memory, {int(waiting):,} waiting: {m['delta_mib']:.1f} MiB, "
            f"{m['bytes_per_person']:.1f} B/person (the event's keys "
            f"{m['event_keys_bytes_per_person']:.2f}, of which nonces {m['nonces_bytes_per_person']:.2f})"
        )
    for t in results["tick"]:
        lines.append(
            f"tick of {t['batch']} at {t['waiting']:,} waiting: median {t['round_trip_median_ms']:.3f} ms, "
            f"p99 {t['round_trip_p99_ms']:.3f} ms, inside Redis {t['inside_redis_mean_ms']:.3f} ms, "
            f"PING {t['ping_median_ms']:.3f} ms"
        )
    lines.append("")
    for t in results["targets"]:
        lines.append(f"[{'met' if t['met'] else 'NOT MET'}] {t['name']}: {t['measured']:,.2f}")
    return "\n".join(lines)


# --- Entry points ------------------------------------------------------------------------


@contextlib.contextmanager
def running_stack(keep: bool, ref: str | None) -> Iterator[Stack]:
    """The private services; torn down (and the temp dir removed) however the run ends.

    With `ref`, the app runs from an export of that revision instead of the
    working tree (which someone may be editing while the run goes on).
    """
    workdir = Path(tempfile.mkdtemp(prefix="ticketing-bench-"))
    if ref:
        app_dir, commit = export(ref, workdir / "app")
        stack = Stack(workdir, app_dir)
        stack.code = {"ref": ref, "commit": commit}
    else:
        stack = Stack(workdir)
        stack.code = {"working_tree": str(BASE_DIR), **revision()}

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # Also when started in the background, where SIGINT would be ignored.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed = True
    try:
        yield stack
        failed = False
    finally:
        stack.close()
        if failed or keep:
            say(f"logs and token files kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def prepare(stack: Stack, broker: str) -> None:
    """Private Redis, the bench database (migrated), the environment."""
    run_queue = f"bench.booking.completed.{uuid.uuid4().hex[:8]}"
    redis_url = stack.start_redis()
    database_url = ensure_database()
    # The Redis broker, when chosen, is db 1 of the private Redis.
    broker_url = RABBITMQ_URL if broker == "rabbitmq" else redis_url.rsplit("/", 1)[0] + "/1"
    stack.app_env(database_url=database_url, broker_url=broker_url, booking_queue=run_queue)
    say(f"private Redis {redis_url}, database {database_url}, broker {broker} (queue {run_queue})")
    stack.manage("migrate", "--noinput")


def pick_broker(choice: str) -> str:
    """RabbitMQ as in production when it is there, else the private Redis."""
    if choice == "auto":
        return "rabbitmq" if port_open("127.0.0.1", 5672) else "redis"
    return choice


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
        run = Bench(plan, stack, broker)
        run.results["code"] = stack.code
        run.setup_django()
        try:
            run.results["machine"] = machine()
            run.start_servers()
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
        from queue_app import services

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
            tick_forever(services.events_admit, proc)
        finally:
            stack.forget([args.event_id], RABBITMQ_URL if broker == "rabbitmq" else None)
    return 0


def tick_forever(admit: Callable[[], list], proc: subprocess.Popen) -> None:
    """What Celery beat's admit_tick does, once a second, in this process."""
    try:
        while proc.poll() is None:
            for tick in admit():
                if tick.admitted:
                    say(f"admitted {tick.admitted} ({tick.waiting} waiting, {tick.active} active)")
            time.sleep(1 - time.time() % 1 + 0.01)
    except KeyboardInterrupt:
        pass


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
