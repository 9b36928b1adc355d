"""The capacity model: from a sale's crowd to web processes, Redis nodes and network.

    .venv/bin/python bench/capacity.py                       # 2,000,000 waiting, 300,000 polls/s
    .venv/bin/python bench/capacity.py --page-loads-per-arrival 0   # the page from a cache
    .venv/bin/python bench/capacity.py --waiting 500000 --polls 0   # polls from the nextPollMs table
    .venv/bin/python bench/capacity.py --units bench/results/sale-<time>.json   # a run's own unit costs

Every load is a rate times a unit cost measured on the real stack (bench/sale.py
measures them, and checks this model against a scaled-down sale). Why a model and
not a bigger benchmark: 300,000 polls/s is ~90 cores of web processes; what can
be measured on one machine is what one request of each kind costs each component,
and whether the loads add up the way the model says (docs/scaling.md).

The two facts that shape the answer:

* a waiting person's poll is answered from the web process's copy of the line
  (docs/line.md), so polls cost web CPU and network but almost no Redis: Redis sees
  each process's refresh of each event's copy, 5 a second, whatever the poll rate;
* every key of one event shares one hash slot, so one event's joins, polls at the
  head, leaves and bookings all land on one Redis node. A cluster spreads events over
  nodes, never one event. A join costs that node only its share of its process's
  block of arrival numbers (docs/line.md), and answers its own first poll, so the
  node seats arrivals as fast as the web tier brings them.
"""

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# --- Unit costs ---------------------------------------------------------------------
#
# Per request of each kind, measured by `bench/sale.py` (part 1) against the real
# stack (gunicorn + uvicorn, the private Redis, Postgres, RabbitMQ) on the 2-core
# AMD EPYC VM of docs/scaling.md: BATCHED and UNBATCHED below, and COLUMNS, the
# range the answer is given over (the machine is shared and noisy: docs/scaling.md).

KINDS = ("page", "join", "poll_wait", "poll_redis", "leave", "book")


@dataclass(frozen=True)
class Unit:
    """One request's cost. web_ms: CPU of the web process; redis_us: CPU of Redis;
    redis_cmds: commands Redis ran; redis_in/out: bytes Redis read/wrote; http_in/out:
    bytes of the request/answer on the wire (request line, headers, body); pg_ms:
    Postgres time executing statements (pg_stat_database.active_time)."""

    web_ms: float
    redis_us: float
    redis_cmds: float
    redis_in: float
    redis_out: float
    http_in: float
    http_out: float
    pg_ms: float = 0.0
    redis_inside_us: float = 0.0  # of redis_us, the time inside the scripts (INFO commandstats)


@dataclass(frozen=True)
class Units:
    """The unit costs of every kind of request, and the fixed costs."""

    page: Unit  # GET /events/<id>/ (the waiting room's HTML, Django's lane)
    join: Unit  # POST /api/queue/join
    poll_wait: Unit  # a waiting person's poll, answered from the process's copy
    poll_redis: Unit  # a poll Redis answers (at the head: active, booked; or just joined)
    leave: Unit  # DELETE /api/queue/leave
    book: Unit  # POST /api/booking
    # Redis, per web process per second, while its copies are refreshed (one event):
    # 5 refreshes a second and the metrics each process writes once a second.
    refresh_cmds_per_proc_s: float
    refresh_redis_us_per_proc_s: float
    refresh_redis_out_per_proc_s: float
    # The Celery worker and beat: one admission tick a second, whatever the crowd.
    celery_cores: float
    # Redis with no requests: Celery's ticks (whatever the crowd) and its own cron.
    background_redis_us_per_s: float = 0.0
    background_redis_cmds_per_s: float = 0.0
    background_redis_in_per_s: float = 0.0
    background_redis_out_per_s: float = 0.0


# Medians of the runs of docs/scaling.md ("Unit costs measured"), printed by
# `bench/capacity.py --emit bench/results/sale-*.json`. BATCHED: each kind driven
# as fast as the server answers (its event loop and Redis take many requests per
# turn); UNBATCHED: the same at a third of that rate, as a crowd spread out sends them.
BATCHED = Units(
    page=Unit(
        web_ms=7.2863,
        redis_us=0.0,
        redis_cmds=0.0381,
        redis_in=3.4226,
        redis_out=2.7589,
        http_in=307.0,
        http_out=16517.0,
        pg_ms=0.2574,
        redis_inside_us=0.0,
    ),
    join=Unit(
        web_ms=0.2294,
        redis_us=1.45,
        redis_cmds=0.0536,
        redis_in=5.6888,
        redis_out=0.4709,
        http_in=380.0,
        http_out=693.0296,
        pg_ms=0.0,
        redis_inside_us=0.8266,
    ),
    poll_wait=Unit(
        web_ms=0.1681,
        redis_us=0.0,
        redis_cmds=0.0,
        redis_in=0.0,
        redis_out=0.0,
        http_in=366.0,
        http_out=547.0089,
        pg_ms=0.0,
        redis_inside_us=0.0,
    ),
    poll_redis=Unit(
        web_ms=0.2343,
        redis_us=59.6316,
        redis_cmds=14.0134,
        redis_in=869.7192,
        redis_out=99.6501,
        http_in=366.0,
        http_out=549.0,
        pg_ms=0.0,
        redis_inside_us=55.3248,
    ),
    leave=Unit(
        web_ms=0.2787,
        redis_us=42.2687,
        redis_cmds=9.0737,
        redis_in=797.572,
        redis_out=15.4472,
        http_in=369.0,
        http_out=181.0,
        pg_ms=0.0,
        redis_inside_us=30.106,
    ),
    book=Unit(
        web_ms=8.3808,
        redis_us=528.2159,
        redis_cmds=32.0704,
        redis_in=1784.6682,
        redis_out=110.715,
        http_in=438.0,
        http_out=480.0,
        pg_ms=0.9856,
        redis_inside_us=331.8206,
    ),
    refresh_cmds_per_proc_s=39.3314,
    refresh_redis_us_per_proc_s=629.6537,
    refresh_redis_out_per_proc_s=226.3178,
    celery_cores=0.0132,
    background_redis_us_per_s=1702.2719,
    background_redis_cmds_per_s=0.0,
    background_redis_in_per_s=3.7876,
    background_redis_out_per_s=1840.2717,
)
UNBATCHED = Units(
    page=Unit(
        web_ms=7.6821,
        redis_us=0.0,
        redis_cmds=0.0896,
        redis_in=8.0998,
        redis_out=8.9301,
        http_in=307.0,
        http_out=16517.0,
        pg_ms=0.4255,
        redis_inside_us=0.0,
    ),
    join=Unit(
        web_ms=0.33,
        redis_us=3.6177,
        redis_cmds=0.1591,
        redis_in=11.0132,
        redis_out=1.3498,
        http_in=380.0,
        http_out=694.1302,
        pg_ms=0.0,
        redis_inside_us=2.3474,
    ),
    poll_wait=Unit(
        web_ms=0.2382,
        redis_us=0.0,
        redis_cmds=0.0,
        redis_in=0.0,
        redis_out=0.0,
        http_in=366.0,
        http_out=546.5462,
        pg_ms=0.0,
        redis_inside_us=0.0,
    ),
    poll_redis=Unit(
        web_ms=0.4743,
        redis_us=106.796,
        redis_cmds=14.0284,
        redis_in=841.5892,
        redis_out=99.4096,
        http_in=366.0,
        http_out=549.0,
        pg_ms=0.0,
        redis_inside_us=72.385,
    ),
    leave=Unit(
        web_ms=0.4559,
        redis_us=74.3096,
        redis_cmds=9.0052,
        redis_in=463.443,
        redis_out=11.2852,
        http_in=369.0,
        http_out=181.0,
        pg_ms=0.0,
        redis_inside_us=42.952,
    ),
    book=Unit(
        web_ms=8.0869,
        redis_us=583.9738,
        redis_cmds=32.0779,
        redis_in=1636.0611,
        redis_out=110.4158,
        http_in=438.0,
        http_out=480.0,
        pg_ms=1.0855,
        redis_inside_us=326.75,
    ),
    refresh_cmds_per_proc_s=37.3618,
    refresh_redis_us_per_proc_s=706.5779,
    refresh_redis_out_per_proc_s=215.6638,
    celery_cores=0.0132,
    background_redis_us_per_s=1702.2719,
    background_redis_cmds_per_s=0.0,
    background_redis_in_per_s=3.7876,
    background_redis_out_per_s=1840.2717,
)


def mix(web: list[Units], redis: Units, redis_factor: float = 1.0) -> Units:
    """The web tier's and Postgres' costs averaged over `web`, Redis' of `redis`
    (times `redis_factor`); bytes and commands are the same in every regime."""

    def one(kind: str) -> Unit:
        r = getattr(redis, kind)
        ws = [getattr(w, kind) for w in web]
        return replace(
            r,
            web_ms=sum(w.web_ms for w in ws) / len(ws),
            pg_ms=sum(w.pg_ms for w in ws) / len(ws),
            redis_us=r.redis_us * redis_factor,
        )

    return replace(
        redis,
        **{k: one(k) for k in KINDS},
        refresh_redis_us_per_proc_s=redis.refresh_redis_us_per_proc_s * redis_factor,
        background_redis_us_per_s=redis.background_redis_us_per_s * redis_factor,
    )


# The range (docs/scaling.md, "Which unit costs"). A web process pays less per
# request the busier it is (more requests per turn of its loop): in the sale's
# check, at half a core, it paid between the batched and the unbatched cost. The
# hot event's node gets each process's few commands unbatched, and at a trickle
# more still (the sale's admission window: ~1.5 x the unbatched cost).
COLUMNS = {
    "low": BATCHED,
    "median": mix([BATCHED, UNBATCHED], UNBATCHED),
    "high": mix([UNBATCHED], UNBATCHED, 1.5),
}
MEDIAN = COLUMNS["median"]


def units_for_model(units: dict, regime: str = "_paced", background: dict | None = None) -> Units:
    """The measured units in the model's form (`regime`: "" the closed loop's, "_paced"
    the open loop's). A waiting person's poll carries only what is per poll: its
    Redis side is the refreshes, the model's fixed cost per process. `background` is
    the run's window with Celery and no requests: the tick, Redis' own cron."""
    names = [f for f in Unit.__dataclass_fields__]
    kinds = {k: Unit(**{n: units[k + regime].get(n, 0.0) for n in names}) for k in KINDS}
    wait = kinds["poll_wait"]
    kinds["poll_wait"] = Unit(wait.web_ms, 0.0, 0.0, 0.0, 0.0, wait.http_in, wait.http_out)
    refresh = units["refresh" + regime]
    fixed = {"celery_cores": 0.0}  # a --units-only run: no background window
    if background:
        s = background["seconds"]
        r = background["redis"]
        fixed = {
            "celery_cores": background["celery_cpu_s"] / s,
            "background_redis_us_per_s": 1e6 * r["cpu_s"] / s,
            "background_redis_cmds_per_s": r["cmds"] / s,
            "background_redis_in_per_s": r["in"] / s,
            "background_redis_out_per_s": r["out"] / s,
        }
    return Units(
        **kinds,
        refresh_cmds_per_proc_s=refresh["cmds_per_proc_s"],
        refresh_redis_us_per_proc_s=refresh["redis_us_per_proc_s"],
        refresh_redis_out_per_proc_s=refresh["redis_out_per_proc_s"],
        **fixed,
    )


def median_units(paths: list[Path], regime: str) -> Units:
    """The median of each unit cost over `bench/sale.py` runs (their JSON)."""
    from statistics import median

    runs = [json.loads(path.read_text()) for path in paths]
    # (Runs from before the refreshes were measured on their own cannot say it.)
    runs = [run for run in runs if "refresh" + regime in run["units"]]
    found = [asdict(units_for_model(r["units"], regime, r.get("background"))) for r in runs]

    def middle(values: list[float]) -> float:  # (runs older than a field have 0 for it)
        return round(median([v for v in values if v] or [0.0]), 4)

    out: dict = {}
    for key, value in found[0].items():
        if isinstance(value, dict):
            out[key] = Unit(**{n: middle([f[key].get(n, 0.0) for f in found]) for n in value})
        elif key.startswith(("background_", "celery_")):  # only runs with a background window
            out[key] = round(
                median(f[key] for f, r in zip(found, runs, strict=True) if r.get("background")), 4
            )
        else:
            out[key] = round(median(f[key] for f in found), 4)
    return Units(**out)


def units_from_json(path: Path) -> Units:
    """The unit costs a `bench/sale.py` run measured (its JSON's "units")."""
    data = json.loads(path.read_text())
    if "model_units_paced" in data:
        found = data["model_units_paced"]
        return Units(**{k: Unit(**found[k]) if k in KINDS else v for k, v in found.items()})
    return units_for_model(data["units"], "_paced")  # a --units-only run: no background window


# --- The crowd -------------------------------------------------------------------------


def poll_interval_s(rank: int) -> float:
    """The seed's nextPollMs table (DESIGN), in seconds; the ±20 % jitter averages out."""
    if rank > 100_000:
        return 10.0
    if rank > 10_000:
        return 5.0
    if rank > 1_000:
        return 3.0
    if rank > 100:
        return 2.0
    return 1.0


def polls_for_line(waiting: int) -> float:
    """Polls/s of a line of `waiting` people, each polling at the table's interval."""
    total, low = 0.0, 0
    for top, interval in ((100, 1), (1_000, 2), (10_000, 3), (100_000, 5), (math.inf, 10)):
        people = max(0, min(waiting, top) - low)
        total += people / interval
        low = top if top != math.inf else low
    return total


@dataclass(frozen=True)
class Crowd:
    """A sale at its busiest second. Arrivals, their first polls and the polls of the
    line are taken to peak together, which overstates the web tier a little."""

    waiting: int = 2_000_000
    polls_per_s: float = 300_000  # all polls; 0: from the nextPollMs table for `waiting`
    arrivals_per_s: float = 100_000  # joins at the opening (DESIGN: ~100,000/s)
    page_loads_per_arrival: float = 1.0  # the waiting room's HTML from the web tier (0: a CDN)
    leaves_per_s: float = 1_000
    admit_per_s: float = 70  # the admission rate (RDB TPS × 0.7)
    book_fraction: float = 0.8  # of the admitted, who book
    think_s: float = 30  # an admitted person's time to book
    active_window_s: float = 180
    polls_active_s: float = 2.0  # ACTIVE people's nextPollMs
    events: int = 1  # hot events at once (each its own node's load)

    def rates(self) -> dict[str, float]:
        """Requests/s of each kind."""
        polls = self.polls_per_s or polls_for_line(self.waiting)
        # Admitted people poll every 2 s until they book (or their window ends).
        in_window = self.book_fraction * self.think_s + (1 - self.book_fraction) * self.active_window_s
        head = self.admit_per_s * in_window / self.polls_active_s
        # A join's answer is its place's first poll (from the process's copy of the
        # line): the arrivals' first polls are in the joins, not in the polls.
        first = self.arrivals_per_s
        return {
            "page": self.arrivals_per_s * self.page_loads_per_arrival,
            "join": self.arrivals_per_s,
            "poll_wait": max(0.0, polls - head - first),
            "poll_redis": head,
            "leave": self.leaves_per_s,
            "book": self.admit_per_s * self.book_fraction,
        }


# --- The loads --------------------------------------------------------------------------

TCP_IP_BYTES = 2 * 66  # per request each way: the segment carrying it and an ACK (an estimate)


@dataclass(frozen=True)
class Load:
    """What the rates cost each component, per second."""

    web_cores: float
    redis_cores: float  # the hot event's node
    redis_cmds_per_s: float
    redis_in_mb_s: float
    redis_out_mb_s: float
    http_in_mb_s: float  # into the web tier (requests), HTTP bytes + TCP/IP
    http_out_mb_s: float  # out of the web tier (answers)
    pg_cores: float
    celery_cores: float
    requests_per_s: float


def load(rates: dict[str, float], units: Units, web_processes: int, events: int = 1) -> Load:
    """The load of `rates` (requests/s by kind) with `web_processes` processes, each
    keeping a copy of each of `events` hot events (refreshed 5 times a second)."""
    u = {k: getattr(units, k) for k in KINDS}
    refreshes = web_processes * events
    http_in = sum(r * (u[k].http_in + TCP_IP_BYTES) for k, r in rates.items())
    http_out = sum(r * (u[k].http_out + TCP_IP_BYTES) for k, r in rates.items())
    per_s = {
        name: sum(r * getattr(u[k], name) for k, r in rates.items())
        for name in ("web_ms", "redis_us", "redis_cmds", "redis_in", "redis_out", "pg_ms")
    }
    return Load(
        web_cores=per_s["web_ms"] / 1e3,
        redis_cores=(
            per_s["redis_us"]
            + refreshes * units.refresh_redis_us_per_proc_s
            + units.background_redis_us_per_s
        )
        / 1e6,
        redis_cmds_per_s=per_s["redis_cmds"]
        + refreshes * units.refresh_cmds_per_proc_s
        + units.background_redis_cmds_per_s,
        redis_in_mb_s=(per_s["redis_in"] + units.background_redis_in_per_s) / 1e6,
        redis_out_mb_s=(
            per_s["redis_out"]
            + refreshes * units.refresh_redis_out_per_proc_s
            + units.background_redis_out_per_s
        )
        / 1e6,
        http_in_mb_s=http_in / 1e6,
        http_out_mb_s=http_out / 1e6,
        pg_cores=per_s["pg_ms"] / 1e3,
        celery_cores=units.celery_cores * events,
        requests_per_s=sum(rates.values()),
    )


@dataclass(frozen=True)
class Plan:
    """The answer: processes, nodes, network, and how busy each is."""

    web_processes: int
    web_cores: float
    redis_event_node_busy: float  # cores: the hot event's node (Redis runs commands on one)
    redis_nodes: int
    joins_per_s_event_node: float  # arrivals one event's node seats at the target, doing nothing else
    refresh_cores: float  # of the node's load: the web processes' refreshes of their copies
    seconds_to_seat_everyone: float  # `waiting` arrivals at min(arrivals, that) per second
    joins_per_s_inside_only: float  # the same if I/O threads took all but the scripts' time
    refresh_and_tick_cmds_per_s: float  # what the event's node runs for the waiting, however many
    load: Load


def plan(crowd: Crowd, units: Units, target: float = 0.65) -> Plan:
    """Web processes (one core each: a uvicorn worker is one event loop) so that each
    is `target` busy; the hot event's Redis node (a slot is never split, so its load
    is one core's, whatever the cluster) and the arrivals it seats at `target`; Redis
    nodes: one per hot event plus one for the rest (rate limits, metrics, sessions),
    each with a replica."""
    rates = crowd.rates()
    # The processes' refreshes cost Redis, not the web: the web count comes first.
    procs = max(1, math.ceil(load(rates, units, 1, crowd.events).web_cores / target))
    found = load(rates, units, procs, crowd.events)
    node = load(replace(crowd, events=1).rates(), units, procs, 1).redis_cores
    # A join's Redis cost: its share of its process's block of numbers (lua/block.lua),
    # its first poll answered with it from the process's copy of the line.
    per_join = units.join.redis_us / 1e6
    seats = target / per_join if per_join else math.inf  # the node doing nothing else
    inside = units.join.redis_inside_us / 1e6
    return Plan(
        joins_per_s_inside_only=target / inside if inside else math.nan,
        refresh_cores=procs * units.refresh_redis_us_per_proc_s / 1e6,
        refresh_and_tick_cmds_per_s=procs * units.refresh_cmds_per_proc_s + units.background_redis_cmds_per_s,
        web_processes=procs,
        web_cores=found.web_cores,
        redis_event_node_busy=node,
        redis_nodes=(crowd.events + 1) * 2,
        joins_per_s_event_node=seats,
        seconds_to_seat_everyone=crowd.waiting / min(seats, crowd.arrivals_per_s) if seats else math.inf,
        load=found,
    )


def table(crowd: Crowd, target: float = 0.65, columns: dict[str, Units] | None = None) -> str:
    """The answer in three columns: cheap, median and dear unit costs."""
    plans = [(name, plan(crowd, u, target)) for name, u in (columns or COLUMNS).items()]
    rates = crowd.rates()
    polls = sum(v for k, v in rates.items() if k.startswith("poll"))
    lines = [
        f"crowd: {crowd.waiting:,} waiting, {polls:,.0f} polls/s, {crowd.arrivals_per_s:,.0f} arrivals/s "
        f"({crowd.page_loads_per_arrival:g} page load each), {crowd.leaves_per_s:,.0f} leaves/s, "
        f"{crowd.admit_per_s:g} admitted/s, {rates['book']:,.0f} bookings/s; target {target:.0%} busy",
        "requests/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()),
        "",
        f"| | {' | '.join(name for name, _ in plans)} |",
        f"|---|{'---|' * len(plans)}",
    ]

    def row(label: str, fmt: str, get: callable) -> None:
        lines.append(f"| {label} | {' | '.join(format(get(p), fmt) for _, p in plans)} |")

    row("web processes (one core each)", ",d", lambda p: p.web_processes)
    row("web CPU, cores", ",.0f", lambda p: p.web_cores)
    row("the hot event's Redis node, cores (1 is all it has)", ".2f", lambda p: p.redis_event_node_busy)
    row("Redis commands/s on it (a script's own counted)", ",.0f", lambda p: p.load.redis_cmds_per_s)
    row("  of which the copies' refreshes, cores", ".2f", lambda p: p.refresh_cores)
    row(
        f"joins/s it seats at {target:.0%} of its core, doing nothing else",
        ",.0f",
        lambda p: p.joins_per_s_event_node,
    )
    row("seconds until everyone has joined", ",.0f", lambda p: p.seconds_to_seat_everyone)
    row("joins/s if I/O threads left it only the scripts' time", ",.0f", lambda p: p.joins_per_s_inside_only)
    row(
        "its commands per 1,000 polls of waiting people (refreshes, ticks)",
        ".1f",
        lambda p: 1000 * p.refresh_and_tick_cmds_per_s / max(1.0, rates["poll_wait"]),
    )
    row("Redis nodes (the event's + the rest, each with a replica)", "d", lambda p: p.redis_nodes)
    row(
        "Redis network in / out, MB/s",
        "",
        lambda p: f"{p.load.redis_in_mb_s:.0f} / {p.load.redis_out_mb_s:.0f}",
    )
    row(
        "web network in / out, MB/s",
        "",
        lambda p: f"{p.load.http_in_mb_s:,.0f} / {p.load.http_out_mb_s:,.0f}",
    )
    row("web network, in + out, Gbit/s", ".1f", lambda p: (p.load.http_in_mb_s + p.load.http_out_mb_s) * 8e-3)
    row("Postgres CPU, cores", ".1f", lambda p: p.load.pg_cores)
    row("Celery worker + beat, cores", ".2f", lambda p: p.load.celery_cores)
    return "\n".join(lines)


def main() -> int:
    """The table for a crowd given on the command line (defaults: the issue's sale)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Crowd()
    for f in fields(Crowd):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(defaults, f.name)))
    parser.add_argument("--polls", type=float, help="polls/s (0: from the nextPollMs table)")
    parser.add_argument("--target", type=float, default=0.65, help="how busy a web process may be")
    parser.add_argument("--units", type=Path, help="a bench/sale.py JSON: its measured unit costs")
    parser.add_argument("--json", action="store_true", help="the plans as JSON")
    parser.add_argument("--emit", type=Path, nargs="+", help="print the median units of these runs' JSON")
    args = parser.parse_args()
    if args.emit:
        for regime, name in (("", "BATCHED"), ("_paced", "UNBATCHED")):
            print(f"{name} = {median_units(args.emit, regime)!r}")
        return 0
    given = {f.name: getattr(args, f.name) for f in fields(Crowd) if getattr(args, f.name) is not None}
    if args.polls is not None:
        given["polls_per_s"] = args.polls
    crowd = Crowd(**given)
    columns = {"measured": units_from_json(args.units)} if args.units else COLUMNS
    if args.json:
        print(json.dumps({k: asdict(plan(crowd, u, args.target)) for k, u in columns.items()}, indent=2))
    else:
        print(table(crowd, args.target, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
