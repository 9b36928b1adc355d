"""Checkout: a priced event's booking is HELD while its buyer pays, then CONFIRMED
or RELEASED, each exactly once (booking_app/checkout.py), through the built-in test
provider, whose charges live in Redis as a provider keeps them on its side."""

import datetime
import subprocess
import sys
import threading
import uuid

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from booking_app import checkout, mail, payments, reconcile
from booking_app.models import Reservation
from queue_app.models import Event
from testsupport import CheckedThread
from testsupport.booking import (
    assert_seats_add_up,
    book,
    charge_of,
    checkout_path,
    hold,
    ledger,
    pay,
    row,
    seats_left,
)
from testsupport.metrics import scrape, value
from testsupport.servers import database_url_of_tests
from ticketing import store

pytestmark = pytest.mark.django_db(transaction=True)


def linked(path: str, tail: str = "/") -> uuid.UUID | None:
    """The reservation a /bookings/<signed>/ link names (the signature carries a
    time, so two links to one booking made in different seconds differ)."""
    assert path.startswith("/bookings/") and path.endswith(tail), path
    return mail.reservation_id_of(path.removeprefix("/bookings/").removesuffix(tail))


def test_a_free_event_books_as_today(api, make_event, active_tokens):
    event = make_event(total_seats=5)
    [token] = active_tokens(event, 1)
    status, body = book(api, token, event.event_id, 2)
    assert status == 200
    assert set(body["data"]) == {"reservationId", "seatCount", "remainingSeats", "eventId", "status"}
    assert body["data"]["status"] == "CONFIRMED"
    assert row(body["data"]["reservationId"]).amount == 0


def test_a_priced_booking_is_held_with_what_to_pay_and_where(api, priced, active_tokens):
    event = priced()
    [token] = active_tokens(event, 1)
    before = store.now_ms(event.event_id)
    data = hold(api, event, token)
    assert (data["amount"], data["currency"], data["seatCount"], data["remainingSeats"]) == (
        110_000,
        "KRW",
        2,
        8,
    )
    assert before + 600_000 <= data["holdExpiresAt"] <= store.now_ms(event.event_id) + 600_000
    assert linked(checkout_path(data), "/checkout/") == uuid.UUID(data["reservationId"])
    held = row(data["reservationId"])
    assert (held.status, held.amount, held.currency) == ("HELD", 110_000, "KRW")
    assert int(held.hold_expires_at.timestamp() * 1000) == data["holdExpiresAt"]
    assert ledger(event) == 2  # held seats are taken in Postgres' ledger too
    assert_seats_add_up(event)

    status, body = api.call("get", f"/api/booking/{data['reservationId']}?token={token}")
    assert status == 200, body
    assert body["data"]["status"] == "HELD" and body["data"]["amount"] == 110_000
    assert body["data"]["holdExpiresAt"] == data["holdExpiresAt"] and body["data"]["paidAt"] is None
    # Another token's, or a made-up id: not found; a malformed id: 400.
    assert api.call("get", f"/api/booking/{uuid.uuid4()}?token={token}")[0] == 404
    assert api.call("get", f"/api/booking/nope?token={token}")[0] == 400


def test_paying_within_the_hold_confirms_it_once(api, priced, active_tokens):
    event = priced()
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    paid = pay(checkout_path(data))
    assert paid.status_code == 302 and linked(paid.url) == uuid.UUID(data["reservationId"])
    done = row(data["reservationId"])
    assert done.status == "CONFIRMED" and done.payment_id.startswith("test_") and done.paid_at is not None
    assert charge_of(done.reservation_id)["id"] == done.payment_id
    page = Client().get(paid.url).content.decode()
    assert "Reservation confirmed" in page and "110,000 KRW" in page

    # The form sent again (a second tab, a double click): nothing more is charged.
    again = Client().get(checkout_path(data))
    assert again.status_code == 302  # the checkout of a paid booking shows the booking
    assert row(data["reservationId"]).payment_id == done.payment_id
    status, body = api.call("get", f"/api/booking/{data['reservationId']}?token={token}")
    assert body["data"]["status"] == "CONFIRMED" and body["data"]["paidAt"] is not None
    assert ledger(event) == 2
    assert_seats_add_up(event)


def test_a_declined_payment_releases_the_seats_at_once(api, priced, active_tokens):
    event = priced(total_seats=2)
    first, second = active_tokens(event, 2)
    data = hold(api, event, first)
    assert book(api, second, event.event_id, 1)[1]["error"]["code"] == "SOLD_OUT"  # held seats are taken
    declined = pay(checkout_path(data), "decline")
    assert declined.status_code == 302
    released = row(data["reservationId"])
    assert released.status == "RELEASED" and released.released_at is not None and released.payment_id is None
    assert charge_of(released.reservation_id) is None
    assert "nothing was charged" in Client().get(declined.url).content.decode()
    assert seats_left(event.event_id) == 2 and ledger(event) == 0
    assert hold(api, event, second)["seatCount"] == 2  # the next person has them


def test_giving_up_a_hold_releases_it_and_a_paid_booking_cancelled_is_refunded(api, priced, active_tokens):
    event = priced()
    first, second = active_tokens(event, 2)
    held = hold(api, event, first)
    status, body = api.call("delete", f"/api/booking/{held['reservationId']}?token={first}")
    assert status == 200 and body["data"]["status"] == "RELEASED", body
    assert seats_left(event.event_id) == 10

    paid = hold(api, event, second, 3)
    pay(checkout_path(paid))
    status, body = api.call("delete", f"/api/booking/{paid['reservationId']}?token={second}")
    assert status == 200 and body["data"]["status"] == "REFUNDED", body
    refunded = row(paid["reservationId"])
    assert refunded.refunded_at is not None and refunded.cancelled_at is not None
    assert charge_of(refunded.reservation_id)["refunded"] == 165_000
    assert seats_left(event.event_id) == 10 and ledger(event) == 0
    # Twice: the seats came back once.
    assert api.call("delete", f"/api/booking/{paid['reservationId']}?token={second}")[0] == 409
    assert seats_left(event.event_id) == 10


def test_a_hold_run_out_is_released_and_its_payment_refused(api, priced, active_tokens):
    event = priced()
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    path = checkout_path(data)
    page = Client(enforce_csrf_checks=True)
    form = page.get(path)
    Reservation.objects.filter(reservation_id=data["reservationId"]).update(
        hold_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    late = page.post(path, {"outcome": "pay", "csrfmiddlewaretoken": form.cookies["csrftoken"].value})
    assert late.status_code == 302
    assert row(data["reservationId"]).status == "RELEASED"
    assert charge_of(data["reservationId"]) is None  # nothing was charged
    assert seats_left(event.event_id) == 10
    assert checkout.holds_expire() == 0  # released once


def test_holds_run_out_are_released_by_the_sweep_and_only_those(api, priced, active_tokens):
    event = priced()
    tokens = active_tokens(event, 3)
    held = [hold(api, event, t, 1) for t in tokens]
    Reservation.objects.filter(reservation_id__in=[h["reservationId"] for h in held[:2]]).update(
        hold_expires_at=timezone.now() - datetime.timedelta(milliseconds=1)
    )
    assert checkout.holds_expire() == 2
    assert [row(h["reservationId"]).status for h in held] == ["RELEASED", "RELEASED", "HELD"]
    assert seats_left(event.event_id) == 9
    assert checkout.holds_expire() == 0
    assert_seats_add_up(event)


def test_reconcile_ends_the_holds_that_ran_out_while_nothing_ran(api, priced, active_tokens):
    """The beat away: its sweep never ran. The event's next reconcile ends the holds
    whose time ran out (and only those), and its sums count them given back."""
    event = priced()
    tokens = active_tokens(event, 2)
    held = [hold(api, event, t, 2) for t in tokens]
    Reservation.objects.filter(reservation_id=held[0]["reservationId"]).update(
        hold_expires_at=timezone.now() - datetime.timedelta(seconds=5)
    )
    report = reconcile.booking_reconcile(event.event_id)
    assert report.holds_ended == 1 and "  ended 1 hold(s) whose time had run out" in report.lines()
    assert report.consistent, report.lines()
    assert [row(h["reservationId"]).status for h in held] == ["RELEASED", "HELD"]
    assert seats_left(event.event_id) == 8 and report.seats_left == 8
    assert_seats_add_up(event)
    assert reconcile.booking_reconcile(event.event_id).holds_ended == 0


def test_a_payment_that_ends_after_its_hold_is_refunded_never_confirmed(api, priced, active_tokens, settings):
    event = priced()
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    Reservation.objects.filter(reservation_id=data["reservationId"]).update(
        hold_expires_at=timezone.now() + datetime.timedelta(milliseconds=300)
    )
    settings.PAYMENTS_TEST_DELAY_MS = 700  # the provider answers after the hold ran out
    done = checkout.hold_pay(reservation_id=uuid.UUID(data["reservationId"]), reply={"outcome": "pay"})
    assert done.status == "REFUNDED" and done.payment_id is not None
    assert charge_of(done.reservation_id)["refunded"] == 110_000
    assert seats_left(event.event_id) == 10 and ledger(event) == 0


def test_with_the_provider_away_the_hold_stays_and_the_buyer_is_told(api, priced, active_tokens, settings):
    event = priced()
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    settings.PAYMENTS_TEST_FAIL = True
    answer = pay(checkout_path(data))
    assert answer.status_code == 503
    assert "your seats are still held" in answer.content.decode()
    kept = row(data["reservationId"])
    assert kept.status == "HELD" and kept.paying_since is not None
    # Its time runs out while the provider is still away: the sweep cannot tell
    # whether the money was taken, so it keeps the seats and asks again later.
    Reservation.objects.filter(pk=kept.pk).update(hold_expires_at=timezone.now())
    assert checkout.holds_expire() == 0 and row(kept.reservation_id).status == "HELD"
    settings.PAYMENTS_TEST_FAIL = False
    assert checkout.holds_expire() == 1  # no charge was made: released
    assert row(kept.reservation_id).status == "RELEASED" and seats_left(event.event_id) == 10


def test_a_process_killed_between_the_charge_and_its_commit_is_confirmed_by_the_sweep(
    api, priced, active_tokens
):
    """The money was taken in time, then the process died before writing CONFIRMED:
    the sweep finds the charge at the provider and confirms the booking (the buyer
    paid in time), rather than releasing the seats and keeping the money."""
    event = priced()
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, uuid, django; django.setup()\n"
            "from booking_app import checkout\n"
            "checkout.settle_charge = lambda *args, **kwargs: os._exit(9)  # dies right after the charge\n"
            f"rid = uuid.UUID({data['reservationId']!r})\n"
            "checkout.hold_pay(reservation_id=rid, reply={'outcome': 'pay'})\n",
        ],
        cwd=settings.BASE_DIR,
        env={**_env(), "DJANGO_SETTINGS_MODULE": "ticketing.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == 9, killed.stderr  # the fault fired
    charge = charge_of(data["reservationId"])
    assert charge is not None and row(data["reservationId"]).status == "HELD"  # taken, not recorded
    Reservation.objects.filter(reservation_id=data["reservationId"]).update(hold_expires_at=timezone.now())
    assert checkout.holds_expire() == 1
    done = row(data["reservationId"])
    assert done.status == "CONFIRMED" and done.payment_id == charge["id"]
    assert_seats_add_up(event)


def _env() -> dict[str, str]:
    import os

    return {
        **os.environ,
        "DATABASE_URL": database_url_of_tests(),
        "REDIS_URL": settings.REDIS_URL,
        "PAYMENTS_PROVIDER": "test",
        "PAYMENTS_ALLOW_TEST": "true",
    }


def test_a_payment_racing_the_end_of_its_hold_is_either_confirmed_or_released_and_refunded(
    api, priced, active_tokens, settings
):
    """Holds ending now, each paid while the sweep runs: exactly one of the two wins
    each; a charge is kept only by a confirmed booking, else refunded."""
    event = priced(total_seats=8)
    tokens = active_tokens(event, 8)
    held = [hold(api, event, t, 1) for t in tokens]
    ends = timezone.now() + datetime.timedelta(milliseconds=150)
    Reservation.objects.filter(event=event).update(hold_expires_at=ends)
    settings.PAYMENTS_TEST_DELAY_MS = 100

    def buyer(data: dict) -> None:
        try:
            checkout.hold_pay(reservation_id=uuid.UUID(data["reservationId"]), reply={"outcome": "pay"})
        except checkout.DomainError as exc:
            assert exc.code in ("HOLD_EXPIRED", "NOT_HELD"), exc.code
        finally:
            connection.close()  # back to the pool: the threads share its few connections

    def sweeper() -> None:
        try:
            while timezone.now() < ends + datetime.timedelta(seconds=1):
                checkout.holds_expire()
        finally:
            connection.close()

    threads = [CheckedThread(target=buyer, args=(h,)) for h in held] + [CheckedThread(target=sweeper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    checkout.holds_expire()
    outcomes = {}
    for h in held:
        done = row(h["reservationId"])
        charge = charge_of(done.reservation_id)
        outcomes.setdefault(done.status, 0)
        outcomes[done.status] += 1
        assert done.status in ("CONFIRMED", "RELEASED", "REFUNDED"), done.status
        if done.status == "CONFIRMED":
            assert charge is not None and charge["id"] == done.payment_id and not charge.get("refunded")
        elif charge is not None:  # taken too late: given back in full
            assert done.status == "REFUNDED" and charge["refunded"] == charge["amount"]
    assert_seats_add_up(event)
    assert sum(outcomes.values()) == 8


def test_reconcile_counts_held_seats_as_taken(api, priced, active_tokens):
    event = priced()
    tokens = active_tokens(event, 2)
    hold(api, event, tokens[0], 3)
    paid = hold(api, event, tokens[1], 2)
    pay(checkout_path(paid))
    report = reconcile.booking_reconcile(event.event_id)
    assert report.consistent, report
    assert seats_left(event.event_id) == 5
    # Redis loses its count of seats left: the recount puts back the held ones too.
    store.client().set(store.EventKeys(event.event_id).seats, 10)
    report = reconcile.booking_reconcile(event.event_id)
    assert seats_left(event.event_id) == 5 and report.healed_from == 10


def test_postgres_refuses_a_hold_past_the_seats_whatever_redis_says(api, priced, active_tokens):
    event = priced(total_seats=2)
    first, second = active_tokens(event, 2)
    hold(api, event, first, 2)
    store.client().set(store.EventKeys(event.event_id).seats, 2)  # Redis wrongly has seats again
    status, body = book(api, second, event.event_id, 2)
    assert (status, body["error"]["code"]) == (409, "SOLD_OUT")
    assert ledger(event) == 2


def test_the_test_provider_charges_an_order_once():
    provider = payments.TestProvider()
    order = str(uuid.uuid4())
    first = provider.charge(order, 1000, "KRW", reply={"outcome": "pay"})
    again = provider.charge(order, 1000, "KRW", reply={"outcome": "pay"})
    assert first.payment_id == again.payment_id
    with pytest.raises(payments.Declined):
        provider.charge(str(uuid.uuid4()), 1000, "KRW", reply={"outcome": "decline"})
    provider.refund(first, 400, "test")
    provider.refund(first, 10_000, "test")
    assert provider.lookup(order).refunded == 1000  # never more than was taken


def test_a_threaded_double_pay_charges_once(api, priced, active_tokens):
    event = priced()
    [token] = active_tokens(event, 1)
    data = hold(api, event, token)
    results: list[str] = []
    lock = threading.Lock()

    def click() -> None:
        try:
            done = checkout.hold_pay(
                reservation_id=uuid.UUID(data["reservationId"]), reply={"outcome": "pay"}
            )
            outcome = done.status
        except checkout.DomainError as exc:
            outcome = exc.code
        finally:
            connection.close()
        with lock:
            results.append(outcome)

    threads = [CheckedThread(target=click) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results.count("CONFIRMED") >= 1
    assert set(results) <= {"CONFIRMED", "NOT_HELD"}
    done = row(data["reservationId"])
    assert done.status == "CONFIRMED" and charge_of(done.reservation_id)["id"] == done.payment_id
    assert not charge_of(done.reservation_id).get("refunded")


def test_init_event_sets_the_price_and_refuses_one_with_no_provider(settings):
    from django.core.management import CommandError, call_command

    event_id = f"t-{uuid.uuid4().hex[:12]}"
    try:
        call_command("init_event", event_id, "--price", "5500", "--currency", "USD", "--hold", "300")
        event = Event.objects.get(event_id=event_id)
        assert (event.price, event.currency, event.hold_seconds) == (5500, "USD", 300)
        meta = store.client().hgetall(store.EventKeys(event_id).meta)
        assert (meta[b"price"], meta[b"currency"], meta[b"holdSeconds"]) == (b"5500", b"USD", b"300")
        for bad in (["--currency", "XYZ"], ["--hold", "1"], ["--price", "-1"]):
            with pytest.raises(CommandError):
                call_command("init_event", event_id, *bad)
        settings.PAYMENTS_PROVIDER = ""
        with pytest.raises(CommandError, match="No payment provider"):
            call_command("init_event", event_id, "--price", "6000")
        call_command("init_event", event_id, "--price", "0")  # free seats need none
    finally:
        from queue_app import events

        events.event_wipe(event_id)
        store.client().srem(store.EVENTS_KEY, event_id)


def test_holds_are_counted_for_operators(api, client, priced, active_tokens):
    event = priced()
    paid_token, released_token, refunded_token = active_tokens(event, 3)
    paid = hold(api, event, paid_token)
    pay(checkout_path(paid))
    pay(checkout_path(hold(api, event, released_token)), "decline")
    refunded = hold(api, event, refunded_token, 1)
    pay(checkout_path(refunded))
    assert api.call("delete", f"/api/booking/{refunded['reservationId']}?token={refunded_token}")[0] == 200
    seen = scrape(client)
    ev = event.event_id
    assert value(seen, "ticketing_bookings_total", event=ev, outcome="HELD") == 3
    assert value(seen, "ticketing_checkouts_total", event=ev, outcome="PAID") == 2
    assert value(seen, "ticketing_checkouts_total", event=ev, outcome="RELEASED") == 1
    assert value(seen, "ticketing_checkouts_total", event=ev, outcome="REFUNDED") == 1
    assert 0 < value(seen, "ticketing_hold_to_pay_seconds_total", event=ev) < 60


def test_operators_see_the_money_and_export_the_reservations(client, api, priced, active_tokens):
    from django.contrib.auth.models import User

    event = priced(currency="USD", price=5_500)  # $55.00 a seat
    paid_token, held_token, refunded_token = active_tokens(event, 3)
    paid = hold(api, event, paid_token, 2)
    pay(checkout_path(paid))
    hold(api, event, held_token, 1)
    refunded = hold(api, event, refunded_token, 1)
    pay(checkout_path(refunded))
    api.call("delete", f"/api/booking/{refunded['reservationId']}?token={refunded_token}")
    Reservation.objects.filter(reservation_id=paid["reservationId"]).update(buyer_name="=HYPERLINK(1)")

    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw-for-tests"))
    live = client.get(f"/admin/queue_app/event/{event.pk}/live.json").json()["numbers"]
    assert live["revenue"] == {"held": "55.00 USD", "paid": "110.00 USD", "refunded": "55.00 USD"}
    listed = client.get("/admin/booking_app/reservation/", {"q": paid["reservationId"]}).content.decode()
    assert "11000" in listed and row(paid["reservationId"]).payment_id in listed

    pks = list(Reservation.objects.filter(event=event).values_list("pk", flat=True))
    export = client.post("/admin/booking_app/reservation/", {"action": "export_csv", "_selected_action": pks})
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    lines = export.content.decode().splitlines()
    assert lines[0].startswith("reservation_id,event_id,status,seat_count,amount,currency,payment_id")
    by_id = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    assert len(by_id) == 3
    exported = by_id[paid["reservationId"]]
    assert exported[2:6] == ["CONFIRMED", "2", "11000", "USD"] and exported[7] == "'=HYPERLINK(1)"
    assert by_id[refunded["reservationId"]][2] == "REFUNDED"


def test_a_hold_is_published_as_a_booking_only_once_paid(api, priced, active_tokens):
    from booking_app import publish

    event = priced()
    held, released = active_tokens(event, 2)
    hold(api, event, held)
    pay(checkout_path(hold(api, event, released)), "decline")
    assert publish.publish_pending() == 0  # neither is a booking anyone completed


def test_polls_say_how_many_seats_are_held_and_may_come_back(lanes_api, api, priced, active_tokens):
    event = priced(total_seats=2, admit_per_second=1)
    [buyer] = active_tokens(event, 1)
    waiting = api.token(event.event_id)
    data = hold(api, event, buyer)
    checkout.holds_note()
    answer = lanes_api.poll(waiting, event.event_id)[1]["data"]
    assert (answer["remainingSeats"], answer["seatsOnHold"], answer["soldOut"]) == (0, 2, True)
    assert lanes_api.poll(buyer, event.event_id)[1]["data"]["status"] == "BOOKED"
    pay(checkout_path(data), "decline")
    checkout.holds_note()
    answer = lanes_api.poll(waiting, event.event_id)[1]["data"]
    assert (answer["remainingSeats"], answer["seatsOnHold"], answer["soldOut"]) == (2, 0, False)


def test_a_booked_poll_says_held_until_paid_then_confirmed(lanes_api, api, priced, active_tokens):
    event = priced()
    buyer, decliner = active_tokens(event, 2)
    data = hold(api, event, buyer)
    answer = lanes_api.poll(buyer, event.event_id)[1]["data"]
    assert (answer["status"], answer["reservationId"], answer["reservationStatus"]) == (
        "BOOKED",
        data["reservationId"],
        "HELD",
    )
    assert pay(checkout_path(data)).status_code == 302
    answer = lanes_api.poll(buyer, event.event_id)[1]["data"]
    assert (answer["status"], answer["reservationStatus"]) == ("BOOKED", "CONFIRMED")
    # Released unpaid: the token's mark is gone, so the poll no longer says BOOKED.
    pay(checkout_path(hold(api, event, decliner)), "decline")
    answer = lanes_api.poll(decliner, event.event_id)[1]["data"]
    assert answer["status"] != "BOOKED" and answer["reservationStatus"] is None


def test_a_purged_event_gets_no_note_written_back(make_event):
    from queue_app import events

    event = make_event()
    events.event_wipe(event.event_id)
    checkout.holds_note()
    assert not store.client().exists(store.EventKeys(event.event_id).meta)
