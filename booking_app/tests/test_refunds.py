"""The refund rule: a paid booking its buyer cancels gives back the event's share of
the payment, rounded down to the currency's minor unit; an operator's cancellation,
and a payment that came after its hold, give back all of it. What goes back is
decided when the booking ends and kept on the row (`refunded_amount`), so that a
refund tried again gives back that much, never more."""

import datetime
import uuid
from urllib.parse import urlencode, urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from booking_app import checkout, mail, payments
from booking_app.models import Reservation
from queue_app import events
from queue_app.models import Event
from testsupport.booking import book, charge_of, checkout_path, hold, pay, row, seats_left
from ticketing import store

pytestmark = pytest.mark.django_db(transaction=True)


def paid(api, event, token: str, seats: int = 1) -> str:
    """A booking held and paid on the checkout page: its reservation id."""
    data = hold(api, event, token, seats)
    pay(checkout_path(data))
    assert Reservation.objects.get(reservation_id=data["reservationId"]).status == "CONFIRMED"
    return data["reservationId"]


def operator() -> Client:
    browser = Client()
    browser.force_login(User.objects.create_superuser(f"op-{uuid.uuid4().hex[:8]}", "op@example.com", "pw"))
    return browser


def test_the_share_is_rounded_down_in_the_minor_unit():
    assert checkout.refund_share(3_333, 50) == 1_666  # 33.33 USD: 16.66, not 16.67
    assert checkout.refund_share(55_555, 50) == 27_777  # KRW has no minor unit
    assert checkout.refund_share(55_555, 100) == 55_555
    assert checkout.refund_share(55_555, 0) == 0


def test_a_buyer_who_cancels_gets_the_events_share(api, priced, active_tokens):
    event = priced(price=3_333, currency="USD", refund_percent=50)
    [token] = active_tokens(event, 1)
    rid = paid(api, event, token)
    status, body = api.call("delete", f"/api/booking/{rid}?token={token}")
    assert (status, body["data"]["status"]) == (200, "REFUNDED"), body
    done = row(rid)
    assert (done.refunded_amount, charge_of(rid)["refunded"]) == (1_666, 1_666)
    assert done.refunded_at is not None and seats_left(event.event_id) == 10

    status, body = api.call("get", f"/api/booking/{rid}?token={token}")
    assert body["data"]["status"] == "REFUNDED" and body["data"]["refunded"] == 1_666
    page = Client().get(f"/bookings/{mail.link_token(uuid.UUID(rid))}/").content.decode()
    assert "16.66 USD of your payment was returned" in page


def test_the_booking_pages_cancel_follows_the_rule_and_says_so(api, priced, active_tokens):
    event = priced(refund_percent=30)
    [token] = active_tokens(event, 1)
    rid = paid(api, event, token, 2)  # 110,000 KRW
    browser = Client(enforce_csrf_checks=True)
    path = f"/bookings/{mail.link_token(uuid.UUID(rid))}/"
    page = browser.get(path)
    assert "Cancelling refunds 33,000 KRW of your payment" in page.content.decode()
    browser.post(path, {"csrfmiddlewaretoken": page.cookies["csrftoken"].value})
    done = row(rid)
    assert (done.status, done.refunded_amount, charge_of(rid)["refunded"]) == ("REFUNDED", 33_000, 33_000)


def test_an_operator_cancelling_refunds_in_full_whatever_the_rule(api, priced, active_tokens):
    event = priced(refund_percent=0)
    buyer, other = active_tokens(event, 2)
    rid = paid(api, event, buyer, 2)
    kept = paid(api, event, other, 1)
    assert api.call("delete", f"/api/booking/{kept}?token={other}")[0] == 200  # the buyer's: nothing back
    admin = operator()
    pk = row(rid).pk
    admin.post("/admin/booking_app/reservation/", {"action": "cancel", "_selected_action": [pk]})
    done = row(rid)
    assert (done.status, done.refunded_amount, charge_of(rid)["refunded"]) == ("REFUNDED", 110_000, 110_000)
    assert api.call("get", f"/api/booking/{rid}?token={buyer}")[1]["data"]["refunded"] == 110_000
    assert seats_left(event.event_id) == 10

    export = admin.post(
        "/admin/booking_app/reservation/", {"action": "export_csv", "_selected_action": [pk, row(kept).pk]}
    )
    lines = export.content.decode().splitlines()
    assert lines[0].endswith(",refunded_at,refunded_amount")
    by_id = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    assert by_id[rid][-1] == "110000" and by_id[kept][-1] == "0"
    live = admin.get(f"/admin/queue_app/event/{event.pk}/live.json").json()["numbers"]
    assert live["revenue"] == {"held": "0 KRW", "paid": "55,000 KRW", "refunded": "110,000 KRW"}


def test_a_rule_of_nothing_cancels_and_gives_nothing_back(api, priced, active_tokens):
    event = priced(refund_percent=0)
    [token] = active_tokens(event, 1)
    rid = paid(api, event, token)
    status, body = api.call("delete", f"/api/booking/{rid}?token={token}")
    assert (status, body["data"]["status"]) == (200, "CANCELLED"), body
    done = row(rid)
    assert (done.refunded_amount, done.refunded_at is not None) == (0, True)
    assert not charge_of(rid).get("refunded")  # the provider was not asked
    assert checkout.refunds_retry() == 0  # settled: nothing owed
    assert "refunded" not in api.call("get", f"/api/booking/{rid}?token={token}")[1]["data"]
    assert seats_left(event.event_id) == 10


def test_a_payment_after_its_hold_is_refunded_in_full_whatever_the_rule(api, priced, active_tokens, settings):
    event = priced(refund_percent=10)
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    Reservation.objects.filter(reservation_id=data["reservationId"]).update(
        hold_expires_at=timezone.now() + datetime.timedelta(milliseconds=300)
    )
    settings.PAYMENTS_TEST_DELAY_MS = 700  # the provider answers after the hold ran out
    done = checkout.hold_pay(reservation_id=uuid.UUID(data["reservationId"]), reply={"outcome": "pay"})
    assert (done.status, done.refunded_amount) == ("REFUNDED", 110_000)
    assert charge_of(done.reservation_id)["refunded"] == 110_000


def test_a_share_retried_after_a_lost_answer_is_given_back_once(api, priced, active_tokens, settings):
    """The provider is away when the buyer cancels: the booking is cancelled and its
    share decided. The provider then takes a refund whose answer never came back;
    the retry sees it taken and asks for nothing more."""
    event = priced(price=55_555, refund_percent=50)
    [token] = active_tokens(event, 1)
    rid = paid(api, event, token)
    settings.PAYMENTS_TEST_FAIL = True
    status, body = api.call("delete", f"/api/booking/{rid}?token={token}")
    assert (status, body["data"]["status"]) == (200, "CANCELLED")
    owed = row(rid)
    assert (owed.refunded_amount, owed.refunded_at) == (27_777, None)
    assert checkout.refunds_retry() == 0 and row(rid).status == "CANCELLED"  # still away
    assert seats_left(event.event_id) == 10  # the seats do not wait for the money

    settings.PAYMENTS_TEST_FAIL = False
    provider = payments.TestProvider()
    provider.refund(provider.lookup(rid), 27_777, "applied, its answer lost")
    assert checkout.refunds_retry() == 1
    done = row(rid)
    assert (done.status, done.refunded_amount, charge_of(rid)["refunded"]) == ("REFUNDED", 27_777, 27_777)
    assert checkout.refunds_retry() == 0 and charge_of(rid)["refunded"] == 27_777


def test_two_callers_refunding_one_share_give_it_back_once(api, priced, active_tokens, settings):
    """The buyer's request and the retry's sweep, each with the charge as it read it
    before either refunded: the share goes back once."""
    event = priced(refund_percent=50)
    [token] = active_tokens(event, 1)
    rid = paid(api, event, token)
    settings.PAYMENTS_TEST_FAIL = True
    api.call("delete", f"/api/booking/{rid}?token={token}")
    settings.PAYMENTS_TEST_FAIL = False
    cancelled, charge = row(rid), payments.TestProvider().lookup(rid)
    assert checkout.refund(cancelled, charge) and checkout.refund(cancelled, charge)
    assert (row(rid).refunded_amount, charge_of(rid)["refunded"]) == (27_500, 27_500)


def test_toss_is_asked_for_the_share_once_even_when_away_at_first(toss, api, priced, active_tokens):
    event = priced(refund_percent=30)
    [token] = active_tokens(event, 1)
    data = book(api, token, event.event_id, 2, buyerEmail="minji@example.com")[1]["data"]
    rid = data["reservationId"]
    key = toss.authorize(rid, 110_000)
    back = {"paymentKey": key, "orderId": rid, "amount": 110_000}  # the widget's redirect
    assert Client().get(urlsplit(data["checkoutUrl"]).path + "?" + urlencode(back)).status_code == 302
    assert row(rid).status == "CONFIRMED"

    toss.knobs.down = True
    assert api.call("delete", f"/api/booking/{rid}?token={token}")[1]["data"]["status"] == "CANCELLED"
    toss.knobs.down = False
    assert checkout.refunds_retry() == 1 and checkout.refunds_retry() == 0
    assert (row(rid).status, row(rid).refunded_amount) == ("REFUNDED", 33_000)
    payment = toss.payments[key]
    assert (payment["status"], payment["balanceAmount"]) == ("PARTIAL_CANCELED", 77_000)
    assert [c["cancelAmount"] for c in payment["cancels"]] == [33_000]
    assert {c[2]["Idempotency-Key"] for c in toss.calls("/cancel")} == {f"refund-{key}-33000"}


def test_init_event_sets_the_refund_rule_and_late_confirmation():
    event_id = f"t-{uuid.uuid4().hex[:12]}"
    try:
        call_command(
            "init_event", event_id, "--price", "5500", "--refund-percent", "40", "--late-confirmation"
        )
        event = Event.objects.get(event_id=event_id)
        assert (event.refund_percent, event.late_confirmation) == (40, True)
        call_command("init_event", event_id, "--no-late-confirmation")
        event.refresh_from_db()
        assert (event.refund_percent, event.late_confirmation) == (40, False)
        for bad in ("101", "-1"):
            with pytest.raises(CommandError):
                call_command("init_event", event_id, "--refund-percent", bad)
        assert Event.objects.get(event_id=event_id).refund_percent == 40
    finally:
        events.event_wipe(event_id)
        store.client().srem(store.EVENTS_KEY, event_id)


def test_operators_set_them_with_the_price(make_event):
    event = make_event()
    assert (event.refund_percent, event.late_confirmation) == (100, False)  # in full; refunded if late
    page = operator().get(f"/admin/queue_app/event/{event.pk}/change/").content.decode()
    fieldset = page.split("Price and checkout", 1)[1].split("</fieldset>", 1)[0]
    assert 'name="refund_percent"' in fieldset and 'name="late_confirmation"' in fieldset
    event.refund_percent = 101
    with pytest.raises(ValidationError, match="refund_percent"):
        event.full_clean()
