"""The measurements of a benchmark run, phase by phase: a line of people waiting
(Redis memory; polls next to the two references, and joins, under wrk), bookings
end to end, and the admission tick on the longest line; py-spy profiles of each
path with --profile. The servers are bench/serving.py's; figures go to `results`."""

import json
import os
import platform
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench import cpu
from bench.report import say
from bench.serving import Servers, observed_workers
from bench.stack import PYTHON, Stack
from bench.wrkrun import WRK_DIR, Load, Run, Series, run_wrk, wrk_version

if TYPE_CHECKING:
    from queue_app.admission import Tick

PROFILE_RATE = 100  # py-spy samples per second


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


class Bench:
    """One benchmark run's measurements: the events it made and the figures."""

    def __init__(self, plan: Plan, stack: Stack, servers: Servers) -> None:
        self.plan = plan
        self.stack = stack
        self.servers = servers
        self.run_id = uuid.uuid4().hex[:8]
        self.events: list[str] = []
        self.results: dict = {"phases": {}}

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
        from ticketing import store

        client = store.client()
        before = client.info("memory")["used_memory"]
        t0 = time.perf_counter()
        services.queue_join_many(event_id=event_id, count=count)
        seconds = time.perf_counter() - t0
        after = client.info("memory")["used_memory"]
        k = store.EventKeys(event_id)
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
        from ticketing import store

        def calls() -> int:
            stats = store.client().info("commandstats")
            return sum(v["calls"] for name, v in stats.items() if name != "cmdstat_info")

        before = calls()
        run = run_wrk(self.servers.app_url, "poll", [str(tokens_file), event_id], self.plan.load)
        sent = calls() - before
        say(
            f"  Redis commands during {run.requests:,} polls: {sent:,} "
            f"({1000 * sent / run.requests:.2f} per 1,000)"
        )
        return 1000 * sent / run.requests

    def cpu_groups(self) -> dict[str, Callable[[int, str, int], bool]]:
        """The parts of the machine whose CPU use each measurement reports."""
        app, baseline, ceiling = (
            self.servers.app_proc.pid,
            self.servers.pid("baseline"),
            self.servers.pid("ceiling"),
        )
        redis_pid = self.servers.pid("redis")
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
        self.servers.check_ceiling(tokens_file, event_id)
        specs: list[tuple[Series, str, str, list[str]]] = [
            (baseline, f"{self.servers.baseline_url}/baseline", "get", []),
            (ceiling, self.servers.ceiling_url, "poll", [str(tokens_file), event_id]),
            (poll, self.servers.app_url, "poll", [str(tokens_file), event_id]),
        ]
        first = waiting == self.plan.lines[0]
        if first:  # the app's stack without Redis; the line's length cannot matter to it
            specs.append((health, f"{self.servers.app_url}/health", "get", []))
        for _, url, script, args in specs:
            self.warm(url, script, args)
        # Interleaved, so that a noisy neighbour slows each series alike.
        for _ in range(self.plan.repeats):
            for series, url, script, args in specs:
                self.measure(series, url, script, args)
        phase["redis_commands_per_1000_polls"] = self.commands_per_1000_polls(tokens_file, event_id)
        self.warm(self.servers.app_url, "join", [event_id])
        for _ in range(self.plan.repeats):
            self.measure(join, self.servers.app_url, "join", [event_id])

        # Threads start on demand (gthread's; asgiref's for Django's sync code under
        # ASGI): count them once they have worked.
        self.results["app_server"].update(observed_workers(self.servers.app_proc.pid))
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
                ("baseline", f"{self.servers.baseline_url}/baseline", "get", []),
                ("ceiling", self.servers.ceiling_url, "poll", [str(tokens_file), event_id]),
                ("health", f"{self.servers.app_url}/health", "get", []),
                ("poll", self.servers.app_url, "poll", [str(tokens_file), event_id]),
                ("join", self.servers.app_url, "join", [event_id]),
            ):
                pid = self.servers.pid(name) if name in ("baseline", "ceiling") else self.servers.app_proc.pid
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
            self.measure(series, self.servers.app_url, "booking", [str(path), event_id, *args])
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
            self.profile(
                "booking",
                self.servers.app_proc.pid,
                self.servers.app_url,
                "booking",
                [str(path), event_id, *args],
            )

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

    def first_baseline_rps(self) -> float:
        first = self.results["phases"][str(self.plan.lines[0])]
        return first["baseline"]["rps"]

    # --- profiles --------------------------------------------------------------------

    def profile(self, name: str, pid: int, url: str, script: str, args: list[str]) -> None:
        """py-spy on every worker of `pid` while wrk drives one path (record_profile)."""
        wsgi = name == "baseline" or (self.servers.app_is_wsgi and name != "ceiling")
        self.results.setdefault("profiles", {})[name] = record_profile(
            self.plan, name, pid, url, script, args, wsgi=wsgi
        )


def record_profile(
    plan: Plan, name: str, pid: int, url: str, script: str, args: list[str], *, wsgi: bool
) -> dict:
    """py-spy on every worker of `pid` while wrk drives one path (not a measured run).

    Two samplers at once, both non-blocking: `--gil` (only the thread holding the
    GIL: Python's CPU time; without it, on an oversubscribed machine, threads
    preempted right after a send pile up on socket calls) and `--idle` (every
    thread: where the wall time of a request goes, waits included). Under WSGI the
    wall report keeps the samples inside Django's handler; an event loop has no
    thread per request (a waiting coroutine is on no stack), so under ASGI it is
    the workers' whole wall time, the loop's idle time included (`wsgi`: which
    of the two). What was recorded where, for the results.
    """
    from bench import profile_report

    spy = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
    seconds = plan.profile_s
    outputs = {kind: plan.profile_dir / f"{name}.{kind}.txt" for kind in ("cpu", "wall")}
    common = ["record", "--pid", str(pid), "--subprocesses", "--duration", str(seconds)]
    common += ["--rate", str(PROFILE_RATE), "--format", "raw", "--nonblocking"]
    wrk = subprocess.Popen(
        [
            "wrk",
            f"-t{plan.load.threads}",
            f"-c{plan.load.connections}",
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
    report_path = plan.profile_dir / f"{name}.report.txt"
    report_path.write_text(f"{name}: {rps:,.0f} req/s under py-spy\n\n" + "\n".join(reports))
    say(f"profiled {name} ({rps:,.0f} req/s under py-spy): {report_path}")
    return {
        "cpu": str(outputs["cpu"]),
        "wall": str(outputs["wall"]),
        "report": str(report_path),
        "rps_under_profiler": rps,
    }


def admit_once(event_id: str) -> "Tick":
    """One admission tick; a second that already had one is waited out."""
    from queue_app import admission

    for _ in range(50):
        tick = admission.event_admit(event_id)
        if tick.outcome != "ALREADY_TICKED":
            return tick
        time.sleep(0.1)
    raise SystemExit(f"{event_id}: the admission tick never ran")


def machine() -> dict:
    """What the figures were measured on: they mean little without it."""
    from django import get_version
    from django.db import connection

    from ticketing import store

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
        "redis": store.client().info("server")["redis_version"],
        "postgres": pg,
        "wrk": wrk_version(),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }
