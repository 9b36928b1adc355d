"""Checkout in Chromium against the production server: a priced event's booking
form, the checkout page with its countdown, Pay and Decline, and the booking's page
after each, on a desktop in English and a phone in Korean. A console error or an
uncaught exception fails the test (ticketing/tests/browser.py)."""

import re

import pytest

from booking_app import checkout
from booking_app.models import Reservation
from testsupport.booking import book, seats_left
from testsupport.line import admit_all
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXT = {
    "en": {
        "hold": "Hold seats and pay",
        "price": "55,000 KRW a seat",
        "held_for": "Your seats are held for:",
        "pay": "Pay",
        "decline": "Decline",
        "confirmed": "Reservation confirmed",
        "released": "Seats released",
        "total": "110,000 KRW",
    },
    "ko": {
        "hold": "좌석 선점 후 결제",
        "price": "좌석당 55,000 KRW",
        "held_for": "좌석 선점 남은 시간:",
        "pay": "결제하기",
        "decline": "거절",
        "confirmed": "예매가 완료되었습니다",
        "released": "좌석 선점 해제됨",
        "total": "110,000 KRW",
    },
}


@pytest.fixture(params=[("en", 1280, 800), ("ko", 390, 844)], ids=["desktop-en", "phone-ko"])
def view(request, browser, production_server, console, make_event):
    lang, width, height = request.param
    with opened(browser, console, production_server, lang, (width, height)) as page:
        yield page, TEXT[lang], lang


def _to_checkout(page, text: dict, event) -> None:
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
    assert text["price"] in page.locator("#price").inner_text()
    page.select_option("#id_seat_count", "2")
    page.fill("#id_buyer_name", "Kim Minji")
    page.fill("#id_buyer_email", "minji@example.com")
    page.get_by_role("button", name=text["hold"]).click()
    page.wait_for_url(re.compile(r"/checkout/$"))
    assert text["held_for"] in page.locator(".countdown").inner_text()
    assert re.fullmatch(r"\d+:\d\d", page.locator("#countdown").inner_text())
    assert page.locator("#amount").inner_text() == text["total"]


def test_paying_on_the_checkout_page_confirms_the_booking(view, make_event):
    page, text, lang = view
    event = make_event(total_seats=10, price=55_000, currency="KRW", hold_seconds=600)
    _to_checkout(page, text, event)
    assert seats_left(event.event_id) == 8
    shot(page, f"checkout-{lang}")
    page.get_by_role("button", name=text["pay"], exact=True).click()
    page.get_by_role("heading", name=text["confirmed"]).wait_for()
    assert text["total"] in page.locator("#amount").inner_text()
    shot(page, f"checkout-paid-{lang}")
    row = Reservation.objects.get(event=event)
    assert row.status == "CONFIRMED" and row.payment_id


def test_declining_on_the_checkout_page_releases_the_seats(view, make_event):
    page, text, lang = view
    event = make_event(total_seats=10, price=55_000, currency="KRW", hold_seconds=600)
    _to_checkout(page, text, event)
    page.get_by_role("button", name=text["decline"]).click()
    page.get_by_role("heading", name=text["released"]).wait_for()
    assert page.locator("#released").is_visible()
    shot(page, f"checkout-released-{lang}")
    assert Reservation.objects.get(event=event).status == "RELEASED"
    assert seats_left(event.event_id) == 10


NO_SEAT_FREE = {"en": "No seat free right now", "ko": "지금은 빈 좌석이 없습니다"}
ON_HOLD = {
    "en": "2 seats are being paid for and may come back: stay on this page.",
    "ko": "2석이 결제 진행 중이라 다시 나올 수 있습니다. 이 화면에 머물러 주세요.",
}


def test_seats_held_by_a_payer_are_said_to_come_back_and_do(view, make_event, api):
    """All seats held by someone paying: the next person, admitted, is told the
    seats may come back and stays; released, they go on to book them."""
    page, text, lang = view
    event = make_event(total_seats=2, price=55_000, currency="KRW", hold_seconds=600, admit_per_second=1)
    payer = api.token(event.event_id)
    admit_all(event.event_id)
    status, body = book(api, payer, event.event_id, 2)
    assert status == 200 and body["data"]["status"] == "HELD", body
    checkout.holds_note()  # as the beat's sweep does every second
    page.goto(f"/events/{event.event_id}/")
    page.locator("#on-hold").wait_for()
    assert page.locator("#on-hold").inner_text() == ON_HOLD[lang]
    assert page.locator("#soldout-heading").inner_text() == NO_SEAT_FREE[lang]
    shot(page, f"on-hold-{lang}")
    checkout.booking_end(reservation_id=body["data"]["reservationId"])  # the payer gives up
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
