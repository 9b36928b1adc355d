"""Every seat sold once, whatever fails: each failure found in the field, injected
for real (a crashed and restored Redis, a flushed one, a Redis that refuses writes,
Postgres away, reconciles racing each other), and what must hold after it."""

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_lib
import requests
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings

from booking_app import reconcile, services
from booking_app.models import Reservation
from booking_app.selectors import seats_sold
from booking_app.services import Booking, reserve_call
from queue_app import tokens
from queue_app.models import Event
from testsupport import CheckedThread
from testsupport.booking import book, seats_left
from testsupport.servers import database_url_of_tests
from ticketing import store
from ticketing.tests.faultproxy import Action, FaultProxy, Message


def ledger(event_id: str) -> int:
    return Event.objects.values_list("seats_sold", flat=True).get(event_id=event_id)


def assert_sold_out_exactly(event) -> None:
    """Postgres sold every seat once; its ledger agrees with its rows; Redis agrees."""
    assert seats_sold(event.event_id) == ledger(event.event_id) == event.total_seats
    assert seats_left(event.event_id) == 0


# --- Redis came back from an older snapshot (or lost its last second) ---------------


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
@pytest.mark.django_db(transaction=True)
def test_redis_back_from_an_older_snapshot_never_oversells(
    postgres, redis_server, make_event, active_tokens, api
):
    event = make_event(total_seats=10)
    for token in active_tokens(event, 2):
        assert book(api, token, event.event_id, 2)[0] == 200
    snapshot = redis_server.snapshot()  # seats left: 6
    for token in active_tokens(event, 2):
        assert book(api, token, event.event_id, 2)[0] == 200
    assert seats_left(event.event_id) == 2
    redis_server.crash()
    redis_server.restart(snapshot)  # the last two bookings are gone from Redis, not from Postgres
    assert seats_left(event.event_id) == 6

    late = active_tokens(event, 6)
    results = [book(api, t, event.event_id, 1) for t in late]
    assert [s for s, _ in results].count(200) == 2  # Postgres had two seats left, not six
    assert {b["error"]["code"] for s, b in results if s != 200} == {"SOLD_OUT"}
    assert seats_sold(event.event_id) == ledger(event.event_id) == 10

    # Each refusal kept the seats it had taken in Redis, so its count came down too:
    # reconcile has no seats to heal, only the marks of the two bookings the snapshot missed.
    assert_sold_out_exactly(event)
    report = reconcile.booking_reconcile(event.event_id)
    assert (report.verdict, report.healed_from, report.marks_restored) == ("HEALED", None, 2)
    assert reconcile.booking_reconcile(event.event_id).consistent

    redis_server.crash()
    redis_server.restart(snapshot)  # once more, and now reconcile comes first
    report = reconcile.booking_reconcile(event.event_id)
    # The snapshot has the marks of the first two bookings only: four are restored.
    assert (report.healed_from, report.seats_left, report.marks_restored) == (6, 0, 4)
    assert_sold_out_exactly(event)
    assert reconcile.booking_reconcile(event.event_id).consistent


@pytest.mark.django_db(transaction=True)
def test_reconcile_heals_a_count_postgres_contradicts(postgres, make_event, active_tokens, api, capsys):
    event = make_event(total_seats=10)
    book(api, active_tokens(event, 1)[0], event.event_id, 1)
    store.client().incrby(store.EventKeys(event.event_id).seats, 5)  # Redis lost a decrement
    sums = f"{event.event_id}: 9 left + 1 sold + 0 pending + 0 being returned = 10 seats"
    with pytest.raises(CommandError) as healed:
        call_command("reconcile", event.event_id)
    assert healed.value.returncode == 2  # the exit status says it had to heal
    assert capsys.readouterr().out.splitlines() == [
        f"{sums}: HEALED: Redis said 14 left; Postgres' count now applies"
    ]
    assert seats_left(event.event_id) == 9
    call_command("reconcile", event.event_id)  # exit status 0
    assert capsys.readouterr().out.splitlines() == [f"{sums}: consistent"]


# --- FLUSHALL (or init_event --reset) after a cancellation Redis never saw -----------


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
@pytest.mark.parametrize("rebuild", ["recover_event", "init_event --reset"])
@pytest.mark.django_db(transaction=True)
def test_a_cancellation_redis_missed_is_returned_once_after_a_rebuild(
    postgres, redis_server, make_event, active_tokens, api, rebuild
):
    event = make_event(total_seats=10)
    rids = [book(api, t, event.event_id, 2)[1]["data"]["reservationId"] for t in active_tokens(event, 3)]
    assert seats_left(event.event_id) == 4
    nowhere = {"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=nowhere):
        services.booking_cancel(reservation_id=uuid.UUID(rids[0]))  # Postgres yes, Redis no
    assert seats_left(event.event_id) == 4
    store.client().flushall()  # and then Redis lost everything

    if rebuild == "recover_event":
        call_command("recover_event", event.event_id)
    else:
        call_command("init_event", event.event_id, "--reset")
    assert seats_left(event.event_id) == 6  # 10 - 4 sold: the cancelled two are back, once
    call_command("reconcile", event.event_id)
    call_command("reconcile", event.event_id)
    assert seats_left(event.event_id) == 6
    assert seats_sold(event.event_id) == ledger(event.event_id) == 4
    for rid in rids[1:]:
        token = str(Reservation.objects.get(reservation_id=rid).token)
        polled = api.poll(token, event.event_id)[1]["data"]
        assert (polled["status"], polled["reservationId"]) == ("BOOKED", rid)
        assert store.client().ttl(store.EventKeys(event.event_id).booked(token)) == -1


# --- reconcile gives a refused booking's seats back once, however many run -----------


def _stranded_booking(event, token: str, seats: int) -> None:
    """The Redis step of a booking whose process then died: its entry waits in the
    outbox (the same script the request runs)."""
    number = tokens.verify(event.event_id, uuid.UUID(token).bytes)
    store.client().setbit(store.EventKeys(event.event_id).booked_places, number, 0)  # lost with the mark
    reply = store.run(reserve_call(Booking(uuid.uuid4(), event.event_id, token, seats)))
    assert reply[0] == b"OK", reply


@pytest.mark.django_db(transaction=True)
def test_parallel_reconciles_give_a_refused_bookings_seats_back_once(
    postgres, make_event, active_tokens, api, settings
):
    settings.BOOKING_RECONCILE_GRACE_SEC = 0
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    first = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    k = store.EventKeys(event.event_id)
    store.client().delete(k.booked(token))  # Redis lost the mark...
    _stranded_booking(event, token, 3)  # ...so the token booked again, and its process died
    assert seats_left(event.event_id) == 5

    barrier = threading.Barrier(8)

    def run() -> reconcile.Report:
        barrier.wait()
        try:
            return reconcile.booking_reconcile(event.event_id)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        reports = list(pool.map(lambda _: run(), range(8)))
    assert sum(len(rep.refused) for rep in reports) == 1
    reconcile.booking_reconcile(event.event_id)
    assert seats_left(event.event_id) == 8  # the refused 3 came back once
    assert store.client().xlen(k.outbox) == 0
    assert store.client().get(k.booked(token)).decode() == first  # the mark names the real booking
    assert seats_sold(event.event_id) == ledger(event.event_id) == 2


# --- the booking mark, and a token that already holds a confirmed row ---------------


@pytest.mark.django_db(transaction=True)
def test_a_token_that_holds_a_row_cannot_loop_insert_and_undo(postgres, make_event, active_tokens, api, rc):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    k = store.EventKeys(event.event_id)
    # Redis lost its last second: the mark is gone and the token is active again.
    rc.delete(k.booked(token))
    rc.setbit(k.booked_places, tokens.verify(event.event_id, uuid.UUID(token).bytes), 0)

    results = [book(api, token, event.event_id, 1) for _ in range(20)]
    assert {(s, b["error"]["code"], b["error"]["reservationId"]) for s, b in results} == {
        (409, "ALREADY_BOOKED", rid)
    }
    # One attempt reached Postgres; it pointed the mark at the real booking and gave
    # no window back, so the other nineteen stopped in Redis.
    assert Reservation.objects.filter(token=token).exclude(reservation_id=rid).count() == 1
    assert Reservation.objects.get(token=token, status="VOID").seat_count == 1
    assert rc.get(k.booked(token)).decode() == rid
    assert rc.ttl(k.booked(token)) == -1
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "BOOKED"
    assert seats_left(event.event_id) == 8
    assert rc.xlen(k.outbox) == 0


# --- Postgres away --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_with_postgres_away_a_booking_is_pending_then_decided_by_reconcile(
    postgres, gunicorn, make_event, active_tokens, settings
):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    base, _ = gunicorn({"DATABASE_URL": "postgres://postgres@127.0.0.1:1/nowhere"})
    resp = requests.post(
        f"{base}/api/booking",
        json={"token": token, "seatCount": 2, "eventId": event.event_id, "buyerName": "Lee"},
        timeout=60,
    )
    body = resp.json()
    assert (resp.status_code, body["error"]["code"]) == (503, "BOOKING_PENDING")
    rid = body["error"]["reservationId"]
    assert seats_left(event.event_id) == 8  # held, not given back blindly
    polled = requests.get(
        f"{base}/api/status/poll", params={"token": token, "eventId": event.event_id}, timeout=10
    ).json()["data"]
    assert (polled["status"], polled["reservationId"]) == ("BOOKED", rid)
    cancel = requests.delete(f"{base}/api/booking/{rid}", params={"token": token}, timeout=30)
    assert (cancel.status_code, cancel.json()["error"]["code"]) == (503, "DATABASE_UNAVAILABLE")

    settings.BOOKING_RECONCILE_GRACE_SEC = 0  # Postgres is back; the request is long gone
    report = reconcile.booking_reconcile(event.event_id)
    assert report.written == [rid] and report.consistent
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.status, row.seat_count, row.buyer_name) == ("CONFIRMED", 2, "Lee")
    assert seats_sold(event.event_id) == ledger(event.event_id) == 2
    assert seats_left(event.event_id) == 8


# --- Redis refusing: every error is a 503 in the envelope, and changes nothing --------


def _post(base: str, path: str, body: dict) -> requests.Response:
    return requests.post(f"{base}{path}", json=body, timeout=30)


def _assert_503(resp: requests.Response) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.json()["error"]["code"] == "REDIS_UNAVAILABLE"


@pytest.fixture
def app_on_private_redis(postgres, redis_server, gunicorn):
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests(), "REDIS_URL": redis_server.url})
    return base


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
@pytest.mark.parametrize("trouble", ["READONLY", "OOM", "BUSY"])
@pytest.mark.django_db(transaction=True)
def test_a_redis_that_refuses_writes_is_a_503(
    redis_server, app_on_private_redis, make_event, snapshot, trouble
):
    event = make_event(total_seats=10)
    before = snapshot(event.event_id)
    admin = redis_server.client()
    busy = None
    if trouble == "READONLY":
        admin.replicaof("127.0.0.1", 1)  # a failover made this node a replica
    elif trouble == "OOM":
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", 1)
    else:
        admin.config_set("lua-time-limit", 50)
        busy = threading.Thread(target=lambda: _swallow(lambda: admin.eval("while true do end", 0)))
        busy.start()
        time.sleep(0.3)
    try:
        refusal = {"READONLY": "read only replica", "OOM": "maxmemory", "BUSY": "BUSY"}[trouble]
        with pytest.raises(redis_lib.ResponseError, match=refusal):  # the trouble is real
            redis_server.client().set(f"probe-{event.event_id}", 1)
        _assert_503(_post(app_on_private_redis, "/api/queue/join", {"eventId": event.event_id}))
    finally:
        if trouble == "READONLY":
            admin.replicaof("NO", "ONE")
        elif trouble == "OOM":
            admin.config_set("maxmemory", 0)
        else:
            redis_server.client().script_kill()
            busy.join()
    assert snapshot(event.event_id) == before
    assert _post(app_on_private_redis, "/api/queue/join", {"eventId": event.event_id}).status_code == 200


def _swallow(call) -> None:
    try:
        call()
    except Exception:  # the script is killed on purpose
        pass


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
@pytest.mark.django_db(transaction=True)
def test_a_key_of_the_wrong_type_is_a_503_and_changes_nothing(
    redis_server, app_on_private_redis, make_event, active_tokens, snapshot
):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    k = store.EventKeys(event.event_id)
    store.client().set(k.popped, "not a number")
    before = snapshot(event.event_id)
    _assert_503(_post(app_on_private_redis, "/api/queue/join", {"eventId": event.event_id}))
    assert snapshot(event.event_id) == before  # the arrival counter did not move

    store.client().set(k.outbox, "not a stream")
    before = snapshot(event.event_id)
    _assert_503(
        _post(
            app_on_private_redis, "/api/booking", {"token": token, "seatCount": 1, "eventId": event.event_id}
        )
    )
    assert snapshot(event.event_id) == before  # no seat, no mark, the window kept
    assert not Reservation.objects.exists()


# --- lost acknowledgements and errors between two steps, at the network boundary -----


@pytest.fixture
def pg_proxy(postgres):
    db = settings.DATABASES["default"]
    with FaultProxy("postgres", int(db["PORT"] or 5432), db["HOST"] or "127.0.0.1") as proxy:
        yield proxy


@pytest.fixture
def redis_proxy(redis_server):
    with FaultProxy("redis", redis_server.port) as proxy:
        yield proxy


class once:  # noqa: N801 - used as a rule, like a function: `proxy.rule = once(...)`
    """A rule that acts on the first message `wanted` picks, then lets all pass.

    `fired` counts the messages it acted on (0 or 1), and `message` is that one: a test
    asserts its fault fired, or a rule that stopped matching (the SQL changed, a script
    was renamed) would leave it passing on the normal path."""

    def __init__(self, wanted: Callable[[Message], bool], action: Action) -> None:
        self.wanted, self.action = wanted, action
        self.fired = 0
        self.message: Message | None = None
        self._lock = threading.Lock()

    def __call__(self, message: Message) -> Action:
        if not self.wanted(message):
            return Action.PASS
        with self._lock:
            if self.fired:
                return Action.PASS
            self.fired, self.message = 1, message
        return self.action

    def assert_fired_on(self, proxy: FaultProxy) -> None:
        """It picked one message, and the proxy cut the connection there."""
        assert self.fired == 1, "the fault never fired: no message matched its rule"
        assert proxy.cuts == [(self.message, self.action)], proxy.cuts


def commits_a_booking(m: Message) -> bool:
    """The statement that makes a booking durable: its INSERT, which commits on its
    own (or a COMMIT, were it ever sent inside a transaction)."""
    text = m.text.lstrip().upper()
    return m.kind == "Q" and (text == "COMMIT" or text.startswith('INSERT INTO "BOOKING_APP_RESERVATION"'))


def runs_script(*names: str) -> Callable[[Message], bool]:
    shas = {store.script(name).sha.encode() for name in names}
    return lambda m: m.kind == "EVALSHA" and m.args[:1] and m.args[0] in shas


@pytest.mark.django_db(transaction=True)
def test_a_commit_whose_acknowledgement_was_lost_is_confirmed_not_undone(
    pg_proxy, gunicorn, make_event, active_tokens
):
    event = make_event(total_seats=4)
    first, second = active_tokens(event, 2)
    base, _ = gunicorn({"DATABASE_URL": pg_proxy.postgres_url(settings.DATABASES["default"]["NAME"])})
    cut = pg_proxy.rule = once(commits_a_booking, Action.CUT_AFTER)  # Postgres commits; the app hears nothing
    resp = _post(base, "/api/booking", {"token": first, "seatCount": 4, "eventId": event.event_id})
    cut.assert_fired_on(pg_proxy)
    assert resp.status_code == 200, resp.text
    rid = resp.json()["data"]["reservationId"]
    assert Reservation.objects.get(reservation_id=rid).status == "CONFIRMED"
    assert pg_proxy.seen[("postgres", "startup")] >= 2  # it asked again on a fresh connection
    assert seats_left(event.event_id) == 0  # the seats were not given back to the next buyer
    resp = _post(base, "/api/booking", {"token": second, "seatCount": 1, "eventId": event.event_id})
    assert (resp.status_code, resp.json()["error"]["code"]) == (409, "SOLD_OUT")
    assert seats_sold(event.event_id) == ledger(event.event_id) == 4
    assert store.client().xlen(store.EventKeys(event.event_id).outbox) == 0


@pytest.mark.django_db(transaction=True)
def test_a_commit_that_never_reached_postgres_is_decided_on_a_fresh_connection(
    pg_proxy, gunicorn, make_event, active_tokens
):
    event = make_event(total_seats=4)
    token = active_tokens(event, 1)[0]
    base, _ = gunicorn({"DATABASE_URL": pg_proxy.postgres_url(settings.DATABASES["default"]["NAME"])})
    cut = pg_proxy.rule = once(commits_a_booking, Action.CUT_BEFORE)  # it never reaches Postgres
    resp = _post(base, "/api/booking", {"token": token, "seatCount": 3, "eventId": event.event_id})
    cut.assert_fired_on(pg_proxy)
    assert resp.status_code == 200, resp.text  # written again on the fresh connection
    assert pg_proxy.seen[("postgres", "startup")] >= 2
    rid = resp.json()["data"]["reservationId"]
    assert Reservation.objects.get(reservation_id=rid).status == "CONFIRMED"
    assert seats_sold(event.event_id) == ledger(event.event_id) == 3
    assert seats_left(event.event_id) == 1


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
@pytest.mark.django_db(transaction=True)
def test_a_redis_error_after_the_commit_still_answers_confirmed(
    postgres, redis_server, redis_proxy, gunicorn, make_event, active_tokens
):
    event = make_event(total_seats=4)
    token = active_tokens(event, 1)[0]
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests(), "REDIS_URL": redis_proxy.redis_url()})
    # The step after the commit (taking the entry out of the outbox) meets a dead connection.
    cut = redis_proxy.rule = once(
        lambda m: runs_script("outbox_done")(m) or m.kind == "XDEL", Action.CUT_BEFORE
    )
    resp = _post(base, "/api/booking", {"token": token, "seatCount": 2, "eventId": event.event_id})
    cut.assert_fired_on(redis_proxy)
    assert resp.status_code == 200, resp.text
    rid = resp.json()["data"]["reservationId"]
    k = store.EventKeys(event.event_id)
    assert store.client().xlen(k.outbox) == 1  # the leftover is reconcile's
    report = reconcile.booking_reconcile(event.event_id)
    assert report.consistent and report.written == []
    assert store.client().xlen(k.outbox) == 0
    assert Reservation.objects.get(reservation_id=rid).status == "CONFIRMED"
    assert seats_left(event.event_id) == 2


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
@pytest.mark.parametrize("cut", [Action.CUT_BEFORE, Action.CUT_AFTER])
@pytest.mark.django_db(transaction=True)
def test_a_redis_error_inside_a_give_back_never_gives_twice(
    postgres, redis_server, redis_proxy, make_event, active_tokens, api, settings, cut
):
    settings.BOOKING_RECONCILE_GRACE_SEC = 0
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    book(api, token, event.event_id, 2)
    k = store.EventKeys(event.event_id)
    store.client().delete(k.booked(token))
    _stranded_booking(event, token, 3)  # refused by Postgres when decided: the seats go back
    assert seats_left(event.event_id) == 5

    through_proxy = {"default": {**settings.CACHES["default"], "LOCATION": redis_proxy.redis_url()}}
    rule = redis_proxy.rule = once(lambda m: runs_script("release")(m) or m.kind == "INCRBY", cut)
    with override_settings(CACHES=through_proxy), pytest.raises(redis_lib.ConnectionError):
        reconcile.booking_reconcile(event.event_id)
    rule.assert_fired_on(redis_proxy)
    reconcile.booking_reconcile(event.event_id)  # the next run, on a healthy connection
    reconcile.booking_reconcile(event.event_id)
    assert seats_left(event.event_id) == 8
    assert store.client().xlen(k.outbox) == 0


@pytest.mark.django_db(transaction=True)
def test_outbox_entries_stamped_by_a_clock_that_later_went_back_are_still_settled(
    postgres, make_event, active_tokens, api
):
    """After a failover to a node whose clock is behind, stream ids keep the old
    clock's time: such an entry looks younger than the grace period for as long as
    the clock lags. Reconcile settles it at once instead of waiting that out."""
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    k = store.EventKeys(event.event_id)
    rid = str(uuid.uuid4())
    ahead = store.now_ms(event.event_id) + 10 * 60_000  # ten minutes ahead of Redis' clock now
    store.client().decrby(k.seats, 2)
    store.client().set(k.booked(token), rid)
    store.client().xadd(
        k.outbox, {"reservationId": rid, "token": token, "seats": 2, "buyerName": "Park"}, id=f"{ahead}-0"
    )
    report = reconcile.booking_reconcile(event.event_id)
    assert report.written == [rid] and report.consistent
    assert Reservation.objects.get(reservation_id=rid).buyer_name == "Park"
    assert seats_sold(event.event_id) == ledger(event.event_id) == 2


@pytest.mark.django_db(transaction=True)
def test_recounts_during_a_rush_are_exact(postgres, gunicorn, make_event, active_tokens):
    """Reconcile recounts seats while hundreds book and some cancel: if a recount were
    off by one in-flight booking, it would 'heal' a count that was right."""
    event = make_event(total_seats=150, max_seats_per_booking=2)
    tokens = active_tokens(event, 300)
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests()})
    done = threading.Event()
    reports: list[reconcile.Report] = []

    def recount_loop() -> None:
        try:
            while not done.is_set():
                reports.append(reconcile.booking_reconcile(event.event_id))
        finally:
            connections.close_all()

    def buyer(token: str) -> None:
        resp = _post(
            base, "/api/booking", {"token": token, "seatCount": 1 + len(token) % 2, "eventId": event.event_id}
        )
        if resp.status_code == 200 and token[0] in "0123":  # a quarter cancel at once
            rid = resp.json()["data"]["reservationId"]
            requests.delete(f"{base}/api/booking/{rid}", params={"token": token}, timeout=30)

    loop = CheckedThread(target=recount_loop, name="recounts")
    loop.start()
    try:
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(buyer, tokens))
    finally:
        done.set()
        loop.join()  # a recount that raised fails the test here, with its error
    assert len(reports) >= 5
    assert [rep.healed_from for rep in reports if rep.recounted and rep.healed_from is not None] == []
    final = reconcile.booking_reconcile(event.event_id)
    assert final.consistent and final.pending == 0 and final.unreturned == 0
    assert final.seats_left + final.sold == event.total_seats
    assert seats_sold(event.event_id) == ledger(event.event_id) <= event.total_seats


@pytest.mark.django_db(transaction=True)
def test_reconcile_sets_a_seat_ledger_changed_by_hand_from_the_rows(postgres, make_event, active_tokens, api):
    event = make_event(total_seats=10)
    book(api, active_tokens(event, 1)[0], event.event_id, 3)
    Event.objects.filter(pk=event.pk).update(seats_sold=7)  # an edit by hand in the database
    report = reconcile.booking_reconcile(event.event_id)
    assert (report.ledger_fixed_from, report.sold) == (7, 3)
    assert ledger(event.event_id) == 3
    assert reconcile.booking_reconcile(event.event_id).consistent


@pytest.mark.single_redis  # a redis-server of its own (restarted, flushed, proxied)
@pytest.mark.django_db(transaction=True)
def test_the_periodic_reconcile_rebuilds_an_open_event_redis_lost(
    postgres, redis_server, make_event, active_tokens, api
):
    from booking_app.tasks import reconcile_all

    event = make_event(total_seats=10)
    closed = make_event(total_seats=5, status="CLOSED")
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 3)[1]["data"]["reservationId"]
    redis_server.crash()
    redis_server.restart()  # without its data
    assert api.join(event.event_id)[1]["error"]["code"] == "EVENT_NOT_FOUND"

    reports = reconcile_all()
    assert event.event_id in reports and closed.event_id not in reports
    assert seats_left(event.event_id) == 7
    polled = api.poll(token, event.event_id)[1]["data"]
    assert (polled["status"], polled["reservationId"]) == ("BOOKED", rid)
    assert api.join(event.event_id)[0] == 200
    assert reconcile_all()[event.event_id] is True  # consistent from then on


def test_the_database_keeps_the_seat_ledger_and_refuses_an_oversale(make_event, active_tokens, api):
    """The trigger moves the ledger with each reservation, and the CHECK refuses a row
    Postgres has no room for."""
    event = make_event(total_seats=3)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    assert ledger(event.event_id) == 2
    # A booking Redis let through from a count it had lost: Postgres says no.
    decision = services.booking_decide(services.Booking(uuid.uuid4(), event.event_id, str(uuid.uuid4()), 2))
    assert (decision.outcome, decision.seats_free) == (services.NO_ROOM, 1)
    assert ledger(event.event_id) == 2
    services.booking_cancel(reservation_id=uuid.UUID(rid))
    assert ledger(event.event_id) == 0
    Reservation.objects.filter(reservation_id=rid).update(status="CONFIRMED")  # an edit by hand
    assert ledger(event.event_id) == 2
    Reservation.objects.filter(reservation_id=rid).delete()
    assert ledger(event.event_id) == 0
