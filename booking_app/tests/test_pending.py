"""A person told BOOKING_PENDING always learns the outcome: the booking is decided
even when Redis loses it before Postgres does, and their polls say NOT_SAVED, with
their window kept to book again."""

import time

import pytest
import requests
from django.conf import settings

from booking_app import reconcile
from booking_app.models import Reservation
from queue_app.models import Event
from queue_app.tests.test_beat import Stack, _purge_broker
from testsupport.booking import seats_left
from testsupport.servers import database_url_of_tests

NOWHERE = "postgres://postgres@127.0.0.1:1/nowhere"


def _poll(base: str, token: str, event_id: str) -> dict:
    answer = requests.get(f"{base}/api/status/poll", params={"token": token, "eventId": event_id}, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def _book(base: str, token: str, event_id: str, seats: int = 2) -> requests.Response:
    body = {"token": token, "seatCount": seats, "eventId": event_id}
    return requests.post(f"{base}/api/booking", json=body, timeout=60)


def _pending(base: str, token: str, event_id: str) -> str:
    answer = _book(base, token, event_id)
    body = answer.json()
    assert (answer.status_code, body["error"]["code"]) == (503, "BOOKING_PENDING"), body
    return body["error"]["reservationId"]


@pytest.mark.single_redis  # a redis-server of its own, restarted from a snapshot
@pytest.mark.django_db(transaction=True)
def test_a_pending_booking_that_redis_lost_is_decided_not_saved_and_the_person_books_again(
    redis_server, gunicorn, make_event, active_tokens, tmp_path
):
    """Postgres away, so the booking is pending; then Redis comes back from a snapshot
    taken before it: its outbox entry and the token's mark are gone, and reconcile
    can never see it. The follow-up the request left with the broker (which is not
    that Redis) decides it on a real Celery worker."""
    _purge_broker()
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    before = redis_server.snapshot()
    # The broker is the run's (RabbitMQ, or the shared Redis): not the Redis that is lost.
    broker = {"RABBITMQ_URL": settings.BROKER_URL, "BOOKING_RECONCILE_GRACE_SEC": "2"}
    away, _ = gunicorn({"DATABASE_URL": NOWHERE, **broker})
    rid = _pending(away, token, event.event_id)
    assert _poll(away, token, event.event_id)["status"] == "BOOKED"

    redis_server.crash()
    redis_server.restart(before)
    assert _poll(away, token, event.event_id)["status"] == "ACTIVE"  # as if it never booked
    assert reconcile.booking_reconcile(event.event_id).refused == []  # nothing for reconcile to see

    stack = Stack(tmp_path)
    stack.env.update(broker)
    try:
        stack.worker("worker")
        deadline = time.monotonic() + 60
        while (polled := _poll(away, token, event.event_id))["status"] != "NOT_SAVED":
            assert time.monotonic() < deadline, (polled, stack.log("worker")[-3000:])
            time.sleep(0.2)
    finally:
        stack.close()
    assert polled["reservationId"] == rid
    assert polled["activeExpiresAt"] > time.time() * 1000  # the window is still theirs
    assert Reservation.objects.get(reservation_id=rid).status == Reservation.Status.VOID

    # Postgres back: the same token books, and is BOOKED with its new reservation.
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests(), **broker})
    answer = _book(base, token, event.event_id)
    assert answer.status_code == 200, answer.text
    booked = answer.json()["data"]["reservationId"]
    assert booked != rid
    assert (
        _poll(base, token, event.event_id)["status"],
        _poll(base, token, event.event_id)["reservationId"],
    ) == (
        "BOOKED",
        booked,
    )
    assert Event.objects.get(pk=event.pk).seats_sold == 2 and seats_left(event.event_id) == 8


@pytest.mark.django_db(transaction=True)
def test_a_pending_booking_postgres_later_refuses_polls_not_saved(
    postgres, gunicorn, make_event, active_tokens, settings
):
    """The outbox still holds it, and reconcile decides it: refused (Postgres has no
    room for it now). The person was told "pending", so their polls say NOT_SAVED
    rather than silently ACTIVE again."""
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    away, _ = gunicorn({"DATABASE_URL": NOWHERE})
    rid = _pending(away, token, event.event_id)
    Event.objects.filter(pk=event.pk).update(total_seats=1)  # an operator's change meanwhile

    settings.BOOKING_RECONCILE_GRACE_SEC = 0
    report = reconcile.booking_reconcile(event.event_id)
    assert report.refused == [rid]
    polled = _poll(away, token, event.event_id)
    assert (polled["status"], polled["reservationId"]) == ("NOT_SAVED", rid)
    assert polled["activeExpiresAt"] > time.time() * 1000
    assert Reservation.objects.get(reservation_id=rid).status == Reservation.Status.VOID
