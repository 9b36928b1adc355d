"""Never oversold, nothing confirmed lost: real Postgres, Redis, processes and RabbitMQ."""

import contextlib
import dataclasses
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from booking_app import publish, services
from booking_app.models import Reservation
from booking_app.selectors import seats_sold
from queue_app.models import Event
from testsupport import require
from testsupport.booking import book, seats_left
from testsupport.servers import database_url_of_tests
from ticketing import store
from ticketing.celery import app as celery_app


def assert_seats_add_up(event) -> None:
    """Invariant 1, in both stores."""
    sold = seats_sold(event.event_id)
    redis_sold = sum(
        Reservation.objects.get(
            reservation_id=store.client().get(store.EventKeys(event.event_id).booked(str(t))).decode()
        ).seat_count
        for t in Reservation.objects.filter(event_id=event.event_id, status="CONFIRMED").values_list(
            "token", flat=True
        )
    )
    assert seats_left(event.event_id) + sold == event.total_seats
    assert Event.objects.get(pk=event.pk).seats_sold == sold  # the ledger agrees with the rows
    assert seats_left(event.event_id) + redis_sold == event.total_seats


def _post(base: str, payload: dict) -> tuple[int, dict]:
    resp = requests.post(f"{base}/api/booking", json=payload, timeout=60)
    return resp.status_code, resp.json()


@pytest.mark.django_db(transaction=True)
def test_1000_concurrent_bookings_on_100_seats_sell_exactly_100(postgres, server, make_event, active_tokens):
    event = make_event(total_seats=100, max_seats_per_booking=4)
    tokens = active_tokens(event, 1000)
    payloads = [{"token": t, "seatCount": 1 + i % 3, "eventId": event.event_id} for i, t in enumerate(tokens)]
    base, _ = server  # gunicorn, as in production
    with ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(lambda p: _post(base, p), payloads))
    codes = {}
    for status, body in results:
        code = "OK" if body["success"] else body["error"]["code"]
        codes[code] = codes.get(code, 0) + 1
        assert status in (200, 409), body
    assert set(codes) <= {"OK", "SOLD_OUT", "INSUFFICIENT_SEATS"}
    confirmed = [b["data"] for s, b in results if s == 200]
    assert sum(c["seatCount"] for c in confirmed) == 100
    assert Reservation.objects.filter(event_id=event.event_id).count() == len(confirmed)
    assert seats_sold(event.event_id) == 100
    assert seats_left(event.event_id) == 0
    assert_seats_add_up(event)
    assert store.client().xlen(store.EventKeys(event.event_id).outbox) == 0


@pytest.mark.django_db(transaction=True)
def test_retries_of_the_same_booking_never_book_twice(postgres, live_server, make_event, active_tokens):
    event = make_event(total_seats=50)
    token = active_tokens(event, 1)[0]
    payload = {"token": token, "seatCount": 2, "eventId": event.event_id}
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda _: _post(live_server.url, payload), range(20)))
    ok = [b for s, b in results if s == 200]
    assert len(ok) == 1
    rid = ok[0]["data"]["reservationId"]
    assert all(
        b["error"] == {"code": "ALREADY_BOOKED", "message": b["error"]["message"], "reservationId": rid}
        for s, b in results
        if s != 200
    )
    assert Reservation.objects.filter(token=token).count() == 1
    assert seats_left(event.event_id) == 48


@pytest.fixture
def failing_insert(postgres):
    """A real Postgres failure: a trigger refuses rows for one buyer name."""
    with connection.cursor() as cur:
        cur.execute("""
            CREATE OR REPLACE FUNCTION refuse_booking() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql;
            CREATE TRIGGER refuse_booking BEFORE INSERT ON booking_app_reservation
            FOR EACH ROW WHEN (NEW.buyer_name = 'FAIL') EXECUTE FUNCTION refuse_booking();
        """)
    yield
    with connection.cursor() as cur:
        cur.execute(
            "DROP TRIGGER IF EXISTS refuse_booking ON booking_app_reservation;"
            "DROP FUNCTION IF EXISTS refuse_booking();"
        )


def test_a_failed_postgres_write_gives_the_seats_back(api, make_event, active_tokens, failing_insert, rc):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    k = store.EventKeys(event.event_id)
    window = api.poll(token, event.event_id)[1]["data"]["activeExpiresAt"]
    status, body = book(api, token, event.event_id, 3, buyerName="FAIL")
    assert (status, body["error"]["code"]) == (503, "BOOKING_NOT_SAVED")
    assert seats_left(event.event_id) == 10
    assert rc.get(k.booked(token)) is None
    assert rc.xlen(k.outbox) == 0
    polled = api.poll(token, event.event_id)[1]["data"]
    assert (polled["status"], polled["activeExpiresAt"]) == ("ACTIVE", window)  # the window is given back
    assert int(rc.get(k.active)) == 1
    # Settled as never confirmed, so nothing can confirm that id later.
    assert list(Reservation.objects.values_list("status", flat=True)) == ["VOID"]
    status, body = book(api, token, event.event_id, 3, buyerName="Kim")  # the retry succeeds
    assert status == 200
    assert seats_left(event.event_id) == 7


def test_a_refused_bookings_give_back_happens_once_whoever_calls_it(
    make_event, active_tokens, failing_insert, rc
):
    """The request and a reconcile that read the outbox before the request's release
    both find the VOID row and both call release: only the call whose XDEL removed
    the entry gives the seats and the window back (lua/release.lua)."""
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    k = store.EventKeys(event.event_id)
    b = services.Booking(uuid.uuid4(), event.event_id, token, 3, buyer_name="FAIL")
    reply = store.run(services.reserve_call(b))
    outcome, entry_id, window_end = reply.outcome, reply.entry, reply.window_end
    assert outcome == b"OK"
    b = dataclasses.replace(b, window_end=int(window_end))
    decision = services.booking_decide(b)
    assert decision.outcome == services.NOT_SAVED
    active = int(rc.get(k.active))
    assert [services.release(k, entry_id, b, decision) for _ in range(2)] == [True, False]
    assert seats_left(event.event_id) == 10
    assert int(rc.get(k.active)) == active + 1  # the window is given back once too
    assert rc.xlen(k.outbox) == 0


@pytest.fixture
def server(gunicorn):
    """An app server process on the test database."""
    return gunicorn({"DATABASE_URL": database_url_of_tests()})


@pytest.mark.django_db(transaction=True)
def test_a_process_killed_after_the_redis_step_is_made_whole_by_reconcile(
    postgres, server, make_event, active_tokens, settings
):
    base, proc = server
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    k = store.EventKeys(event.event_id)
    # Hold the table so the server's INSERT waits right after its Redis step...
    from django.db import connections

    # The server's INSERT, waiting for the lock: of this database only (others run
    # tests on the same Postgres), and active (`query` is also an idle connection's last).
    waiting = (
        "FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database()"
        " AND state = 'active' AND wait_event_type = 'Lock'"
        " AND query LIKE 'INSERT INTO \"booking_app_reservation\"%%'"
    )
    blocker = connections.create_connection("default")
    blocker.set_autocommit(False)
    try:
        with blocker.cursor() as cur:
            cur.execute("LOCK TABLE booking_app_reservation IN EXCLUSIVE MODE")
            client = threading.Thread(target=lambda: _swallow(base, token, event.event_id), daemon=True)
            client.start()
            deadline = time.monotonic() + 30
            while True:
                # This transaction would otherwise see the activity as it was at its first look.
                cur.execute("SELECT pg_stat_clear_snapshot()")
                cur.execute(f"SELECT count(*) {waiting}")
                if cur.fetchone()[0] and store.client().xlen(k.outbox):
                    break
                assert time.monotonic() < deadline, "the server's INSERT never came to wait for the lock"
                time.sleep(0.02)
            os.killpg(proc.pid, signal.SIGKILL)  # ...and kill it there.
            proc.wait()
            # Its INSERT still waits in Postgres and would commit on its own once the lock
            # goes (then reconcile only tidies the outbox). End it first, as Postgres does
            # when it notices the client is gone, so that nothing but the outbox holds it.
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute(f"SELECT pg_terminate_backend(pid) {waiting}")
            assert cur.fetchall() == [(True,)]
    finally:
        blocker.rollback()
        blocker.close()
    assert seats_left(event.event_id) == 8
    assert not Reservation.objects.exists()  # the client was never told "confirmed"

    settings.BOOKING_RECONCILE_GRACE_SEC = 2
    time.sleep(2.1)
    call_command("reconcile", event.event_id)
    row = Reservation.objects.get(token=token)
    # Every field of the booking travelled in its outbox entry.
    assert (row.seat_count, row.status, row.buyer_name, row.buyer_email) == (
        2,
        "CONFIRMED",
        "Kim Minji",
        "minji@example.com",
    )
    assert store.client().get(k.booked(token)).decode() == str(row.reservation_id)
    assert store.client().xlen(k.outbox) == 0
    assert_seats_add_up(event)
    call_command("reconcile", event.event_id)  # idempotent
    assert Reservation.objects.count() == 1


def _swallow(base: str, token: str, event_id: str) -> None:
    try:
        requests.post(
            f"{base}/api/booking",
            json={
                "token": token,
                "seatCount": 2,
                "eventId": event_id,
                "buyerName": "Kim Minji",
                "buyerEmail": "minji@example.com",
            },
            timeout=30,
        )
    except requests.RequestException:
        pass  # the server died mid-request, as intended


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
def test_flushall_then_recover_event_never_oversells(redis_server, api, make_event, active_tokens, capsys):
    event = make_event(total_seats=10)
    tokens = active_tokens(event, 4)
    booked = {t: book(api, t, event.event_id, 2)[1]["data"]["reservationId"] for t in tokens[:3]}
    assert seats_left(event.event_id) == 4
    store.client().flushall()  # Redis lost everything
    assert api.join(event.event_id)[1]["error"]["code"] == "EVENT_NOT_FOUND"

    call_command("recover_event", event.event_id)
    # The seats were right (rebuilt from the ledger); the three booking marks were not.
    assert capsys.readouterr().out.splitlines() == [
        f"{event.event_id}: 4 left + 6 sold + 0 pending + 0 being returned = 10 seats:"
        " HEALED: restored 3 booking mark(s) Redis had lost"
    ]
    assert seats_left(event.event_id) == 4
    for token, rid in booked.items():
        polled = api.poll(token, event.event_id)[1]["data"]
        assert (polled["status"], polled["reservationId"]) == ("BOOKED", rid)
        assert api.rejoin(token, event.event_id)[1]["error"]["code"] == "ALREADY_BOOKED"
    # The unbooked one lost its window with the data; it rejoins at the back.
    assert api.poll(tokens[3], event.event_id)[1]["data"]["status"] == "NOT_FOUND"
    newcomers = active_tokens(event, 6)
    results = [book(api, t, event.event_id, 1) for t in newcomers]
    assert [s for s, _ in results].count(200) == 4
    assert {b["error"]["code"] for s, b in results if s != 200} == {"SOLD_OUT"}
    assert seats_sold(event.event_id) == 10
    assert seats_left(event.event_id) == 0


def test_recover_event_on_intact_redis_changes_no_seats(api, make_event, active_tokens):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    book(api, token, event.event_id, 3)
    call_command("recover_event", event.event_id)
    assert seats_left(event.event_id) == 7
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "BOOKED"


# --- booking.completed on RabbitMQ ---------------------------------------------------


@pytest.fixture
def rabbitmq():
    require(settings.BROKER_URL.startswith("amqp"), "RABBITMQ_URL is not set to a RabbitMQ broker")
    queue_name = f"booking.completed.test-{uuid.uuid4().hex[:8]}"
    with override_settings(BOOKING_QUEUE=queue_name):
        yield queue_name
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue_name)


def _consume(queue_name: str, seconds: float = 10) -> list[dict]:
    from kombu import Connection

    messages = []
    with Connection(settings.BROKER_URL) as conn:
        simple = conn.SimpleQueue(queue_name)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                msg = simple.get(timeout=0.5)
            except simple.Empty:
                if messages:
                    break
                continue
            messages.append(json.loads(msg.body) if isinstance(msg.body, (str, bytes)) else msg.payload)
            msg.ack()
        simple.close()
    return messages


@pytest.mark.django_db(transaction=True)
@pytest.mark.rabbitmq
def test_booking_completed_reaches_rabbitmq(postgres, rabbitmq, api, make_event, active_tokens):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    assert publish.wait_until_sent()
    messages = _consume(rabbitmq)
    assert messages == [
        {
            "type": "booking.completed",
            "reservationId": rid,
            "eventId": event.event_id,
            "token": token,
            "seatCount": 2,
            "createdAt": Reservation.objects.get(reservation_id=rid).created_at.isoformat(),
        }
    ]
    assert Reservation.objects.get(reservation_id=rid).published_at is not None


def _point_broker_at(url: str, timeout: float = 1) -> None:
    celery_app.conf.broker_url = url
    celery_app.conf.broker_connection_timeout = timeout
    celery_app._pool = None  # the pools hold connections to the old address
    celery_app.amqp._producer_pool = None
    publish._broker_down_until = 0.0


@contextlib.contextmanager
def _broker_that_never_answers() -> Iterator[str]:
    """A broker's address that accepts connections and never says a word (a hung
    broker, or a network losing its answers): a client waits there until it goes."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"amqp://guest:guest@127.0.0.1:{server.getsockname()[1]}//"
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        server.close()
        thread.join(30)
        for conn in accepted:
            conn.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.rabbitmq
def test_a_broker_outage_never_fails_a_booking(postgres, rabbitmq, api, make_event, active_tokens):
    event = make_event(total_seats=10)
    tokens = active_tokens(event, 3)
    try:
        with _broker_that_never_answers() as hung:
            _point_broker_at(hung, timeout=120)
            # Each buyer gives an address: their confirmations go to the broker too.
            results = [
                book(api, t, event.event_id, 1, buyerEmail=f"b{i}@example.com") for i, t in enumerate(tokens)
            ]
            assert [s for s, _ in results] == [200, 200, 200]
            # Answered while the publisher still waits for the broker: the requests
            # never wait for it, nor for the confirmations, still being handed over.
            assert not publish.wait_until_sent(0)
            assert set(Reservation.objects.values_list("mail_status", flat=True)) == {""}
        assert publish.wait_until_sent(60)  # the broker went: the publisher failed, and gave up
        assert Reservation.objects.filter(published_at__isnull=True).count() == 3
    finally:
        _point_broker_at(settings.BROKER_URL)  # the broker is back
    assert publish.publish_pending() == 3
    rids = sorted(b["data"]["reservationId"] for _, b in results)
    assert sorted(m["reservationId"] for m in _consume(rabbitmq)) == rids
    assert Reservation.objects.filter(published_at__isnull=True).count() == 0
