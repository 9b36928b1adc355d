"""Checkout as it runs in production: gunicorn, a real Celery worker and beat (the
beat releases holds run out), and a real SMTP server that receives the confirmation
of a paid booking."""

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
from django.core.management import call_command

from accounts_app.tests.web import Browser
from booking_app.models import Reservation
from queue_app import events
from queue_app.tests.test_beat import Stack, _purge_broker
from testsupport.booking import seats_left
from testsupport.http import join, poll, wait_until
from testsupport.mail import Mailbox
from testsupport.servers import collect_static, server_env, start_gunicorn, stop_gunicorn
from ticketing import store


@pytest.fixture(scope="module")
def server(django_db_setup, mailbox: Mailbox, tmp_path_factory) -> Iterator[str]:
    _purge_broker()
    collect_static()
    base, proc = start_gunicorn(server_env(EMAIL_URL=mailbox.url, TRUSTED_PROXIES="127.0.0.1"))
    stack = Stack(tmp_path_factory.mktemp("celery"))
    stack.env.update(EMAIL_URL=mailbox.url)
    stack.worker("checkout")
    stack.beat("beat")
    yield base
    stack.close()
    stop_gunicorn(proc)


def _status(base: str, token: str, event_id: str) -> str:
    return poll(base, token, event_id, timeout=30)["status"]


@pytest.mark.django_db(transaction=True)
def test_a_hold_unpaid_goes_to_the_next_person_who_pays_and_is_mailed(server: str, mailbox: Mailbox) -> None:
    """`init_event X --seats 2 --price 1000 --hold 5`: the first person's hold, left
    unpaid, is released within 2 s of its end by the beat, and its 2 seats go to the
    next person in line, who pays on the checkout page and is mailed the booking."""
    event_id = "checkout-e2e"
    call_command("init_event", event_id, "--seats", "2", "--price", "1000", "--hold", "5", "--batch", "1")
    try:
        first = join(server, event_id, timeout=30)
        second = join(server, event_id, timeout=30)
        wait_until("the first person is admitted", lambda: _status(server, first, event_id) == "ACTIVE")
        held = requests.post(
            f"{server}/api/booking",
            json={"token": first, "seatCount": 2, "eventId": event_id, "buyerEmail": "first@example.com"},
            timeout=30,
        ).json()["data"]
        assert (held["status"], held["amount"], held["currency"]) == ("HELD", 2000, "KRW"), held
        assert urlsplit(held["checkoutUrl"]).netloc == urlsplit(server).netloc
        assert seats_left(event_id) == 0
        # Nobody is admitted while no seat is free: the second person waits.
        time.sleep(2)
        assert _status(server, second, event_id) == "WAITING"

        row = wait_until(
            "the hold released",
            lambda: Reservation.objects.filter(
                reservation_id=held["reservationId"], status="RELEASED"
            ).first(),
            seconds=30,
        )
        assert (row.released_at - row.hold_expires_at).total_seconds() <= 2.0, (
            row.released_at,
            row.hold_expires_at,
        )
        assert row.payment_id is None
        wait_until(
            "the seats back on sale", lambda: seats_left(event_id) == 2, seconds=10
        )  # right after the row

        wait_until("the second person is admitted", lambda: _status(server, second, event_id) == "ACTIVE")
        buyer = Browser(server, "192.0.2.77")
        booked = buyer.session.post(
            f"{server}/api/booking",
            json={
                "token": second,
                "seatCount": 2,
                "eventId": event_id,
                "buyerName": "Lee Seojun",
                "buyerEmail": "seojun@example.com",
            },
            timeout=30,
        ).json()["data"]
        assert booked["status"] == "HELD", booked
        paid = buyer.post(urlsplit(booked["checkoutUrl"]).path, {"outcome": "pay"})
        assert paid.status == 302, paid.text[:500]
        page = buyer.get(paid.location)
        assert page.status == 200 and "Reservation confirmed" in page.text and "2,000 KRW" in page.text
        done = Reservation.objects.get(reservation_id=booked["reservationId"])
        assert done.status == "CONFIRMED" and done.payment_id
        body = mailbox.wait_for("seojun@example.com").get_body(("plain",)).get_content()
        assert booked["reservationId"] in body and "2,000 KRW" in body
        assert seats_left(event_id) == 0
    finally:
        events.event_wipe(event_id)
        store.client().srem(store.EVENTS_KEY, event_id)
