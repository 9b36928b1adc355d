"""The confirmation email: sent after the booking committed, on a Celery worker, in
the buyer's language, with a signed link to the booking's page, where the buyer
sees and cancels it. A mail server that is away loses no booking, and the pages
say the mail was not sent."""

import re
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
from django.core import mail as outbox
from django.test import Client

from accounts_app.tests.web import Browser
from booking_app import mail, reconcile
from booking_app.models import Reservation
from booking_app.tests.test_pending import NOWHERE
from queue_app import services as queue
from queue_app import tokens
from queue_app.tests.test_beat import Stack, _purge_broker
from testsupport.booking import seats_left
from testsupport.mail import Mailbox
from testsupport.servers import collect_static, server_env, start_gunicorn, stop_gunicorn
from ticketing.servers import free_port

LINK = re.compile(r"https?://\S+/bookings/\S+/")


def _book(api, event, active_tokens, **headers) -> uuid.UUID:
    [token] = active_tokens(event, 1)
    fields = {"token": token, "seatCount": 2, "eventId": event.event_id}
    status, body = api.call(
        "post", "/api/booking", {**fields, "buyerName": "Jiwoo", "buyerEmail": "jiwoo@example.com"}, **headers
    )
    assert status == 200, body
    return uuid.UUID(body["data"]["reservationId"])


@pytest.mark.django_db(transaction=True)
def test_a_korean_booking_is_mailed_in_korean(settings, eager, make_event, active_tokens, api):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    event = make_event(name="KTX 추석 08:00", total_seats=10)
    rid = _book(api, event, active_tokens, HTTP_ACCEPT_LANGUAGE="ko")

    [sent] = outbox.outbox
    assert sent.to == ["jiwoo@example.com"]
    assert "예매" in sent.subject and "KTX 추석 08:00" in sent.subject
    assert str(rid) in sent.body and "좌석 수: 2" in sent.body and "예매를 확인하거나 취소하려면" in sent.body
    link = LINK.search(sent.body).group(0)
    assert mail.reservation_id_of(urlsplit(link).path.split("/")[2]) == rid
    assert Reservation.objects.get(reservation_id=rid).mail_status == "SENT"


@pytest.mark.django_db(transaction=True)
def test_a_mail_server_away_loses_no_booking_and_the_page_says_so(
    settings, eager, make_event, active_tokens, api
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", free_port(), 2
    settings.CONFIRMATION_MAIL_RETRIES = 2
    event = make_event(total_seats=10)
    rid = _book(api, event, active_tokens)

    row = Reservation.objects.get(reservation_id=rid)
    assert (row.status, row.mail_status) == ("CONFIRMED", "FAILED")
    page = Client().get(f"/bookings/{mail.link_token(rid)}/").content.decode()
    assert "We could not send a confirmation to jiwoo@example.com." in page
    assert "A confirmation is" not in page


@pytest.mark.django_db(transaction=True)
def test_a_mail_server_that_turns_the_mail_away_gets_it_again(
    settings, eager, mailbox, make_event, active_tokens, api
):
    """A busy mail server's "try again later" (451) is tried again: the mail arrives
    once, and the pages say it was sent."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", mailbox.controller.port
    mailbox.refuse, mailbox.refused = 2, 0
    event = make_event(total_seats=10)
    rid = _book(api, event, active_tokens)

    assert mailbox.refused == 2
    assert mailbox.wait_for("jiwoo@example.com")
    assert [m for to, m in mailbox.messages if str(rid) in m.get_body(("plain",)).get_content()]
    assert Reservation.objects.get(reservation_id=rid).mail_status == "SENT"


@pytest.mark.django_db(transaction=True)
def test_the_booking_page_shows_and_cancels_the_booking_by_its_signed_link(make_event, active_tokens, api):
    event = make_event(total_seats=10)
    rid = _book(api, event, active_tokens)
    browser = Client(enforce_csrf_checks=True)
    assert browser.get(f"/bookings/{mail.link_token(uuid.uuid4())[:-2]}xx/").status_code == 404
    path = f"/bookings/{mail.link_token(rid)}/"
    page = browser.get(path)
    assert page.status_code == 200 and str(rid) in page.content.decode()
    assert browser.post(path).status_code == 403  # no CSRF token: nothing cancelled
    assert Reservation.objects.get(reservation_id=rid).status == "CONFIRMED"

    cancelled = browser.post(path, {"csrfmiddlewaretoken": page.cookies["csrftoken"].value})
    assert "Your booking is cancelled; its seats are back on sale." in cancelled.content.decode()
    assert Reservation.objects.get(reservation_id=rid).status == "CANCELLED"
    assert seats_left(event.event_id) == 10
    again = browser.post(path, {"csrfmiddlewaretoken": page.cookies["csrftoken"].value})
    assert again.status_code == 200 and "Reservation cancelled" in again.content.decode()


# --- On the production server, with a real worker and a real SMTP server ---------


@pytest.fixture(scope="module")
def server(django_db_setup, mailbox: Mailbox, tmp_path_factory) -> Iterator[str]:
    _purge_broker()
    collect_static()
    base, proc = start_gunicorn(server_env(EMAIL_URL=mailbox.url, TRUSTED_PROXIES="127.0.0.1"))
    stack = Stack(tmp_path_factory.mktemp("worker"))
    # A pending booking is settled, and its mail tried again, 2 s after the request.
    stack.env.update(EMAIL_URL=mailbox.url, BOOKING_RECONCILE_GRACE_SEC="2")
    stack.worker("mail")
    yield base
    stack.close()
    stop_gunicorn(proc)


@pytest.mark.django_db(transaction=True)
def test_the_mail_arrives_and_its_link_shows_and_cancels_the_booking(
    server: str, mailbox: Mailbox, make_event, active_tokens
) -> None:
    event = make_event(name="Seoul Phil", total_seats=10)
    [token] = active_tokens(event, 1)
    buyer = Browser(server, "192.0.2.41")
    answer = buyer.session.post(
        f"{server}/api/booking",
        json={"token": token, "seatCount": 2, "eventId": event.event_id, "buyerEmail": "minji@example.com"},
        headers={"Accept-Language": "ko", "X-Forwarded-For": buyer.address},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    rid = answer.json()["data"]["reservationId"]

    message = mailbox.wait_for("minji@example.com")
    body = message.get_body(("plain",)).get_content()
    assert rid in body and "좌석 수: 2" in body and "Seoul Phil" in message["Subject"]
    link = urlsplit(LINK.search(body).group(0))
    assert link.netloc == urlsplit(server).netloc  # the site as the buyer reached it

    deadline = time.monotonic() + 10  # the worker records the mail once the server took it
    while Reservation.objects.get(reservation_id=rid).mail_status != "SENT":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    reader = Browser(server, "192.0.2.42")  # wherever the mail is read
    page = reader.get(link.path)
    assert (
        page.status == 200
        and rid in page.text
        and "A confirmation was sent to minji@example.com." in page.text
    )
    assert reader.post(link.path, {}).status == 200
    assert Reservation.objects.get(reservation_id=rid).status == "CANCELLED"
    assert queue.queue_poll(event_id=event.event_id, token=tokens.parse_token(token)).status != "BOOKED"


@pytest.mark.django_db(transaction=True)
def test_a_pending_booking_is_mailed_once_it_is_decided(
    server: str, mailbox: Mailbox, gunicorn, make_event, active_tokens, settings
) -> None:
    """Postgres away: the booking is pending, and no row exists to mail from. Once
    reconcile has decided it, the mail that waited for the decision on the worker
    goes out, in the buyer's language, with links to the site as they reached it."""
    event = make_event(name="Busan Jazz", total_seats=10)
    [token] = active_tokens(event, 1)
    away, _ = gunicorn(
        server_env(DATABASE_URL=NOWHERE, EMAIL_URL=mailbox.url, RABBITMQ_URL=settings.BROKER_URL)
    )
    answer = requests.post(
        f"{away}/api/booking",
        json={"token": token, "seatCount": 1, "eventId": event.event_id, "buyerEmail": "seojun@example.com"},
        headers={"Accept-Language": "ko"},
        timeout=60,
    )
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "BOOKING_PENDING"), answer.text
    rid = answer.json()["error"]["reservationId"]
    time.sleep(3)  # the mail's task has found no row to mail from, and waits
    assert not [m for to, m in mailbox.messages if "seojun@example.com" in to]

    settings.BOOKING_RECONCILE_GRACE_SEC = 0
    assert reconcile.booking_reconcile(event.event_id).written == [rid]
    message = mailbox.wait_for("seojun@example.com", seconds=30)
    body = message.get_body(("plain",)).get_content()
    assert rid in body and "좌석 수: 1" in body
    assert urlsplit(LINK.search(body).group(0)).netloc == urlsplit(away).netloc
    deadline = time.monotonic() + 10  # the worker records it once the server took it
    while (row := Reservation.objects.get(reservation_id=rid)).mail_status != "SENT":
        assert time.monotonic() < deadline, row.mail_status
        time.sleep(0.1)
    assert row.status == "CONFIRMED"
