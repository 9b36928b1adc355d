"""A paid hold's confirmation is mailed once, by whoever confirmed it: the buyer's
checkout request (links to the site as the buyer reached it, in their language),
or, when its answer was lost, the sweep or a provider's notification (links to
SITE_URL, in the default language). A real SMTP server receives it
(testsupport/mail.py); tasks run where they are queued."""

import datetime
import re
import threading
import uuid
from urllib.parse import urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from booking_app import checkout, mail, payments
from booking_app.models import Reservation
from testsupport import CheckedThread
from testsupport.booking import checkout_path, hold, pay

pytestmark = pytest.mark.django_db(transaction=True)

SITE = "https://tickets.example.test"
LINK = re.compile(r"https?://\S+/bookings/\S+/")


@pytest.fixture
def smtp(settings, mailbox, eager):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", mailbox.controller.port
    settings.SITE_URL = SITE
    return mailbox


def held(api, event, active_tokens) -> tuple[dict, str]:
    """A hold of a buyer of their own (the mailbox lasts the module): its data, their address."""
    address = f"buyer-{uuid.uuid4().hex[:8]}@example.com"
    [token] = active_tokens(event, 1)
    return hold(api, event, token, buyerName="Kim Minji", buyerEmail=address), address


def answer_lost(data: dict) -> payments.Charge:
    """The provider took the payment; its answer never reached the buyer's request."""
    rid = data["reservationId"]
    Reservation.objects.filter(reservation_id=rid).update(paying_since=timezone.now())
    return payments.TestProvider().charge(rid, data["amount"], data["currency"], reply={"outcome": "pay"})


def mails_to(mailbox, address: str) -> list:
    return [m for to, m in mailbox.messages if address in to]


def link_in(message) -> str:
    return LINK.search(message.get_body(("plain",)).get_content()).group(0)


def test_a_hold_confirmed_by_the_sweep_is_mailed_once_with_links_to_the_site(
    smtp, api, priced, active_tokens
):
    data, address = held(api, priced(), active_tokens)
    charge = answer_lost(data)
    stale = Reservation.objects.get(reservation_id=data["reservationId"])
    Reservation.objects.filter(pk=stale.pk).update(hold_expires_at=timezone.now())
    checkout.holds_expire()
    link = link_in(smtp.wait_for(address))
    assert link.startswith(f"{SITE}/bookings/")
    assert mail.reservation_id_of(urlsplit(link).path.split("/")[2]) == stale.reservation_id
    assert Reservation.objects.get(pk=stale.pk).mail_status == "SENT"
    # The buyer's request settles the same charge after the sweep: nothing more is mailed.
    assert (
        checkout.settle_charge(stale, charge, site="http://buyer.test", language="ko").status == "CONFIRMED"
    )
    assert len(mails_to(smtp, address)) == 1


def test_a_payment_confirmed_by_its_request_is_mailed_in_its_language(smtp, api, priced, active_tokens):
    data, address = held(api, priced(), active_tokens)
    pay(checkout_path(data), HTTP_ACCEPT_LANGUAGE="ko")
    message = smtp.wait_for(address)
    assert link_in(message).startswith("http://testserver/bookings/")  # as the buyer reached the site
    assert "예매" in message["Subject"]
    assert len(mails_to(smtp, address)) == 1


def test_callers_racing_to_confirm_one_charge_mail_it_once(smtp, api, priced, active_tokens):
    data, address = held(api, priced(), active_tokens)
    charge = answer_lost(data)
    stale = Reservation.objects.get(reservation_id=data["reservationId"])
    go = threading.Barrier(4)

    def settle() -> None:
        try:
            go.wait()
            assert checkout.settle_charge(stale, charge).status == "CONFIRMED"
        finally:
            connection.close()

    threads = [CheckedThread(target=settle) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    smtp.wait_for(address)
    assert len(mails_to(smtp, address)) == 1


def test_a_toss_notification_that_confirms_a_hold_mails_its_buyer(smtp, toss, api, priced, active_tokens):
    data, address = held(api, priced(), active_tokens)
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    toss.knobs.lose_answer = True
    back = Client().get(f"{checkout_path(data)}?paymentKey={key}&orderId={rid}&amount=110000")
    assert back.status_code == 503  # taken at Toss, the answer lost: nothing mailed yet
    assert not mails_to(smtp, address)
    changed = {"eventType": "PAYMENT_STATUS_CHANGED", "data": {"paymentKey": key}}
    for _ in range(2):  # Toss may say it twice
        sent = Client().post("/payments/toss/webhook", changed, content_type="application/json")
        assert sent.json()["data"]["done"] == "CONFIRMED"
    assert link_in(smtp.wait_for(address)).startswith(f"{SITE}/bookings/")
    assert len(mails_to(smtp, address)) == 1


def test_a_late_payment_confirmed_by_a_notification_is_mailed(smtp, toss, api, make_event, active_tokens):
    event = make_event(total_seats=10, price=55_000, currency="KRW", late_confirmation=True)
    data, address = held(api, event, active_tokens)
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    toss.knobs.lose_answer = True
    Client().get(f"{checkout_path(data)}?paymentKey={key}&orderId={rid}&amount=110000")  # taken, unanswered
    Reservation.objects.filter(reservation_id=rid).update(
        hold_expires_at=timezone.now() - datetime.timedelta(seconds=1), paying_since=None
    )
    checkout.holds_expire()  # the sweep, not knowing of the payment, releases the seats
    assert Reservation.objects.get(reservation_id=rid).status == "RELEASED"
    changed = {"eventType": "PAYMENT_STATUS_CHANGED", "data": {"paymentKey": key}}
    sent = Client().post("/payments/toss/webhook", changed, content_type="application/json")
    assert sent.json()["data"]["done"] == "CONFIRMED"
    assert toss.payments[key]["status"] == "DONE" and not toss.calls("/cancel")
    assert link_in(smtp.wait_for(address)).startswith(f"{SITE}/bookings/")


def test_with_no_site_url_a_sweeps_confirmation_is_not_mailed_and_the_page_says_so(
    smtp, settings, api, priced, active_tokens
):
    settings.SITE_URL = ""  # a production server not told its address
    data, address = held(api, priced(), active_tokens)
    answer_lost(data)
    Reservation.objects.filter(reservation_id=data["reservationId"]).update(hold_expires_at=timezone.now())
    checkout.holds_expire()
    done = Reservation.objects.get(reservation_id=data["reservationId"])
    assert (done.status, done.mail_status) == ("CONFIRMED", "FAILED")
    page = Client().get(f"/bookings/{mail.link_token(done.reservation_id)}/").content.decode()
    assert f"We could not send a confirmation to {address}." in page
    assert not mails_to(smtp, address)
