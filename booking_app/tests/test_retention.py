"""Retention: a closed event's Redis data goes after its grace period (or by hand);
what Postgres holds stays, and no booking is lost on the way."""

import io
import random
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from booking_app.models import Reservation
from booking_app.reconcile import booking_reconcile
from booking_app.retention import PurgeRefused, event_purge, events_purge
from booking_app.services import Booking, reserve_call
from queue_app import events
from queue_app import services as queue
from queue_app.models import Event
from testsupport.booking import book, seats_left
from ticketing import store


@pytest.fixture(autouse=True)
def _settle_at_once(settings) -> None:
    """Reconcile decides outbox entries of any age (in production, those older than a
    grace period: a purge runs long after the last booking)."""
    settings.BOOKING_RECONCILE_GRACE_SEC = 0


def redis_keys(event_id: str) -> list[bytes]:
    return list(store.scan(store.EventKeys(event_id).pattern()))


def a_sale(event, active_tokens, api) -> tuple[str, uuid.UUID]:
    """Bookings, people still waiting, and one booking stranded in the outbox (its
    process died after the Redis step). Returns a booked token and the stranded id."""
    tokens = active_tokens(event, 3)
    book(api, tokens[0], event.event_id, 2)
    for _ in range(4):
        queue.queue_join(event_id=event.event_id)
    stranded = uuid.uuid4()
    reply = store.run(reserve_call(Booking(stranded, event.event_id, tokens[1], 1)))
    assert reply[0] == b"OK"
    return tokens[0], stranded


def close(event: Event, *, ago: timedelta = timedelta(0)) -> None:
    event.status = Event.Status.CLOSED
    event.save(update_fields=["status", "updated_at"])
    events.event_publish(event)
    Event.objects.filter(pk=event.pk).update(closed_at=timezone.now() - ago)


def test_a_closed_event_is_purged_after_its_grace_and_postgres_keeps_everything(
    postgres, make_event, active_tokens, api, settings
):
    settings.EVENT_PURGE_AFTER_SECONDS = 3600
    event = make_event(total_seats=10)
    token, stranded = a_sale(event, active_tokens, api)
    close(event, ago=timedelta(seconds=3601))
    assert redis_keys(event.event_id)

    assert event.event_id in events_purge()
    assert redis_keys(event.event_id) == []  # no per-token data outlives the event
    assert not store.client().sismember(store.EVENTS_KEY, event.event_id)
    # The stranded booking was decided before the outbox went; every row stays.
    assert Reservation.objects.get(reservation_id=stranded).status == "CONFIRMED"
    assert Reservation.objects.filter(event_id=event.event_id, status="CONFIRMED").count() == 2
    assert Event.objects.get(pk=event.pk).seats_sold == 3
    status, body = api.poll(token, event.event_id)
    assert (status, body["error"]["code"]) == (404, "EVENT_NOT_FOUND")
    # Nothing rebuilds it, and the next run has nothing to do.
    from booking_app.reconcile import events_reconcile

    events_reconcile()
    assert redis_keys(event.event_id) == [] and events_purge() == {}


def test_events_within_their_grace_or_not_closed_are_kept(postgres, make_event, api, settings):
    settings.EVENT_PURGE_AFTER_SECONDS = 3600
    recent, running, paused = make_event(), make_event(), make_event(status="PAUSED")
    for event in (recent, running, paused):
        api.token(event.event_id)
    close(recent, ago=timedelta(seconds=3500))
    assert events_purge() == {}
    for event in (recent, running, paused):
        assert redis_keys(event.event_id)


def test_closing_records_when_and_reopening_forgets_it(postgres, make_event):
    event = make_event()
    assert event.closed_at is None
    close(event)
    event.refresh_from_db()
    assert event.closed_at is not None
    event.status = Event.Status.OPEN
    event.save()
    event.refresh_from_db()
    assert event.closed_at is None


def test_purge_event_by_hand(postgres, make_event, active_tokens, api, capsys):
    event = make_event(total_seats=10)
    a_sale(event, active_tokens, api)
    with pytest.raises(CommandError, match="only a CLOSED event"):
        call_command("purge_event", event.event_id)
    assert redis_keys(event.event_id)
    close(event)  # just now: by hand, no grace
    call_command("purge_event", event.event_id)
    assert "Purged" in capsys.readouterr().out
    assert redis_keys(event.event_id) == []
    with pytest.raises(CommandError):
        call_command("purge_event", "no-such-event")


def test_an_undecided_outbox_is_never_purged(postgres, make_event, active_tokens, api):
    """While another reconcile holds the event (or Postgres is away), the outbox's
    bookings are not decided: the purge waits, and keeps everything."""
    event = make_event(total_seats=10)
    _, stranded = a_sale(event, active_tokens, api)
    close(event, ago=timedelta(days=2))
    k = store.EventKeys(event.event_id)
    store.client().set(k.reconciling, "another", px=60_000)
    with pytest.raises(PurgeRefused, match="not decided"):
        event_purge(event.event_id)
    assert store.client().xlen(k.outbox) == 1 and store.client().exists(k.meta)
    store.client().delete(k.reconciling)
    event_purge(event.event_id)
    assert Reservation.objects.get(reservation_id=stranded).status == "CONFIRMED"
    assert redis_keys(event.event_id) == []


def _purge_and_reopen_at_once(event_id: str) -> str:
    """`purge_event` and `event_status OPEN` started together, the reopen anywhere in
    the purge's course. Returns which one won."""
    from testsupport import CheckedThread

    start = threading.Barrier(2)
    purged = []

    def purge() -> None:
        start.wait()
        try:
            purged.append(event_purge(event_id))
        except PurgeRefused:
            purged.append(None)
        finally:
            connection.close()  # (back to the pool: a thread's connection is its own)

    def reopen(delay: float = random.random() * 0.03) -> None:
        start.wait()
        time.sleep(delay)
        try:
            call_command("event_status", event_id, "OPEN", stdout=io.StringIO())
        finally:
            connection.close()

    threads = [CheckedThread(target=purge), CheckedThread(target=reopen)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return "purged first" if purged[0] is not None else "reopened first"


@pytest.mark.django_db(transaction=True)
def test_a_purge_racing_a_reopen_never_wipes_the_reopened_event(make_event, active_tokens, api):
    """Twenty races: whichever wins, an event that Postgres says is OPEN is live in
    Redis, counts its seats right and takes joins. (Each event holds 5,000 booking
    marks, as a sale leaves them, so that its wipe takes a while to run through.)"""
    outcomes = set()
    for _ in range(20):
        event = make_event(total_seats=10)
        a_sale(event, active_tokens, api)
        marks = store.client().pipeline(transaction=False)
        for _ in range(5_000):
            marks.set(store.EventKeys(event.event_id).booked(str(uuid.uuid4())), str(uuid.uuid4()))
        marks.execute()
        close(event, ago=timedelta(days=2))
        outcomes.add(_purge_and_reopen_at_once(event.event_id))
        assert Event.objects.get(pk=event.pk).status == Event.Status.OPEN
        assert store.client().hget(store.EventKeys(event.event_id).meta, "status") == b"OPEN"
        booking_reconcile(event.event_id)  # (a reopen that came first left the outbox to it)
        assert seats_left(event.event_id) == 10 - Event.objects.get(pk=event.pk).seats_sold == 7
        assert queue.queue_join(event_id=event.event_id).token
    print(sorted(outcomes))  # (which one wins is the scheduler's)


def test_a_cancellation_after_a_purge_leaves_no_key_and_a_reopen_sells_every_seat(
    postgres, make_event, active_tokens, api
):
    """A purged event's cancellation writes nothing to Redis (a seats-left key it
    left would be kept by the reopen's publish and undersell the event); once the
    event is reopened, reconcile returns the cancelled seats exactly once."""
    from booking_app.services import booking_cancel

    event = make_event(total_seats=10)
    token, _ = a_sale(event, active_tokens, api)
    booked = Reservation.objects.get(event_id=event.event_id, token=token)
    close(event, ago=timedelta(days=2))
    event_purge(event.event_id)
    booking_cancel(reservation_id=booked.reservation_id)
    assert redis_keys(event.event_id) == []
    booked.refresh_from_db()
    assert (booked.status, booked.seats_returned_at) == ("CANCELLED", None)  # left for the reopen
    call_command("event_status", event.event_id, "OPEN", stdout=io.StringIO())
    sold = Event.objects.get(pk=event.pk).seats_sold
    assert sold == 1  # the stranded booking's seat; the cancelled two are free in Postgres
    assert seats_left(event.event_id) == 10 - sold
    # The purge took the booked tokens' marks with the line: reconcile puts them back.
    assert booking_reconcile(event.event_id).marks_restored == 1
    assert seats_left(event.event_id) == 10 - sold
    assert booking_reconcile(event.event_id).consistent
    booked.refresh_from_db()
    assert booked.seats_returned_at is not None
