"""/metrics: Prometheus' text format, read from Redis, for METRICS_ALLOWED_FROM only.

The counts live in Redis (ticketing/metrics.py says why), so what another process
counted (a gunicorn worker's booking, its requests' latency) is scraped here, and
what this process counted (a tick) is scraped there.

Redis is shared with whatever else runs against it, and the service-wide histograms
(ticks, request latency) are not per event: those are compared before and after.
"""

import ipaddress
import json
import time

import pytest
import requests

import ticketing.asgi  # noqa: F401 (its django.setup() reconfigures logging: at import, not in a test)
from booking_app.reconcile import booking_reconcile
from queue_app import admission, events
from testsupport.clients import LaneClient
from testsupport.line import next_redis_second
from testsupport.metrics import Samples, parse, scrape, value
from testsupport.servers import database_url_of_tests
from ticketing import ratelimit, store


@pytest.fixture
def postgres(db) -> None:
    """The test database (PostgreSQL, as everywhere)."""


def tick(event_id: str) -> None:
    """One admission tick of every event (`events_admit`, as beat runs it) that
    admits for this one: in a fresh Redis second if this one had a tick already."""
    for _ in range(3):
        ticks = {t.event_id: t for t in admission.events_admit()}
        if ticks[event_id].outcome != "ALREADY_TICKED":
            assert ticks[event_id].outcome == "ADMITTED", ticks[event_id]
            return
        next_redis_second()
    pytest.fail("no tick of its own in three seconds")


def join(client, event_id: str) -> str:
    resp = client.post("/api/queue/join", json.dumps({"eventId": event_id}), content_type="application/json")
    assert resp.status_code == 200, resp.content
    return json.loads(resp.content)["data"]["token"]


def book(client, token: str, event_id: str, seats: int) -> tuple[int, dict]:
    body = json.dumps({"token": token, "seatCount": seats, "eventId": event_id})
    resp = client.post("/api/booking", body, content_type="application/json")
    return resp.status_code, json.loads(resp.content)


def latency_count(samples: Samples, route: str) -> float:
    return value(samples, "ticketing_request_duration_seconds_count", route=route) or 0


def test_metrics_after_a_join_a_tick_a_booking_and_a_refusal(client, make_event, postgres):
    event, hot = make_event(total_seats=4), make_event(proof_of_work=1_000)
    ev = event.event_id
    before = scrape(client)

    first = join(LaneClient(client), ev)  # the fast lane, as production serves joins
    second = join(client, ev)  # Django's lane
    join(client, ev)  # stays in line: the tick admits two
    event.admit_per_second = 2
    event.save()
    events.event_publish(event)
    tick(ev)
    assert book(client, first, ev, 2)[0] == 200
    assert book(client, first, ev, 1)[1]["error"]["code"] == "ALREADY_BOOKED"
    assert book(client, second, ev, 3)[1]["error"]["code"] == "INSUFFICIENT_SEATS"
    refused = client.post("/api/queue/join", {"eventId": hot.event_id}, content_type="application/json")
    assert json.loads(refused.content)["error"]["code"] == "PROOF_OF_WORK"

    after = scrape(client)
    assert value(after, "ticketing_waiting", event=ev) == 1
    assert value(after, "ticketing_active", event=ev) is not None
    assert value(after, "ticketing_seats_left", event=ev) == 2
    assert value(after, "ticketing_outbox_backlog", event=ev) == 0
    assert value(after, "ticketing_admitted_total", event=ev) == 2
    assert value(after, "ticketing_bookings_total", event=ev, outcome="CONFIRMED") == 1
    assert value(after, "ticketing_bookings_total", event=ev, outcome="ALREADY_BOOKED") == 1
    assert value(after, "ticketing_bookings_total", event=ev, outcome="INSUFFICIENT_SEATS") == 1
    assert value(after, "ticketing_joins_refused_total", event=hot.event_id, reason="proof_of_work") == 1
    assert value(after, "ticketing_seats_left", event=hot.event_id) == 100
    # The service-wide histograms moved (by at least this test's share).
    ticks = "ticketing_tick_duration_seconds"
    assert value(after, f"{ticks}_count") >= (value(before, f"{ticks}_count") or 0) + 1
    assert value(after, f"{ticks}_bucket", le="+Inf") == value(after, f"{ticks}_count")
    assert value(after, f"{ticks}_sum") > 0
    assert latency_count(after, "/api/queue/join") >= latency_count(before, "/api/queue/join") + 4
    assert latency_count(after, "/api/booking") >= latency_count(before, "/api/booking") + 3
    buckets = [
        v
        for (name, labels), v in after.items()
        if name.endswith("_bucket") and ("route", "/api/booking") in labels
    ]
    assert buckets == sorted(buckets) and len(buckets) == 14  # cumulative, 13 bounds and +Inf


def test_the_fast_lane_times_its_requests(client, event):
    before = latency_count(scrape(client), "/api/status/poll")
    token = join(LaneClient(client), event.event_id)
    resp = LaneClient(client).get(f"/api/status/poll?token={token}&eventId={event.event_id}")
    assert resp.status_code == 200
    assert latency_count(scrape(client), "/api/status/poll") >= before + 1


def test_reconcile_counts_what_it_corrected(client, make_event, postgres):
    event = make_event(total_seats=10)
    store.client().set(store.EventKeys(event.event_id).seats, 3)  # Redis lost seven sales that never were
    assert booking_reconcile(event.event_id).healed_from == 3
    samples = scrape(client)
    assert value(samples, "ticketing_reconcile_mismatches_total", event=event.event_id, kind="seats") == 1
    assert value(samples, "ticketing_seats_left", event=event.event_id) == 10
    booking_reconcile(event.event_id)  # consistent now: nothing more counted
    samples = scrape(client)
    assert value(samples, "ticketing_reconcile_mismatches_total", event=event.event_id, kind="seats") == 1


@pytest.fixture
def clean_client_ip():
    ratelimit._trusted.cache_clear()  # it caches TRUSTED_PROXIES' answers per address
    yield
    ratelimit._trusted.cache_clear()


def test_metrics_answer_only_the_allowed_addresses(client, settings, clean_client_ip):
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::ffff:127.0.0.1").status_code == 200
    resp = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert resp.status_code == 404
    assert json.loads(resp.content) == {
        "success": False,
        "error": {"code": "NOT_FOUND", "message": "No such page: /metrics"},
    }
    # Through a proxy we do not trust, the peer is the proxy: everyone would look local.
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 404
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 404

    settings.TRUSTED_PROXIES = (ipaddress.ip_network("127.0.0.1/32"),)
    ratelimit._trusted.cache_clear()
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 404
    settings.METRICS_ALLOWED_FROM = (ipaddress.ip_network("203.0.113.0/24"),)
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 200
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 404
    assert client.get("/metrics").status_code == 404  # 127.0.0.1 is no longer on the list


@pytest.mark.django_db(transaction=True)
def test_counts_from_another_process_are_scraped_here_and_there(client, gunicorn, make_event, postgres):
    """A booking and its latency counted by a gunicorn worker reach this process's
    scrape; a tick counted here reaches the server's."""
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests()})
    event = make_event(total_seats=5)
    ev = event.event_id
    before = scrape(client)
    token = requests.post(f"{base}/api/queue/join", json={"eventId": ev}, timeout=10).json()["data"]["token"]
    tick(ev)  # in this process
    resp = requests.post(
        f"{base}/api/booking", json={"token": token, "seatCount": 2, "eventId": ev}, timeout=30
    )
    assert resp.status_code == 200, resp.text

    there = parse(requests.get(f"{base}/metrics", timeout=10).text)
    assert value(there, "ticketing_admitted_total", event=ev) == 1
    assert value(there, "ticketing_bookings_total", event=ev, outcome="CONFIRMED") == 1
    assert value(there, "ticketing_seats_left", event=ev) == 3

    here = scrape(client)
    assert value(here, "ticketing_bookings_total", event=ev, outcome="CONFIRMED") == 1
    # The server's own latencies reach Redis (its thread writes them every second).
    deadline = time.monotonic() + 30
    while latency_count(here, "/api/booking") < latency_count(before, "/api/booking") + 1:
        assert time.monotonic() < deadline, "the server's latencies never arrived"
        time.sleep(0.2)
        here = scrape(client)
    assert latency_count(here, "/api/queue/join") >= latency_count(before, "/api/queue/join") + 1
