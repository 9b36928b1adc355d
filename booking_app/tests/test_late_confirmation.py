"""Late confirmation, off by default: a payment that arrives after its hold was
released confirms the booking when the event allows it and its seats are still
free, taking them back in Redis exactly once (lua/retake.lua), so that reconcile's
recount still adds up; otherwise it is refunded, and the seats stay with whoever
has them."""

import datetime
import threading
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from booking_app import checkout, payments, reconcile, services
from booking_app.models import Reservation
from queue_app.models import Event
from testsupport import CheckedThread
from testsupport.booking import assert_seats_add_up, charge_of, hold, ledger, row, seats_left
from ticketing import store

pytestmark = pytest.mark.django_db(transaction=True)


def released(api, event, token: str, seats: int = 2) -> Reservation:
    """A hold whose time ran out unpaid: released by the sweep, its seats back on sale."""
    data = hold(api, event, token, seats)
    Reservation.objects.filter(reservation_id=data["reservationId"]).update(
        hold_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    checkout.holds_expire()
    done = row(data["reservationId"])
    assert done.status == "RELEASED"
    return done


def late_charge(hold_row: Reservation) -> payments.Charge:
    """Its buyer's payment, taken by the provider after the hold ended (as a provider's
    notification, or the sweep, then finds it)."""
    return payments.TestProvider().charge(
        str(hold_row.reservation_id), hold_row.amount, hold_row.currency, reply={"outcome": "pay"}
    )


def assert_reconciled(event: Event, left: int) -> None:
    report = reconcile.booking_reconcile(event.event_id)
    assert report.consistent, report.lines()  # nothing had to be corrected
    assert seats_left(event.event_id) == left == report.seats_left
    assert_seats_add_up(event)


def test_a_late_payment_confirms_the_booking_while_its_seats_are_free(api, priced, active_tokens, settings):
    event = priced(late_confirmation=True)
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    rid = uuid.UUID(data["reservationId"])
    Reservation.objects.filter(reservation_id=rid).update(
        hold_expires_at=timezone.now() + datetime.timedelta(milliseconds=300)
    )
    settings.PAYMENTS_TEST_DELAY_MS = 700  # the provider answers after the hold ran out
    done = checkout.hold_pay(reservation_id=rid, reply={"outcome": "pay"})
    assert (done.status, done.payment_id) == ("CONFIRMED", charge_of(rid)["id"])
    assert done.released_at is not None and not charge_of(rid).get("refunded")
    assert ledger(event) == 2
    assert_reconciled(event, 8)
    k = store.EventKeys(event.event_id)
    assert store.client().get(k.booked(token)) == str(rid).encode()  # its polls say BOOKED again
    answer = api.call("get", f"/api/booking/{rid}?token={token}")[1]["data"]
    assert (answer["status"], answer["endedAt"]) == ("CONFIRMED", None)

    # A give-back that read the row while it was released (reconcile's list of
    # cancellations) finds it confirmed: the seats stay taken.
    stale = row(rid)
    stale.status = Reservation.Status.RELEASED
    assert services.return_seats(stale, wait=False) is False
    assert_reconciled(event, 8)

    # Cancelled, its seats come back, once.
    settings.PAYMENTS_TEST_DELAY_MS = 0
    status, body = api.call("delete", f"/api/booking/{rid}?token={token}")
    assert (status, body["data"]["status"]) == (200, "REFUNDED")
    assert api.call("delete", f"/api/booking/{rid}?token={token}")[0] == 409
    assert_reconciled(event, 10)


def test_off_by_default_a_late_payment_is_refunded(api, priced, active_tokens):
    event = priced()
    assert event.late_confirmation is False
    [token] = active_tokens(event, 1)
    hold_row = released(api, event, token)
    done = checkout.settle_charge(hold_row, late_charge(hold_row))
    assert (done.status, done.refunded_amount) == ("REFUNDED", 110_000)
    assert charge_of(done.reservation_id)["refunded"] == 110_000
    assert_reconciled(event, 10)


def test_a_late_payment_whose_seats_went_to_someone_else_is_refunded(api, priced, active_tokens):
    event = priced(total_seats=2, late_confirmation=True)
    late, next_one = active_tokens(event, 2)
    hold_row = released(api, event, late)
    taken = hold(api, event, next_one)  # the next person in line has the seats
    done = checkout.settle_charge(hold_row, late_charge(hold_row))
    assert done.status == "REFUNDED" and charge_of(done.reservation_id)["refunded"] == 110_000
    assert row(taken["reservationId"]).status == "HELD" and ledger(event) == 2
    assert_reconciled(event, 0)


def test_on_a_closed_sale_a_late_payment_is_refunded(api, priced, active_tokens):
    event = priced(late_confirmation=True)
    [token] = active_tokens(event, 1)
    hold_row = released(api, event, token)
    Event.objects.filter(pk=event.pk).update(status=Event.Status.CLOSED)
    assert checkout.settle_charge(hold_row, late_charge(hold_row)).status == "REFUNDED"


def test_postgres_refuses_a_late_confirmation_that_redis_would_allow(api, priced, active_tokens):
    """Redis wrongly says two seats are free (it lost its last second): the row is
    refused by the seat ledger, the seats taken in Redis go back at once, the money
    goes back, and the next recount corrects Redis."""
    event = priced(total_seats=2, late_confirmation=True)
    late, next_one = active_tokens(event, 2)
    hold_row = released(api, event, late)
    hold(api, event, next_one)
    k = store.EventKeys(event.event_id)
    store.client().set(k.seats, 2)
    done = checkout.settle_charge(hold_row, late_charge(hold_row))
    assert done.status == "REFUNDED" and ledger(event) == 2
    assert store.client().hexists(k.returned, str(done.reservation_id))  # given back, once
    assert seats_left(event.event_id) == 2
    report = reconcile.booking_reconcile(event.event_id)
    assert report.healed_from == 2 and seats_left(event.event_id) == 0
    assert_seats_add_up(event)


def test_seats_never_given_back_are_confirmed_without_taking_more(api, priced, active_tokens):
    """The hold was released while Redis was away: its seats never went back on sale
    (reconcile would return them). The late payment keeps them, taking nothing more."""
    event = priced(late_confirmation=True)
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    Reservation.objects.filter(reservation_id=data["reservationId"]).update(
        status="RELEASED", released_at=timezone.now()
    )
    assert seats_left(event.event_id) == 8 and ledger(event) == 0
    done = checkout.settle_charge(row(data["reservationId"]), late_charge(row(data["reservationId"])))
    assert done.status == "CONFIRMED" and ledger(event) == 2
    assert_reconciled(event, 8)


def test_callers_racing_to_settle_one_late_payment_confirm_it_once(api, priced, active_tokens):
    """The buyer's request, the provider's notifications and reconcile, all at once:
    the booking is confirmed once, its charge kept, and the seats add up."""
    event = priced(late_confirmation=True)
    [token] = active_tokens(event, 1)
    hold_row = released(api, event, token)
    charge = late_charge(hold_row)
    outcomes: list[str] = []
    lock = threading.Lock()
    go = threading.Barrier(5)

    def settle() -> None:
        try:
            go.wait()
            done = checkout.settle_charge(Reservation.objects.get(pk=hold_row.pk), charge)
            with lock:
                outcomes.append(done.status)
        finally:
            connection.close()

    def reconciles() -> None:
        try:
            go.wait()
            for _ in range(5):
                reconcile.booking_reconcile(event.event_id)
        finally:
            connection.close()

    threads = [CheckedThread(target=settle) for _ in range(4)] + [CheckedThread(target=reconciles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcomes == ["CONFIRMED"] * 4
    assert row(hold_row.reservation_id).payment_id == charge.payment_id
    assert not charge_of(hold_row.reservation_id).get("refunded")
    assert_reconciled(event, 8)
