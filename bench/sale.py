"""`make sale`: a scaled-down sale against the real stack, measured per component and
checked against the capacity model (bench/capacity.py, docs/scaling.md).

    .venv/bin/python bench/sale.py                    # unit costs, then the sale (~5 min)
    .venv/bin/python bench/sale.py --units-only       # the unit costs alone (~1.5 min)
    .venv/bin/python bench/sale.py --people 30000 --admit-rate 50 --admit-seconds 120
    .venv/bin/python bench/sale.py --recheck bench/results/sale-<time>.json   # the check again

The stack is production's: the Procfile's `web:` command (gunicorn, uvicorn
workers), a Celery worker and beat (the real once-a-second admission tick), a
private redis-server on a free port, the Postgres database `ticketing_cap`, the
RabbitMQ vhost `cap`. Everything started here is stopped at the end, by its id.

Two parts, in one run so that the check compares figures of the same hour:

1. **Unit costs.** One kind of request at a time, as fast as the server answers
   (batched: many requests a turn of its loop), then at a third of that rate
   (unbatched, as a spread-out crowd sends them): the waiting room's page, joins,
   polls of waiting people, leaves, polls Redis answers (admitted people), bookings.
   Per request: CPU of the web processes (from /proc), Redis CPU, commands and bytes
   (INFO), bytes on the wire, the CPU of this database's Postgres backends.
2. **The sale.** Simulated people (one asyncio task each, all in this process) arrive
   in a burst and then a tail, poll at the `nextPollMs` each answer gives, some leave,
   the beat's tick admits them, most of the admitted book. The run is cut in
   windows (the burst; only waiting people polling; admission), each measured like
   the units; then the model, fed each window's request rates and the units of
   part 1, predicts each component's load, and the report gives prediction/measured.

Why measure Redis during a window where only waiting people poll: a waiting
person's poll is answered from the process's copy of the line (docs/line.md), so
Redis should see the copies' refreshes and nothing per poll; the window counts it.
"""

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import capacity, cpu  # noqa: E402
from bench.httpload import Client, Tally, drive  # noqa: E402
from bench.stack import BASE_DIR, PYTHON, Stack, ensure_database, port_open, procfile_web  # noqa: E402

DB = "ticketing_cap"
VHOST = "cap"
BROKER_URL = f"amqp://guest:guest@127.0.0.1:5672/{VHOST}"
PORTS = range(8300, 8400)
RESULTS_DIR = BASE_DIR / "bench" / "results"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {message}", flush=True)


# --- Measuring the components --------------------------------------------------------


@dataclass
class Reading:
    """Everything counted so far, at one moment."""

    at: float
    procs: dict[int, tuple[str, int, float]]
    redis: dict
    pg: dict[str, float]
    messages: int
    tally: Tally


class Meter:
    """Reads the components: web workers, Celery, Redis, Postgres, RabbitMQ, the client."""

    def __init__(self, stack: Stack, web: subprocess.Popen, client: Client) -> None:
        from ticketing import store

        self.stack, self.web, self.client = stack, web, client
        self.redis = store.client()
        self.redis_pid = next(p.pid for n, p in stack.procs if n == "redis")
        self.queue = stack.env["BOOKING_QUEUE"]

    def read(self) -> Reading:
        """A reading (a few ms; the Postgres row through psql, ~30 ms)."""
        info = self.redis.info("all")
        stats = {
            "cpu_s": info["used_cpu_sys"] + info["used_cpu_user"],
            "cmds": sum(
                v["calls"] for k, v in info.items() if k.startswith("cmdstat_") and k != "cmdstat_info"
            ),
            # Time inside the scripts (EVALSHA's usec is the whole run): what the node's
            # main thread must spend even when I/O threads do the reading and writing.
            "usec": sum(info.get(k, {}).get("usec", 0) for k in ("cmdstat_evalsha", "cmdstat_eval")),
            "in": info["total_net_input_bytes"],
            "out": info["total_net_output_bytes"],
            "evalsha": info.get("cmdstat_evalsha", {}).get("calls", 0),
        }
        for k, v in info.items():
            if k.startswith("cmdstat_") and k != "cmdstat_info":
                stats[k] = v["calls"]
        return Reading(
            time.monotonic(), cpu._proc_times(), stats, pg_stats(), self.messages(), self.client.tally.copy()
        )

    def messages(self) -> int:
        """Messages waiting in the booking queue (nobody consumes booking.completed here)."""
        from kombu import Connection

        with contextlib.suppress(Exception), Connection(BROKER_URL, connect_timeout=2) as conn:
            return conn.default_channel.queue_declare(self.queue, passive=True).message_count
        return 0

    def web_pids(self) -> list[int]:
        return Stack.children(self.web.pid)

    def delta(self, a: Reading, b: Reading) -> dict:
        """What each component did between two readings, per second and in all."""
        seconds = b.at - a.at

        def cpu_of(pids: set[int]) -> float:
            total = 0.0
            for pid in pids:
                if pid in b.procs:
                    start = a.procs.get(pid)
                    total += b.procs[pid][2] - (start[2] if start else 0.0)
            return total

        def tree(root: int) -> set[int]:
            found, todo = set(), [root]
            while todo:
                pid = todo.pop()
                found.add(pid)
                todo += [p for p, (_, ppid, _) in b.procs.items() if ppid == pid and p not in found]
            return found

        workers = self.web_pids()
        celery = set()
        for name, proc in self.stack.procs:
            if name in ("worker", "beat"):
                celery |= tree(proc.pid)
        postgres = {p for p, (name, _, _) in b.procs.items() if name == "postgres"}
        tally = b.tally.since(a.tally)
        return {
            "seconds": seconds,
            "web_cpu_s": {str(pid): cpu_of({pid}) for pid in workers},
            "web_master_cpu_s": cpu_of({self.web.pid}),
            "celery_cpu_s": cpu_of(celery),
            "client_cpu_s": cpu_of({os.getpid()}),
            "postgres_machine_cpu_s": cpu_of(postgres),  # every database on the machine
            "redis_pid_cpu_s": cpu_of({self.redis_pid}),
            "redis": {k: b.redis[k] - a.redis.get(k, 0) for k in b.redis if b.redis[k] != a.redis.get(k, 0)}
            | {k: b.redis[k] - a.redis.get(k, 0) for k in ("cpu_s", "cmds", "in", "out", "evalsha", "usec")},
            "pg": {k: b.pg.get(k, 0) - a.pg.get(k, 0) for k in b.pg if k != "backends"},
            # The backends of this database (the app keeps its connections open).
            "pg_backends_cpu_s": cpu_of(set(a.pg.get("backends", [])) | set(b.pg.get("backends", []))),
            "messages": b.messages - a.messages,
            "requests": dict(tally.requests),
            "statuses": dict(tally.statuses),
            "http_in": dict(tally.sent),
            "http_out": dict(tally.received),
            "errors": tally.errors,
        }


def pg_stats() -> dict[str, float]:
    """This database's counters (pg_stat_database), read from another database so that
    reading them opens no session of its own here."""
    query = (
        "SELECT xact_commit, tup_inserted, tup_updated, sessions, active_time, session_time, "
        f"(SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE datname = '{DB}') "
        f"FROM pg_stat_database WHERE datname = '{DB}'"
    )
    done = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-tAc", query],
        capture_output=True,
        text=True,
    )
    values = done.stdout.strip().split("|")
    names = ("xacts", "inserted", "updated", "sessions", "active_ms", "session_ms")
    if len(values) != len(names) + 1:
        return {}
    found: dict = {n: float(v) for n, v in zip(names, values, strict=False)}
    found["backends"] = [int(pid) for pid in values[-1].split()]  # this database's sessions
    return found


def per_request(d: dict, kind: str, idle: dict | None = None) -> dict:
    """One unit-cost phase's delta, per request of `kind`, less what the same
    components do idle for as long (Redis' cron, the web processes' timers)."""
    n = d["requests"].get(kind, 0)
    if not n:
        raise SystemExit(f"no {kind} request was answered: {d}")
    share = d["seconds"] / idle["seconds"] if idle else 0.0

    def net(value: float, idle_value: float) -> float:
        return max(0.0, value - share * idle_value)

    web = sum(d["web_cpu_s"].values()) + d["web_master_cpu_s"]
    web_idle = sum(idle["web_cpu_s"].values()) + idle["web_master_cpu_s"] if idle else 0.0
    redis, redis_idle = d["redis"], (idle or {}).get("redis", {})
    return {
        "requests": n,
        "per_s": n / d["seconds"],
        "web_ms": 1e3 * net(web, web_idle) / n,
        "redis_us": 1e6 * net(redis["cpu_s"], redis_idle.get("cpu_s", 0)) / n,
        "redis_cmds": net(redis["cmds"], redis_idle.get("cmds", 0)) / n,
        "redis_calls": redis["evalsha"] / n,
        "redis_inside_us": redis.get("usec", 0) / n,
        "redis_in": net(redis["in"], redis_idle.get("in", 0)) / n,
        "redis_out": net(redis["out"], redis_idle.get("out", 0)) / n,
        "http_in": d["http_in"][kind] / n,
        "http_out": d["http_out"][kind] / n,
        "pg_ms": 1e3 * d["pg_backends_cpu_s"] / n,
        "pg_active_ms": d["pg"].get("active_ms", 0) / n,
        "pg_machine_cpu_ms": 1e3 * d["postgres_machine_cpu_s"] / n,
        "pg_xacts": d["pg"].get("xacts", 0) / n,
        "pg_sessions": d["pg"].get("sessions", 0) / n,
        "messages": d["messages"] / n,
        "client_ms": 1e3 * d["client_cpu_s"] / n,
        "statuses": d["statuses"],
        "errors": d["errors"],
    }


# --- The stack -----------------------------------------------------------------------------


def free_web_port() -> int:
    for port in PORTS:
        if not port_open("127.0.0.1", port):
            return port
    raise SystemExit("no free port in 8300-8399")


def prepare(stack: Stack, run_id: str) -> None:
    """Private Redis, this run's database (migrated), the vhost's booking queue."""
    from bench.serving import setup_django

    redis_url = stack.start_redis()
    database_url = ensure_database(DB)
    stack.app_env(
        database_url=database_url, broker_url=BROKER_URL, booking_queue=f"cap.booking.completed.{run_id}"
    )
    say(f"private Redis {redis_url}, database {database_url}, broker {BROKER_URL}")
    stack.env["RATE_LIMIT_LEAVE"] = "0"  # the simulated crowd comes from one address
    setup_django(stack)
    stack.manage("migrate", "--noinput")
    from django.conf import settings

    if not (Path(settings.STATIC_ROOT) / "staticfiles.json").exists():
        stack.manage("collectstatic", "--noinput")  # the pages' manifest (DEBUG is off)


def start_celery(stack: Stack) -> None:
    """The Procfile's worker and beat (the per-second admission tick)."""
    schedule = stack.workdir / "celerybeat-schedule"
    stack.spawn(
        "worker",
        [PYTHON, "-m", "celery", "-A", "ticketing", "worker", "--loglevel=INFO", "--concurrency=2"]
        + ["--without-gossip", "--without-mingle", "-n", f"cap-{uuid.uuid4().hex[:6]}@%h"],
        env=stack.env,
    )
    stack.spawn(
        "beat",
        [PYTHON, "-m", "celery", "-A", "ticketing", "beat", "--loglevel=INFO", f"--schedule={schedule}"],
        stack.env,
    )


# --- Part 1: unit costs ---------------------------------------------------------------------


async def measure_units(
    args: argparse.Namespace, stack: Stack, meter: Meter, client: Client, event: str
) -> dict:
    """Each kind of request alone, as fast as it is answered; the costs per request."""
    from bench.measure import admit_once

    units: dict = {}

    async def phase(
        kind: str, jobs: list, worker: callable, concurrency: int, seconds: float | None, paced: bool = False
    ) -> None:
        """Closed loop (batched: the server saturated), or paced (`paced`,
        unbatched): the same kind at a third of the rate the closed loop reached."""
        name = kind + "_paced" if paced else kind
        rate = units[kind]["per_s"] / 3 if paced else None
        a = await asyncio.to_thread(meter.read)
        await drive(jobs, worker, concurrency if not paced else 256, seconds, rate)
        b = await asyncio.to_thread(meter.read)
        units[name + "_delta"] = d = meter.delta(a, b)
        units[name] = u = per_request(d, kind, idle)
        say(
            f"  {name:<17} {u['requests']:7,} at {u['per_s']:6,.0f}/s: web {u['web_ms']:.3f} ms, Redis "
            f"{u['redis_us']:.1f} µs {u['redis_calls']:.3f} calls {u['redis_cmds']:.3f} cmds "
            f"{u['redis_in']:.0f}/{u['redis_out']:.0f} B, HTTP {u['http_in']:.0f}/{u['http_out']:.0f} B, "
            f"Postgres {u['pg_ms']:.2f} ms CPU ({u['pg_active_ms']:.2f} ms in statements)"
            + (f", errors {u['errors']}" if u["errors"] else "")
        )

    async def page(_: int) -> None:
        await client.request("page", "GET", f"/events/{event}/")

    tokens: list[str] = []

    async def join(_: int) -> None:
        status, body = await client.request("join", "POST", "/api/queue/join", {"eventId": event})
        if status == 200:
            tokens.append(body["data"]["token"])

    def poller(kind: str) -> callable:
        async def poll(token: str) -> None:
            await client.request(kind, "GET", f"/api/status/poll?token={token}&eventId={event}")

        return poll

    async def leave(token: str) -> None:
        await client.request("leave", "DELETE", f"/api/queue/leave?token={token}&eventId={event}")

    async def book(token: str) -> None:
        await client.request(
            "book", "POST", "/api/booking", {"token": token, "seatCount": 1, "eventId": event}
        )

    say("--- unit costs: one kind of request at a time")
    idle_a = await asyncio.to_thread(meter.read)
    await asyncio.sleep(5)
    idle = meter.delta(idle_a, await asyncio.to_thread(meter.read))
    s = args.unit_seconds
    await phase("page", range(10**9), page, 8, s / 2)
    await phase("page", range(10**9), page, 8, s / 2, paced=True)
    await phase("join", range(args.unit_people), join, 64, s)
    await phase("join", range(args.unit_people), join, 64, s, paced=True)
    quit_count = min(args.unit_leaves, len(tokens) // 5)
    leavers, tokens = tokens[len(tokens) - quit_count :], tokens[: len(tokens) - quit_count]
    cycle = tokens * (1 + int(4e5 // max(1, len(tokens))))
    await phase("poll_wait", cycle, poller("poll_wait"), 64, s)
    await phase("poll_wait", cycle, poller("poll_wait"), 64, s, paced=True)
    await phase("leave", leavers[: quit_count // 2], leave, 32, s)
    await phase("leave", leavers[quit_count // 2 :], leave, 32, s, paced=True)
    # Everyone left in line admitted by one tick, for the polls Redis answers and bookings.
    await asyncio.to_thread(stack.manage, "init_event", event, "--batch", "100000")
    tick = await asyncio.to_thread(admit_once, event)
    await asyncio.to_thread(stack.manage, "init_event", event, "--batch", "0")
    say(f"  admitted {tick.admitted:,} in one tick")
    book_count = min(args.unit_bookings, len(tokens) // 2)
    bookers, pollers = tokens[:book_count], tokens[book_count:]
    await phase("poll_redis", pollers * 20, poller("poll_redis"), 64, s)
    await phase("poll_redis", pollers * 20, poller("poll_redis"), 64, s, paced=True)
    await phase("book", bookers, book, 16, s)
    await phase("book", bookers[units["book"]["requests"] :], book, 16, s, paced=True)

    # The copies' refreshes: what Redis does per web process and second while only
    # waiting people poll (the poll_wait phase, less its few Redis-answered polls).
    for suffix in ("", "_paced"):
        wait, polls = units["poll_wait" + suffix + "_delta"], units["poll_wait" + suffix]["requests"]
        procs = len(wait["web_cpu_s"])
        per = polls / wait["seconds"] / procs
        units["refresh" + suffix] = {
            "cmds_per_proc_s": units["poll_wait" + suffix]["redis_cmds"] * per,
            "redis_us_per_proc_s": units["poll_wait" + suffix]["redis_us"] * per,
            "redis_out_per_proc_s": units["poll_wait" + suffix]["redis_out"] * per,
        }
    units["refresh_cmds_per_proc_s"] = units["refresh"]["cmds_per_proc_s"]
    units["refresh_redis_us_per_proc_s"] = units["refresh"]["redis_us_per_proc_s"]
    units["refresh_redis_out_per_proc_s"] = units["refresh"]["redis_out_per_proc_s"]
    units["web_processes"] = procs
    units["idle"] = idle
    say(
        f"  refreshes: {units['refresh_cmds_per_proc_s']:.1f} Redis commands, "
        f"{units['refresh_redis_us_per_proc_s']:.0f} µs of Redis CPU per web process per second; "
        f"idle: {idle['redis']['cmds'] / idle['seconds']:.1f} commands/s"
    )
    return units


# --- Part 2: the sale ---------------------------------------------------------------------


@dataclass
class Outcomes:
    joined: int = 0
    left: int = 0
    admitted: int = 0
    booked: int = 0
    sold_out: int = 0
    expired: int = 0
    failed: int = 0


class Sale:
    """The simulated crowd: one task per person, sharing one connection pool."""

    def __init__(self, args: argparse.Namespace, client: Client, event: str) -> None:
        self.args, self.client, self.event = args, client, event
        self.out = Outcomes()
        self.start = 0.0
        self.admit_at = args.burst_seconds + args.hold_seconds
        self.end = self.admit_at + args.admit_seconds
        self.rng = random.Random(args.seed)
        self.joining = args.people  # the burst's people not yet in line (or refused)

    def now(self) -> float:
        return time.monotonic() - self.start

    async def person(self, arrive: float) -> None:
        """Join, poll at nextPollMs, maybe leave, book when admitted (maybe)."""
        a = self.args
        await asyncio.sleep(max(0.0, arrive - self.now()))
        leave_at = None
        if self.rng.random() < a.leave_fraction:  # leavers go once admission has begun
            leave_at = self.rng.uniform(max(arrive, self.admit_at) + 1, self.end)
        books = self.rng.random() < a.book_fraction
        admitted = False
        try:
            try:
                status, body = await self.client.request(
                    "join", "POST", "/api/queue/join", {"eventId": self.event}
                )
            finally:
                if arrive < a.burst_seconds:
                    self.joining -= 1
            if status != 200:
                self.out.failed += 1
                return
            self.out.joined += 1
            token = body["data"]["token"]
            query = f"/api/status/poll?token={token}&eventId={self.event}"
            data = body["data"]["position"]  # the join answers its first poll
            while True:
                state = data["status"]
                kind = "poll_wait" if state == "WAITING" else "poll_redis"
                if state == "WAITING" and leave_at is not None and self.now() >= leave_at:
                    await self.client.request(
                        "leave", "DELETE", f"/api/queue/leave?token={token}&eventId={self.event}"
                    )
                    self.out.left += 1
                    return
                if state == "ACTIVE" and not admitted:
                    admitted = True
                    self.out.admitted += 1
                    if books:
                        await asyncio.sleep(self.rng.uniform(*a.think_seconds))
                        status, body = await self.client.request(
                            "book",
                            "POST",
                            "/api/booking",
                            {"token": token, "seatCount": 1, "eventId": self.event},
                        )
                        if status == 200:
                            self.out.booked += 1
                        elif body and body.get("error", {}).get("code") in ("SOLD_OUT", "INSUFFICIENT_SEATS"):
                            self.out.sold_out += 1
                        else:
                            self.out.failed += 1
                        return
                if state in ("EXPIRED", "BOOKED", "NOT_FOUND"):
                    self.out.expired += state == "EXPIRED"
                    return
                wait = data["nextPollMs"] / 1000
                if wait <= 0:
                    return
                leave_wait = (leave_at - self.now()) if leave_at is not None else wait
                await asyncio.sleep(max(0.0, min(wait, leave_wait) if state == "WAITING" else wait))
                if self.now() >= self.end:
                    return
                status, body = await self.client.request(kind, "GET", query)
                data = body["data"] if body and body.get("success") else None
                if data is None:
                    self.out.failed += 1
                    return
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self.out.failed += 1

    def arrivals(self) -> list[float]:
        """The curve: the burst front-loaded (arrivals fall off linearly to its end),
        then a steady tail once admission has begun."""
        a = self.args
        times = [a.burst_seconds * (1 - (1 - self.rng.random()) ** 0.5) for _ in range(a.people)]
        t = self.admit_at
        while a.tail_rate and t < self.end:
            t += self.rng.expovariate(a.tail_rate)
            times.append(t)
        return sorted(times)


async def run_sale(args: argparse.Namespace, stack: Stack, meter: Meter, client: Client, event: str) -> dict:
    """The curve, cut in windows; each window's loads and rates."""
    sale = Sale(args, client, event)
    windows = [
        ("burst", 0.0, args.burst_seconds),
        ("waiting only", args.burst_seconds + 3, sale.admit_at),
        ("admission", sale.admit_at + 3, sale.end),
    ]
    say(
        f"--- the sale: {args.people:,} arrive in {args.burst_seconds} s; only waiting people poll until "
        f"{sale.admit_at:.0f} s; then {args.admit_rate}/s admitted and {args.tail_rate}/s arrive "
        f"until {sale.end:.0f} s"
    )
    sale.start = time.monotonic()
    people = [asyncio.create_task(sale.person(t)) for t in sale.arrivals()]
    measured: dict = {}
    waiting_counts: list[tuple[float, int]] = []

    async def watch() -> None:
        from ticketing import store

        while True:
            live = await asyncio.to_thread(store.client().mget, *_line_keys(event))
            seq, popped, holes = (int(v or 0) for v in live)
            waiting_counts.append((sale.now(), seq - popped - holes))
            await asyncio.sleep(1)

    watcher = asyncio.create_task(watch())
    for name, begin, end in windows:
        await asyncio.sleep(max(0.0, begin - sale.now()))
        if name == "waiting only":  # a slow machine is still joining the burst: wait for it
            while sale.joining and sale.now() < end - 10:
                await asyncio.sleep(0.2)
            if sale.joining:
                say(f"  {sale.joining:,} of the burst still joining: the window has their joins")
        a = await asyncio.to_thread(meter.read)
        await asyncio.sleep(max(0.0, end - sale.now()))
        b = await asyncio.to_thread(meter.read)
        measured[name] = meter.delta(a, b)
        measured[name]["span"] = (b.at - sale.start - measured[name]["seconds"], b.at - sale.start)
        d = measured[name]
        rates = {k: v / d["seconds"] for k, v in d["requests"].items()}
        say(
            f"  {name:<13} {d['seconds']:5.1f} s: "
            + ", ".join(f"{k} {v:,.0f}/s" for k, v in sorted(rates.items()))
        )
        if name == "waiting only":
            await asyncio.to_thread(stack.manage, "init_event", event, "--batch", str(args.admit_rate))
            say(f"  admission opened: {args.admit_rate}/s")
    watcher.cancel()
    for task in people:
        task.cancel()
    await asyncio.gather(*people, return_exceptions=True)
    return {"windows": measured, "outcomes": asdict(sale.out), "waiting": waiting_counts}


def _line_keys(event: str) -> list[str]:
    from ticketing import store

    k = store.EventKeys(event)
    return [k.seq, k.popped, k.holes]


# --- The check --------------------------------------------------------------------------------


def measured_load(d: dict) -> dict[str, float]:
    """A window's loads, in the model's terms (per second)."""
    s = d["seconds"]
    return {
        "web_cores": (sum(d["web_cpu_s"].values()) + d["web_master_cpu_s"]) / s,
        "redis_cores": d["redis"]["cpu_s"] / s,
        "redis_cmds_per_s": d["redis"]["cmds"] / s,
        "redis_in_mb_s": d["redis"]["in"] / s / 1e6,
        "redis_out_mb_s": d["redis"]["out"] / s / 1e6,
        "http_in_mb_s": sum(d["http_in"].values()) / s / 1e6,
        "http_out_mb_s": sum(d["http_out"].values()) / s / 1e6,
        "pg_cores": d["pg_backends_cpu_s"] / s,
        "celery_cores": d["celery_cpu_s"] / s,
    }


def compare(d: dict, units: capacity.Units, processes: int) -> dict[str, dict[str, float]]:
    """The model's prediction from this window's request rates, next to the measure."""
    s = d["seconds"]
    rates = {k: 0.0 for k in capacity.KINDS}
    for kind, n in d["requests"].items():
        rates[kind] += n / s
    predicted = asdict(capacity.load(rates, units, processes))
    predicted["http_in_mb_s"] -= (
        sum(rates.values()) * capacity.TCP_IP_BYTES / 1e6
    )  # the client counts HTTP only
    predicted["http_out_mb_s"] -= sum(rates.values()) * capacity.TCP_IP_BYTES / 1e6
    got = measured_load(d)
    return {
        k: {"predicted": predicted[k], "measured": v, "ratio": predicted[k] / v if v else float("nan")}
        for k, v in got.items()
    }


def report(results: dict) -> str:
    """The windows, per component, and the model's ratios."""
    lines = []
    for name, d in results["sale"]["windows"].items():
        s = d["seconds"]
        polls = sum(n for k, n in d["requests"].items() if k.startswith("poll"))
        per_proc = ", ".join(f"{v / s:.2f}" for v in d["web_cpu_s"].values())
        lines += [
            f"## {name} ({s:.0f} s)",
            "requests/s: " + ", ".join(f"{k} {v / s:,.1f}" for k, v in sorted(d["requests"].items())),
            f"web CPU per process, cores: {per_proc}; Celery worker+beat {d['celery_cpu_s'] / s:.3f}; "
            f"client {d['client_cpu_s'] / s:.2f}",
            f"Redis: {d['redis']['cpu_s'] / s:.3f} cores, {d['redis']['cmds'] / s:,.1f} commands/s "
            f"({1000 * d['redis']['cmds'] / polls if polls else 0:.2f} per 1,000 polls), "
            f"{d['redis']['in'] / s / 1e3:,.1f} kB/s in, {d['redis']['out'] / s / 1e3:,.1f} kB/s out",
            f"Postgres (this database): {d['pg'].get('xacts', 0) / s:.1f} commits/s, "
            f"{d['pg'].get('active_ms', 0) / s:.1f} ms in statements/s, "
            f"backends' CPU {d['pg_backends_cpu_s'] / s:.3f} cores; "
            f"RabbitMQ: {d['messages'] / s:.1f} booking messages/s",
            f"HTTP: {sum(d['http_in'].values()) / s / 1e3:,.1f} kB/s in, "
            f"{sum(d['http_out'].values()) / s / 1e3:,.1f} kB/s out",
            "",
            "| load, per second | model | measured | model / measured | with batched units "
            "| with unbatched units |",
            "|---|---|---|---|---|---|",
        ]
        batched, unbatched = results["check"][name], results["check_paced"][name]
        for k, v in results["check_median"][name].items():
            lines.append(
                f"| {k} | {v['predicted']:.4g} | {v['measured']:.4g} | **{v['ratio']:.2f}** "
                f"| {batched[k]['ratio']:.2f} | {unbatched[k]['ratio']:.2f} |"
            )
        lines.append("")
    lines.append(f"outcomes: {results['sale']['outcomes']}")
    if "waiting_polls_table_vs_measured" in results:
        t = results["waiting_polls_table_vs_measured"]
        lines.append(
            f"waiting only: {t['waiting']:,.0f} waiting; the nextPollMs table says "
            f"{t['table_polls_per_s']:,.0f} polls/s, the crowd sent {t['measured_polls_per_s']:,.0f}/s "
            f"({t['table_polls_per_s'] / t['measured_polls_per_s']:.2f})"
        )
    lines.append(
        f"Redis, per 1,000 polls of waiting people (the 'waiting only' window, "
        f"requests {results['waiting_only_requests']}): {results['commands_per_1000_waiting_polls']:.2f} "
        f"commands (a script's own commands counted, the ticks' included), "
        f"{results['calls_per_1000_waiting_polls']:.2f} script calls; less the background (tick, samples): "
        f"{results['commands_per_1000_waiting_polls_less_background']:.2f} commands; "
        f"commands: {results['waiting_only_commands']}"
    )
    return "\n".join(lines)


def check(results: dict) -> None:
    """The model's predictions for each window of the sale, from this run's units."""
    processes = results["units"]["web_processes"]
    batched = capacity.units_for_model(results["units"], "", results["background"])
    unbatched = capacity.units_for_model(results["units"], "_paced", results["background"])
    # The model's median column (bench/capacity.py COLUMNS), from this run's units.
    median = capacity.mix([batched, unbatched], unbatched)
    for regime, model_units in (("", batched), ("_paced", unbatched), ("_median", median)):
        results["model_units" + regime] = asdict(model_units)
        results["check" + regime] = {
            name: compare(d, model_units, processes) for name, d in results["sale"]["windows"].items()
        }
    wait = results["sale"]["windows"]["waiting only"]
    polls = sum(n for k, n in wait["requests"].items() if k.startswith("poll"))
    results["commands_per_1000_waiting_polls"] = 1000 * wait["redis"]["cmds"] / max(1, polls)
    results["calls_per_1000_waiting_polls"] = 1000 * wait["redis"]["evalsha"] / max(1, polls)
    results["waiting_only_commands"] = {
        k.removeprefix("cmdstat_"): v for k, v in wait["redis"].items() if k.startswith("cmdstat_")
    }
    results["waiting_only_requests"] = wait["requests"]
    # The crowd's side of the model: the polls the nextPollMs table gives the line
    # that was waiting, against the polls the simulated people sent.
    args = results["args"] if "args" in results else {"burst_seconds": 25, "hold_seconds": 30}
    begin, end = wait.get("span", (args["burst_seconds"] + 3, args["burst_seconds"] + args["hold_seconds"]))
    line = [n for t, n in results["sale"]["waiting"] if begin <= t <= end]
    if line:
        table = capacity.polls_for_line(int(sum(line) / len(line)))
        results["waiting_polls_table_vs_measured"] = {
            "waiting": sum(line) / len(line),
            "table_polls_per_s": table,
            "measured_polls_per_s": polls / wait["seconds"],
        }
    # Less what Redis runs whatever the crowd (Celery's tick, the live numbers' samples,
    # measured in the background window): what the polls of waiting people cost it.
    bg = results["background"]
    extra = wait["redis"]["cmds"] - bg["redis"]["cmds"] / bg["seconds"] * wait["seconds"]
    results["commands_per_1000_waiting_polls_less_background"] = 1000 * extra / max(1, polls)


# --- Entry point ------------------------------------------------------------------------------


async def main_async(
    args: argparse.Namespace, stack: Stack, web: subprocess.Popen, port: int, events: list[str]
) -> dict:
    client = Client("127.0.0.1", port, size=args.connections)
    meter = Meter(stack, web, client)
    results: dict = {}
    units_event = events[0]
    results["units"] = await measure_units(args, stack, meter, client, units_event)
    # Closed: its ticks would otherwise add to the sale's Redis commands.
    await asyncio.to_thread(stack.manage, "event_status", units_event, "CLOSED")
    if args.units_only:
        await client.close()
        return results
    start_celery(stack)
    await asyncio.sleep(5)  # the worker connects, beat sends its first ticks
    say("--- background: Celery's ticks, no requests (6 s)")
    a = await asyncio.to_thread(meter.read)
    await asyncio.sleep(6)
    results["background"] = meter.delta(a, await asyncio.to_thread(meter.read))
    if web.poll() is not None:
        raise SystemExit(f"the web server stopped (exit {web.returncode}); see {stack.log('web')}")
    sale_event = events[1]
    results["sale"] = await run_sale(args, stack, meter, client, sale_event)
    check(results)
    await client.close()
    return results


def main() -> int:
    """Parse the knobs, run against private services, write JSON and the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--units-only", action="store_true", help="measure the unit costs, skip the sale")
    p.add_argument("--unit-seconds", type=float, default=8, help="seconds per unit-cost phase")
    p.add_argument("--unit-people", type=int, default=30_000, help="joins of the unit-cost phase (at most)")
    p.add_argument("--unit-leaves", type=int, default=2_000)
    p.add_argument("--unit-bookings", type=int, default=3_000)
    p.add_argument("--people", type=int, default=20_000, help="arrivals in the burst")
    p.add_argument("--burst-seconds", type=float, default=20)
    p.add_argument("--hold-seconds", type=float, default=30, help="after the burst, only waiting people poll")
    p.add_argument("--admit-rate", type=int, default=40, help="admitted per second (the beat's tick)")
    p.add_argument("--admit-seconds", type=float, default=90, help="how long admission runs")
    p.add_argument("--tail-rate", type=float, default=10, help="arrivals/s once admission runs")
    p.add_argument("--leave-fraction", type=float, default=0.1)
    p.add_argument("--book-fraction", type=float, default=0.8)
    p.add_argument("--think-seconds", type=float, nargs=2, default=(1.0, 5.0), help="admitted: time to book")
    p.add_argument("--seats", type=int, default=100_000)
    p.add_argument("--ttl", type=int, default=60, help="the active window, s")
    p.add_argument("--connections", type=int, default=128, help="the client's keep-alive connections")
    p.add_argument(
        "--web-concurrency",
        type=int,
        default=1,
        help="web processes (WEB_CONCURRENCY): 1, so that one process serves as many polls as in production",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep logs")
    p.add_argument("--recheck", type=Path, help="no run: the check and report again from a run's JSON")
    args = p.parse_args()
    os.chdir(BASE_DIR)
    if args.recheck:
        results = json.loads(args.recheck.read_text())
        check(results)
        print(report(results))
        return 0

    run_id = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="ticketing-sale-"))
    stack = Stack(workdir)
    events = [f"cap-units-{run_id}", f"cap-sale-{run_id}"]
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        prepare(stack, run_id)
        for event in events:
            stack.manage(
                "init_event", event, "--seats", str(args.seats), "--batch", "0", "--ttl", str(args.ttl)
            )
        port = free_web_port()
        env = {**stack.env, "HOST": "127.0.0.1", "PORT": str(port)}
        if args.web_concurrency:
            env["WEB_CONCURRENCY"] = str(args.web_concurrency)
        web = stack.start_gunicorn("web", procfile_web(BASE_DIR), env, f"http://127.0.0.1:{port}/health")
        say(f"web on :{port}, {len(Stack.children(web.pid))} processes")
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        results = asyncio.run(main_async(args, stack, web, port, events))
        results["args"] = {k: v for k, v in vars(args).items()}
        results["machine"] = machine()
        results["started_utc"] = stamp
    finally:
        stack.forget(events, BROKER_URL)
        stack.close()
        if args.keep:
            say(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"sale-{stamp}{'-units' if args.units_only else ''}.json"
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if "sale" in results:
        print()
        print(report(results))
        print()
        print("The issue's sale with this run's unit costs (docs/scaling.md quotes the medians):")
        print(
            capacity.table(
                capacity.Crowd(),
                columns={
                    "batched": capacity.units_for_model(results["units"], "", results["background"]),
                    "unbatched": capacity.units_for_model(results["units"], "_paced", results["background"]),
                },
            )
        )
    print(f"\n{out.relative_to(BASE_DIR)}")
    return 0


def machine() -> dict:
    """The CPU model and count, and the load around the run."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "",
    )
    return {"cpu": model, "cores": os.cpu_count(), "loadavg": Path("/proc/loadavg").read_text().split()[:3]}


if __name__ == "__main__":
    sys.exit(main())
