"""Toss Payments: the real client code (booking_app/payments.py: TossProvider)
against a local stand-in of its API (testsupport/toss.py) that checks the secret
key, keeps the payments' state and can decline, answer late or lose an answer."""

import base64
import datetime
from urllib.parse import urlencode, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from booking_app import checkout
from booking_app.models import Reservation
from testsupport.booking import book, seats_left

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def held(api, make_event, active_tokens):
    """A booking of two seats at 55,000 KRW each, held: its data and its token."""
    event = make_event(total_seats=10, price=55_000, currency="KRW", hold_seconds=600)
    [token] = active_tokens(event, 1)
    status, body = book(api, token, event.event_id, 2, buyerEmail="minji@example.com")
    assert status == 200 and body["data"]["status"] == "HELD", body
    return event, body["data"], token


def back_from_the_widget(data: dict, **query) -> "object":
    """The buyer's browser, sent back by Toss' widget to the success URL."""
    return Client().get(urlsplit(data["checkoutUrl"]).path + "?" + urlencode(query))


def test_the_checkout_page_shows_the_widget_for_this_order(toss, held):
    event, data, _ = held
    page = Client().get(urlsplit(data["checkoutUrl"]).path).content.decode()
    assert "https://js.tosspayments.com/v2/standard" in page and 'id="toss-widget"' in page
    assert f'"orderId": "{data["reservationId"]}"' in page and '"amount": 110000' in page
    assert '"clientKey": "test_ck_standin"' in page and "test_sk" not in page  # the secret stays here


def test_a_payment_confirmed_at_toss_confirms_the_booking_once(toss, held):
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    answer = back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000)
    assert answer.status_code == 302
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.status, row.payment_id) == ("CONFIRMED", key)
    [(method, path, headers, body)] = toss.calls("/confirm")
    assert body == {"paymentKey": key, "orderId": rid, "amount": 110_000}
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"test_sk_standin:").decode()
    assert headers["Idempotency-Key"] == f"confirm-{rid}"
    # The success URL opened again (a reload): nothing more is confirmed.
    assert back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000).status_code == 302
    assert len(toss.calls("/confirm")) == 1


def test_an_amount_changed_on_the_way_back_is_never_confirmed(toss, held):
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 100)
    back_from_the_widget(data, paymentKey=key, orderId=rid, amount=100)
    assert not toss.calls("/confirm")  # refused here, before Toss is asked
    assert Reservation.objects.get(reservation_id=rid).status == "RELEASED"
    assert toss.payments[key]["status"] == "READY"  # nothing taken; it lapses at Toss


def test_a_declined_card_releases_the_seats(toss, held):
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    toss.knobs.decline = "REJECT_CARD_PAYMENT"
    back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000)
    assert Reservation.objects.get(reservation_id=rid).status == "RELEASED"
    assert seats_left(event.event_id) == 10


def test_a_wrong_secret_key_keeps_the_hold_and_says_try_again(toss, held, settings):
    event, data, _ = held
    rid = data["reservationId"]
    settings.TOSS_SECRET_KEY = "test_sk_wrong"
    answer = back_from_the_widget(data, paymentKey=toss.authorize(rid, 110_000), orderId=rid, amount=110_000)
    assert answer.status_code == 503
    assert Reservation.objects.get(reservation_id=rid).status == "HELD"
    assert [c[3] for c in toss.calls("/confirm")] and toss.payments  # asked, and refused (401)


def test_a_confirm_whose_answer_was_lost_is_found_by_the_sweep(toss, held):
    """Toss took the money, the answer never came back: the buyer is told to try
    again, and when the hold's time is up the sweep finds the payment at Toss and
    confirms the booking rather than releasing the seats and keeping the money."""
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    toss.knobs.lose_answer = True
    answer = back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000)
    assert answer.status_code == 503
    assert toss.payments[key]["status"] == "DONE"  # the fault fired: taken, unanswered
    assert Reservation.objects.get(reservation_id=rid).status == "HELD"
    Reservation.objects.filter(reservation_id=rid).update(hold_expires_at=timezone.now())
    assert checkout.holds_expire() == 1
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.status, row.payment_id) == ("CONFIRMED", key)


def test_a_late_answer_past_the_timeout_is_settled_the_same_way(toss, held):
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    toss.knobs.delay = 1.5  # past PAYMENTS_TIMEOUT_SEC (1 s)
    assert back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000).status_code == 503
    toss.knobs.delay = 0
    Reservation.objects.filter(reservation_id=rid).update(hold_expires_at=timezone.now())
    assert checkout.holds_expire() == 1
    assert Reservation.objects.get(reservation_id=rid).status == "CONFIRMED"


def test_coming_back_after_the_hold_ended_takes_no_money(toss, held):
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    Reservation.objects.filter(reservation_id=rid).update(
        hold_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert checkout.holds_expire() == 1  # released: nobody had started paying
    back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000)
    assert not toss.calls("/confirm") and toss.payments[key]["status"] == "READY"
    assert Reservation.objects.get(reservation_id=rid).status == "RELEASED"


def test_a_paid_booking_cancelled_is_refunded_at_toss_once(toss, held, api):
    event, data, token = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000)
    status, body = api.call("delete", f"/api/booking/{rid}?token={token}")
    assert (status, body["data"]["status"]) == (200, "REFUNDED"), body
    assert toss.payments[key]["status"] == "CANCELED" and toss.payments[key]["balanceAmount"] == 0
    [(_, path, headers, sent)] = toss.calls("/cancel")
    assert path == f"/v1/payments/{key}/cancel" and sent["cancelAmount"] == 110_000
    assert headers["Idempotency-Key"].startswith(f"refund-{key}-")
    assert seats_left(event.event_id) == 10


def test_the_widgets_fail_url_keeps_the_hold(toss, held):
    event, data, _ = held
    answer = back_from_the_widget(
        data, code="PAY_PROCESS_CANCELED", message="사용자에 의해 결제가 취소되었습니다."
    )
    assert answer.status_code == 200
    assert "nothing was charged; your seats are still held" in answer.content.decode()
    assert Reservation.objects.get(reservation_id=data["reservationId"]).status == "HELD"


def notify(body: object) -> "object":
    return Client().post("/payments/toss/webhook", body, content_type="application/json")


def test_notifications_repeated_and_out_of_order_settle_a_lost_confirm_once(toss, held):
    """The confirm's answer was lost; Toss then notifies, twice, and a stale
    notification (READY) arrives after: the booking is confirmed once, from what
    Toss says when asked, whatever the notifications claim."""
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    toss.knobs.lose_answer = True
    assert back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000).status_code == 503
    changed = {"eventType": "PAYMENT_STATUS_CHANGED", "data": {"paymentKey": key, "status": "DONE"}}
    stale = {"eventType": "PAYMENT_STATUS_CHANGED", "data": {"paymentKey": key, "status": "READY"}}
    assert notify(changed).json()["data"]["done"] == "CONFIRMED"
    assert notify(changed).json()["data"]["done"] == "CONFIRMED"  # a repeat changes nothing
    assert notify(stale).json()["data"]["done"] == "CONFIRMED"  # its claim is not believed
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.status, row.payment_id) == ("CONFIRMED", key)
    assert not toss.calls("/cancel")


def test_a_notification_of_a_payment_after_its_hold_was_released_refunds_it(toss, held):
    event, data, _ = held
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    toss.knobs.lose_answer = True
    back_from_the_widget(data, paymentKey=key, orderId=rid, amount=110_000)  # taken, unanswered
    Reservation.objects.filter(reservation_id=rid).update(status="HELD", paying_since=None)
    checkout.hold_release(Reservation.objects.get(reservation_id=rid), "test: released meanwhile")
    # Taken before the hold's end but released meanwhile: the money goes back.
    notify({"eventType": "PAYMENT_STATUS_CHANGED", "data": {"paymentKey": key}})
    row = Reservation.objects.get(reservation_id=rid)
    assert row.status == "REFUNDED" and toss.payments[key]["status"] == "CANCELED"
    assert seats_left(event.event_id) == 10


@pytest.mark.parametrize(
    "body",
    [b"not json", [], {"eventType": "DEPOSIT_CALLBACK"}, {"eventType": "PAYMENT_STATUS_CHANGED", "data": 7}],
)
def test_notifications_that_are_not_ours_are_acknowledged_and_change_nothing(toss, held, body):
    answer = Client().post("/payments/toss/webhook", body, content_type="application/json")
    assert answer.status_code == 200 and answer.json()["data"]["done"] == "IGNORED"
    assert not toss.seen


def test_a_notification_while_toss_is_away_asks_to_be_sent_again(toss, held, settings):
    settings.TOSS_API_URL = "http://127.0.0.1:9"  # nothing listens there
    answer = notify({"eventType": "PAYMENT_STATUS_CHANGED", "data": {"paymentKey": "tpk_x"}})
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "PAYMENT_UNAVAILABLE"
