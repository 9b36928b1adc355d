"""The capacity model: from a sale's crowd to web processes, Redis nodes and network.

    .venv/bin/python bench/capacity.py                       # 2,000,000 waiting, 300,000 polls/s
    .venv/bin/python bench/capacity.py --waiting 500000 --polls 0   # polls from the nextPollMs table
    .venv/bin/python bench/capacity.py --units bench/results/sale-<time>.json   # a run's own unit costs

Every load is a rate times a unit cost measured on the real stack (bench/sale.py
measures them, and checks this model against a scaled-down sale). Why a model and
not a bigger benchmark: 300,000 polls/s is ~30 machines of web processes; what can
be measured on one machine is what one request of each kind costs each component,
and whether the loads add up the way the model says (docs/scaling.md).

The two facts that shape the answer:

* a waiting person's poll is answered from the web process's copy of the line
  (docs/line.md), so polls cost web CPU and network but almost no Redis: Redis sees
  each process's refresh of each event's copy, 5 a second, whatever the poll rate;
* every key of one event shares one hash slot, so one event's joins, first polls,
  polls at the head, leaves and bookings all land on one Redis node. A cluster
  spreads events over nodes, never one event: the event's node is the limit.
"""

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

# --- Unit costs ---------------------------------------------------------------------
#
# Per request of each kind, measured by `bench/sale.py --units-only` against the real
# stack (gunicorn + uvicorn, the private Redis, Postgres, RabbitMQ) on the 2-core
# AMD EPYC VM of docs/scaling.md. MEDIAN is the median of the runs quoted there; LOW
# and HIGH their spread (the machine is shared and noisy: see docs/scaling.md).

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


# Filled in from the runs of docs/scaling.md ("Unit costs measured").
MEDIAN = Units(
    page=Unit(2.9, 16, 1.0, 120, 60, 290, 5400),
    join=Unit(0.095, 22, 1.0, 500, 110, 380, 300),
    poll_wait=Unit(0.078, 0.2, 0.003, 0.5, 1.0, 390, 330),
    poll_redis=Unit(0.095, 10, 1.0, 300, 200, 390, 330),
    leave=Unit(0.09, 12, 1.0, 300, 30, 400, 240),
    book=Unit(3.0, 35, 3.0, 600, 200, 480, 290, pg_ms=0.5),
    refresh_cmds_per_proc_s=6.0,
    refresh_redis_us_per_proc_s=100.0,
    refresh_redis_out_per_proc_s=800.0,
    celery_cores=0.02,
)


def scaled(units: Units, factor: float) -> Units:
    """Every CPU cost times `factor` (bytes and commands unchanged): the range."""

    def cpu(u: Unit) -> Unit:
        return replace(u, web_ms=u.web_ms * factor, redis_us=u.redis_us * factor, pg_ms=u.pg_ms * factor)

    return replace(
        units,
        **{k: cpu(getattr(units, k)) for k in KINDS},
        refresh_redis_us_per_proc_s=units.refresh_redis_us_per_proc_s * factor,
        celery_cores=units.celery_cores * factor,
    )


# The spread of the CPU costs over the measured runs (docs/scaling.md).
LOW_FACTOR, HIGH_FACTOR = 0.8, 1.35


def units_from_json(path: Path) -> Units:
    """The unit costs a `bench/sale.py` run measured (its JSON's "units")."""
    data = json.loads(path.read_text())
    if "model_units_paced" in data:
        found = data["model_units_paced"]
        return Units(**{k: Unit(**found[k]) if k in KINDS else v for k, v in found.items()})
    from bench.sale import units_for_model  # a --units-only run: no background window

    return units_for_model(data["units"], "_paced")


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
        first = self.arrivals_per_s  # a join's first poll: a number the copies have not read
        return {
            "page": self.arrivals_per_s * self.page_loads_per_arrival,
            "join": self.arrivals_per_s,
            "poll_wait": max(0.0, polls - head - first),
            "poll_redis": head + first,
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
    return Load(
        web_cores=sum(r * u[k].web_ms for k, r in rates.items()) / 1e3,
        redis_cores=(
            sum(r * u[k].redis_us for k, r in rates.items()) + refreshes * units.refresh_redis_us_per_proc_s
        )
        / 1e6,
        redis_cmds_per_s=sum(r * u[k].redis_cmds for k, r in rates.items())
        + refreshes * units.refresh_cmds_per_proc_s,
        redis_in_mb_s=sum(r * u[k].redis_in for k, r in rates.items()) / 1e6,
        redis_out_mb_s=(
            sum(r * u[k].redis_out for k, r in rates.items()) + refreshes * units.refresh_redis_out_per_proc_s
        )
        / 1e6,
        http_in_mb_s=http_in / 1e6,
        http_out_mb_s=http_out / 1e6,
        pg_cores=sum(r * u[k].pg_ms for k, r in rates.items()) / 1e3,
        celery_cores=units.celery_cores * events,
        requests_per_s=sum(rates.values()),
    )


@dataclass(frozen=True)
class Plan:
    """The answer: processes, nodes, network, and how busy each is."""

    web_processes: int
    web_cores: float
    redis_event_node_busy: float  # of one core: the hot event's node
    redis_nodes: int
    max_joins_per_s_per_event: float
    load: Load


def plan(crowd: Crowd, units: Units, target: float = 0.65) -> Plan:
    """Web processes (one core each: a uvicorn worker is one event loop) so that each
    is `target` busy; Redis nodes: each hot event's node (a slot is never split), plus
    one for everything else (rate limits, metrics, sessions), each with a replica."""
    rates = crowd.rates()
    # The processes' own refreshes are a fixed cost on Redis, not on the web: iterate once.
    procs = max(1, math.ceil(load(rates, units, 1, crowd.events).web_cores / target))
    found = load(rates, units, procs, crowd.events)
    per_event = replace(crowd, events=1)
    node = load(per_event.rates(), units, procs, 1).redis_cores
    nodes_per_event = 1  # one event's keys are one slot: more nodes do not help it
    joins_cap = target * 1e6 / units.join.redis_us if units.join.redis_us else math.inf
    return Plan(
        web_processes=procs,
        web_cores=found.web_cores,
        redis_event_node_busy=node,
        redis_nodes=(crowd.events * nodes_per_event + 1) * 2,
        max_joins_per_s_per_event=joins_cap,
        load=found,
    )


def table(crowd: Crowd, target: float = 0.65, units: Units = MEDIAN) -> str:
    """The answer in three columns: cheap, median and dear unit costs."""
    cols = [("low", scaled(units, LOW_FACTOR)), ("median", units), ("high", scaled(units, HIGH_FACTOR))]
    plans = [(name, plan(crowd, u, target)) for name, u in cols]
    rates = crowd.rates()
    lines = [
        f"crowd: {crowd.waiting:,} waiting, {sum(v for k, v in rates.items() if k.startswith('poll')):,.0f} polls/s, "
        f"{crowd.arrivals_per_s:,.0f} arrivals/s, {crowd.leaves_per_s:,.0f} leaves/s, "
        f"{crowd.admit_per_s:g} admitted/s, {rates['book']:,.0f} bookings/s; web processes {target:.0%} busy",
        "requests/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()),
        "",
        f"| | {' | '.join(name for name, _ in plans)} |",
        f"|---|{'---|' * len(plans)}",
    ]

    def row(label: str, fmt: str, get: callable) -> None:
        lines.append(f"| {label} | {' | '.join(format(get(p), fmt) for _, p in plans)} |")

    row("web processes (one core each)", ",d", lambda p: p.web_processes)
    row("web CPU, cores", ",.1f", lambda p: p.web_cores)
    row("the hot event's Redis node, cores busy", ".2f", lambda p: p.redis_event_node_busy)
    row("Redis commands/s on that node", ",.0f", lambda p: p.load.redis_cmds_per_s)
    row(f"joins/s one event's node takes at {target:.0%}", ",.0f", lambda p: p.max_joins_per_s_per_event)
    row("Redis nodes (event + rest, with replicas)", "d", lambda p: p.redis_nodes)
    row(
        "Redis network in / out, MB/s",
        "",
        lambda p: f"{p.load.redis_in_mb_s:.1f} / {p.load.redis_out_mb_s:.1f}",
    )
    row("web network in, MB/s", ",.0f", lambda p: p.load.http_in_mb_s)
    row("web network out, MB/s", ",.0f", lambda p: p.load.http_out_mb_s)
    row("web network in + out, Gbit/s", ".2f", lambda p: (p.load.http_in_mb_s + p.load.http_out_mb_s) * 8e-3)
    row("Postgres, cores executing statements", ".2f", lambda p: p.load.pg_cores)
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
    parser.add_argument("--json", action="store_true", help="the median plan as JSON")
    args = parser.parse_args()
    given = {f.name: getattr(args, f.name) for f in fields(Crowd) if getattr(args, f.name) is not None}
    if args.polls is not None:
        given["polls_per_s"] = args.polls
    crowd = Crowd(**given)
    units = units_from_json(args.units) if args.units else MEDIAN
    if args.json:
        print(json.dumps(asdict(plan(crowd, units, args.target)), indent=2))
    else:
        print(table(crowd, args.target, units))
    return 0


if __name__ == "__main__":
    sys.exit(main())
