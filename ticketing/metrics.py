"""Metrics for Prometheus at /metrics, and the log line of each tick and booking.

Per event: waiting, active, seats left and outbox backlog (gauges); people
admitted, bookings by outcome, holds by how they ended and the time to pay, joins
refused by reason, reconcile corrections (counters). For the whole service: the
admission tick's duration and each route's request latency (histograms).

Where the counts live: in Redis, not in the processes. Ticks run in a Celery
worker, reconcile in another, bookings in every gunicorn worker of every web node;
in docker-compose these are separate containers. prometheus-client's multiprocess
mode adds up only the processes that share one directory on one machine, so a
scrape of a web worker would never see a tick. Redis is what all of them already
share: each count is a HINCRBY where it happens, and a scrape reads them all. Any
worker of any node answers the same totals, and no process's restart resets them
(a Redis that lost its data does, which Prometheus reads as a counter reset).

- Gauges are read at scrape time (`RedisCollector`) from each event's own keys; the
  waiting room's numbers through the function queue_app registers
  (`register_live_numbers`), because this package imports no app.
- Event counters and the tick histogram are written when they happen: a tick a
  second, a booking at Postgres' pace (one HINCRBY beside the booking's own work).
  A failure to count is logged, never passed on: the booking matters more.
- Request latency is measured on every request, the crowd's polls included. A
  Redis write each would add to the one round trip such a request costs, so each
  process adds its observations up in memory and a thread writes them once a
  second; /metrics writes its own process's first. A killed process loses at most
  that second.
"""

import bisect
import functools
import ipaddress
import itertools
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ticketing import store
from ticketing.errors import REDIS_ERRORS, DomainError
from ticketing.ratelimit import client_ip

log = logging.getLogger(__name__)
tick_log = logging.getLogger("ticketing.tick")
booking_log = logging.getLogger("ticketing.booking")

# A booking's outcome is counted by lua/refused.lua, into the event's metrics hash.
_REFUSED = store.Caller("refused", passes="refused reason count")

T = TypeVar("T")

# Seconds. The fast lane answers in about a millisecond, a booking in a few, a tick
# in a few more: the low end is finer than prometheus-client's default.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# The service's histograms (ticks, requests): fields "<series>|<bucket index>" with
# the count of observations in that bucket alone (the scrape adds them up), and
# "<series>|sum_us", their sum in microseconds (whole numbers: HINCRBY, no drift).
SHARED_KEY = "ticket:metrics"


def event_key(event_id: str) -> str:
    """An event's counters: "admitted", "bookings|<outcome>", "reconcile|<kind>".
    Under the event's hash tag, so it goes when the event's keys are purged."""
    return store.event_keys(event_id).metrics


# --- The waiting room's live numbers, registered by queue_app -----------------------

_live_numbers: Callable[[str], Mapping[str, Any]] | None = None


def register_live_numbers(read: Callable[[str], Mapping[str, Any]]) -> None:
    """`read(event_id)` gives waiting, active, seatsLeft and joinsRefused (by reason)."""
    global _live_numbers
    _live_numbers = read


# --- Counting where things happen -------------------------------------------------


def _observation(series: str, seconds: float) -> dict[str, int]:
    """The histogram fields one observation moves: its bucket (the first bound it
    does not exceed; len(BUCKETS) is +Inf) and the sum."""
    return {f"{series}|{bisect.bisect_left(BUCKETS, seconds)}": 1, f"{series}|sum_us": round(seconds * 1e6)}


def observe_tick(tick_all: Callable[[], list]) -> Callable[[], list]:
    """Wraps the admission tick of every event (queue_app.admission.events_admit):
    the tick's duration, the people admitted per event, and one log line per event."""

    @functools.wraps(tick_all)
    def observed() -> list:
        start = time.perf_counter()
        ticks = tick_all()
        seconds = time.perf_counter() - start
        for tick in ticks:
            tick_log.info(
                "admission tick",
                extra={
                    "event": tick.event_id,
                    "outcome": tick.outcome,
                    "admitted": tick.admitted,
                    "waiting": tick.waiting,
                    "active": tick.active,
                    "ms": round(seconds * 1000, 1),
                },
            )
        try:
            pipe = store.client().pipeline(transaction=False)
            for tick in ticks:
                if tick.admitted:  # the event exists: its script just admitted people
                    pipe.hincrby(event_key(tick.event_id), "admitted", tick.admitted)
            for field, n in _observation("tick", seconds).items():
                pipe.hincrby(SHARED_KEY, field, n)
            pipe.execute()
        except REDIS_ERRORS as exc:
            log.warning("could not count a tick: %r", exc)
        return ticks

    return observed


def observe_booking(reserve: Callable[..., T]) -> Callable[..., T]:
    """Wraps booking_reserve (keyword arguments only): what the client was told,
    counted per event and outcome, and one log line. The outcome is CONFIRMED (or
    HELD, a priced event's), the refusal's code, or the exception's class when it
    was not a refusal."""

    @functools.wraps(reserve)
    def observed(**kwargs: Any) -> T:
        start = time.perf_counter()
        outcome, reservation, redis_failed = "CONFIRMED", None, False
        try:
            booked = reserve(**kwargs)
            outcome, reservation = booked.status, booked.reservation_id  # CONFIRMED, or HELD
            return booked
        except Exception as exc:
            if isinstance(exc, DomainError):
                outcome, reservation = exc.code, exc.details.get("reservationId")
            else:
                outcome, redis_failed = type(exc).__name__, isinstance(exc, REDIS_ERRORS)
            raise
        finally:
            booking_log.info(
                "booking decided",
                extra={
                    "reservation": None if reservation is None else str(reservation),
                    "event": kwargs["event_id"],
                    "outcome": outcome,
                    "seats": kwargs["seat_count"],
                    "ms": round((time.perf_counter() - start) * 1000, 1),
                },
            )
            # Redis just failed this booking: asking it again would only keep the
            # client waiting for a second timeout.
            if not redis_failed:
                _count_booking(kwargs["event_id"], outcome)

    return observed


def _count_booking(event_id: str, outcome: str) -> None:
    try:
        # lua/refused.lua counts only for an event that exists: a refused booking
        # may name any event id, and a hash per made-up id would fill Redis.
        store.run(
            _REFUSED.call(
                store.event_keys(event_id), refused=event_key(event_id), reason=f"bookings|{outcome}", count=1
            )
        )
    except REDIS_ERRORS as exc:
        log.warning("could not count a booking (%s) for %s: %r", outcome, event_id, exc)


def checkout_ended(event_id: str, outcome: str, hold_to_pay: float | None = None) -> None:
    """A hold that ended (PAID, RELEASED) or a payment given back (REFUNDED); a paid
    one with the seconds from its hold to its payment."""
    try:
        pipe = store.client().pipeline(transaction=False)
        pipe.hincrby(event_key(event_id), f"checkout|{outcome}", 1)
        if hold_to_pay is not None:
            pipe.hincrby(event_key(event_id), "holdpay|ms", round(hold_to_pay * 1000))
        pipe.execute()
    except REDIS_ERRORS as exc:
        log.warning("could not count a checkout (%s) for %s: %r", outcome, event_id, exc)


def reconcile_corrected(event_id: str, **kinds: int) -> None:
    """Count what one reconcile run of the event had to correct, per kind."""
    kinds = {kind: n for kind, n in kinds.items() if n}
    if not kinds:
        return
    try:
        pipe = store.client().pipeline(transaction=False)
        for kind, n in kinds.items():
            pipe.hincrby(event_key(event_id), f"reconcile|{kind}", n)
        pipe.execute()
    except REDIS_ERRORS as exc:
        log.warning("could not count reconcile corrections for %s: %r", event_id, exc)


# --- Request latency: added up in the process, written once a second ---------------


class _Pending(store.EverySecond):
    """This process's latency observations not yet in Redis: per route, a count
    per bucket and the sum in µs (what every request adds: a few list items, not a
    histogram's fields), made the hash's fields when written (`counts` holds those
    of a failed write: a few per route, bounded)."""

    def __init__(self) -> None:
        super().__init__("request latencies")
        self.rows: dict[str, list[int]] = {}

    def observe(self, route: str, seconds: float) -> None:
        with self.lock:
            row = self.rows.get(route)
            if row is None:
                row = self.rows[route] = [0] * (len(BUCKETS) + 2)
            row[bisect.bisect_left(BUCKETS, seconds)] += 1
            row[-1] += round(seconds * 1e6)
            self.wake()

    def taken(self) -> Counter:
        counts, rows, self.rows = super().taken(), self.rows, {}
        for route, row in rows.items():
            counts.update({f"request|{route}|{i}": n for i, n in enumerate(row[:-1]) if n})
            counts[f"request|{route}|sum_us"] += row[-1]
        return counts

    def write(self, counts: Counter) -> None:
        pipe = store.client().pipeline(transaction=False)
        for field, n in counts.items():
            pipe.hincrby(SHARED_KEY, field, n)
        pipe.execute()


_pending = _Pending()


def observe_request(route: str, seconds: float) -> None:
    """One request's latency, by route pattern (the same label on both lanes)."""
    _pending.observe(route, seconds)


class RequestLatencyMiddleware:
    """Django's lane: each request's latency, labelled by the pattern of the route
    it matched ("unmatched" for a 404 or a static file)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start = time.perf_counter()
        response = self.get_response(request)
        match = request.resolver_match
        observe_request(f"/{match.route}" if match else "unmatched", time.perf_counter() - start)
        return response


# --- The scrape ----------------------------------------------------------------------


def _histogram(family: HistogramMetricFamily, labels: list[str], fields: Mapping[str, int]) -> None:
    counts = [fields.get(str(i), 0) for i in range(len(BUCKETS) + 1)]
    cumulative = list(itertools.accumulate(counts))
    buckets = [(str(bound), n) for bound, n in zip(BUCKETS, cumulative, strict=False)]
    family.add_metric(labels, [*buckets, ("+Inf", cumulative[-1])], fields.get("sum_us", 0) / 1e6)


class RedisCollector(Collector):
    """Everything, read from Redis at scrape time."""

    def collect(self) -> Iterator:
        _pending.flush()  # this process's own requests, so that a scrape sees them at once
        client = store.client()
        events = sorted(e.decode() for e in client.smembers(store.EVENTS_KEY))
        pipe = client.pipeline(transaction=False)
        for event_id in events:
            pipe.xlen(store.event_keys(event_id).outbox).hgetall(event_key(event_id))
        pipe.hgetall(SHARED_KEY)
        *per_event, shared = pipe.execute()

        waiting = GaugeMetricFamily("ticketing_waiting", "People in line.", labels=["event"])
        active = GaugeMetricFamily("ticketing_active", "People in their booking window.", labels=["event"])
        seats = GaugeMetricFamily(
            "ticketing_seats_left", "Seats left, as Redis counts them.", labels=["event"]
        )
        refused = CounterMetricFamily(
            "ticketing_joins_refused", "Joins refused, by reason.", labels=["event", "reason"]
        )
        backlog = GaugeMetricFamily(
            "ticketing_outbox_backlog",
            "Bookings between Redis and their decision in Postgres.",
            labels=["event"],
        )
        admitted = CounterMetricFamily("ticketing_admitted", "People admitted by the tick.", labels=["event"])
        bookings = CounterMetricFamily(
            "ticketing_bookings",
            "Booking requests, by what the client was told.",
            labels=["event", "outcome"],
        )
        checkouts = CounterMetricFamily(
            "ticketing_checkouts",
            "Holds of priced bookings, by how they ended (PAID, RELEASED), and payments REFUNDED.",
            labels=["event", "outcome"],
        )
        hold_to_pay = CounterMetricFamily(
            "ticketing_hold_to_pay_seconds",
            "Seconds from a hold to its payment, added up over the paid ones "
            '(divide by ticketing_checkouts{outcome="PAID"} for the mean).',
            labels=["event"],
        )
        corrected = CounterMetricFamily(
            "ticketing_reconcile_mismatches",
            "What reconcile found wrong and corrected, by kind.",
            labels=["event", "kind"],
        )
        for i, event_id in enumerate(events):
            if _live_numbers is not None:
                live = _live_numbers(event_id)
                waiting.add_metric([event_id], live["waiting"])
                active.add_metric([event_id], live["active"])
                if live["seatsLeft"] is not None:
                    seats.add_metric([event_id], live["seatsLeft"])
                for reason, n in live["joinsRefused"].items():
                    refused.add_metric([event_id, reason], n)
            backlog.add_metric([event_id], per_event[2 * i])
            counts = {field.decode(): int(n) for field, n in per_event[2 * i + 1].items()}
            admitted.add_metric([event_id], counts.get("admitted", 0))
            for field, n in sorted(counts.items()):
                kind, _, name = field.partition("|")
                if kind == "bookings":
                    bookings.add_metric([event_id, name], n)
                elif kind == "reconcile":
                    corrected.add_metric([event_id, name], n)
                elif kind == "checkout":
                    checkouts.add_metric([event_id, name], n)
                elif kind == "holdpay":
                    hold_to_pay.add_metric([event_id], n / 1000)
        yield from (
            waiting,
            active,
            seats,
            refused,
            backlog,
            admitted,
            bookings,
            checkouts,
            hold_to_pay,
            corrected,
        )
        yield from self._histograms(shared)

    def _histograms(self, shared: Mapping[bytes, bytes]) -> Iterable[HistogramMetricFamily]:
        series: dict[str, dict[str, int]] = defaultdict(dict)
        for field, n in shared.items():
            name, _, part = field.decode().rpartition("|")
            series[name][part] = int(n)
        ticks = HistogramMetricFamily("ticketing_tick_duration_seconds", "Admission ticks (every event's).")
        if "tick" in series:
            _histogram(ticks, [], series["tick"])
        requests = HistogramMetricFamily(
            "ticketing_request_duration_seconds", "Request latency, by route (both lanes).", labels=["route"]
        )
        for name in sorted(series):
            if name.startswith("request|"):
                _histogram(requests, [name.removeprefix("request|")], series[name])
        return ticks, requests


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(RedisCollector())


# --- /metrics ------------------------------------------------------------------------


def allowed(meta: Mapping[str, str]) -> bool:
    """Is the client one of METRICS_ALLOWED_FROM? The client as rate limits see it
    (X-Forwarded-For believed from TRUSTED_PROXIES only). A request that came
    through a proxy we do not trust is refused: its peer is the proxy (nginx on the
    same host is 127.0.0.1), which would make everyone behind it look local."""
    address = client_ip(meta)
    if meta.get("HTTP_X_FORWARDED_FOR") and address == meta.get("REMOTE_ADDR"):
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in settings.METRICS_ALLOWED_FROM)


@never_cache
def view(request: HttpRequest) -> HttpResponse:
    """Prometheus' text format, for METRICS_ALLOWED_FROM; a 404 to anyone else, as
    for a page that does not exist."""
    if not allowed(request.META):
        err = DomainError("NOT_FOUND", f"No such page: {request.path}")
        return JsonResponse(err.body(), status=err.status)
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
