"""Booking as the tests do it: a booking through the API, and the seats Redis says
are left; a priced booking's hold, its payment on the checkout page, and its charge
at the test provider."""

import json
from urllib.parse import urlsplit

from django.db.models import Sum
from django.http import HttpResponse
from django.test import Client

from ticketing import store


def book(api, token: str, event_id: str, seats: int = 1, **extra) -> tuple[int, dict]:
    """POST /api/booking through `api` (a testsupport.clients.Api): (status, body)."""
    return api.call(
        "post", "/api/booking", {"token": token, "seatCount": seats, "eventId": event_id, **extra}
    )


def seats_left(event_id: str) -> int:
    return int(store.client().get(store.EventKeys(event_id).seats))


# --- Checkout (booking_app/checkout.py), through the built-in test provider ----------


def hold(api, event, token: str, seats: int = 2, **buyer) -> dict:
    """A priced event's booking, HELD: the answer's data."""
    buyer = buyer or {"buyerName": "Kim Minji", "buyerEmail": "minji@example.com"}
    status, body = book(api, token, event.event_id, seats, **buyer)
    assert status == 200, body
    assert body["data"]["status"] == "HELD", body
    return body["data"]


def checkout_path(data: dict) -> str:
    return urlsplit(data["checkoutUrl"]).path


def pay(path: str, outcome: str = "pay", **headers) -> HttpResponse:
    """The buyer's browser on the checkout page: the page, then its form (CSRF on)."""
    browser = Client(enforce_csrf_checks=True, **headers)
    page = browser.get(path)
    assert page.status_code == 200, page.status_code
    return browser.post(path, {"outcome": outcome, "csrfmiddlewaretoken": page.cookies["csrftoken"].value})


def charge_of(reservation_id) -> dict | None:
    """The test provider's record of the booking's charge (its `refunded` included)."""
    raw = store.client().get(store.test_payment_key(str(reservation_id)))
    return None if raw is None else json.loads(raw)


def row(reservation_id):
    """The reservation's row, as Postgres has it now."""
    from booking_app.models import Reservation

    return Reservation.objects.get(reservation_id=reservation_id)


def ledger(event) -> int:
    """The event's seat ledger: the seats its held and confirmed rows take."""
    from queue_app.models import Event

    return Event.objects.values_list("seats_sold", flat=True).get(pk=event.pk)


def assert_seats_add_up(event) -> None:
    """Redis' seats left plus the taken rows' seats are the total; the ledger counts
    exactly the taken rows."""
    from booking_app.models import TAKEN, Reservation

    taken = Reservation.objects.filter(event=event, status__in=TAKEN).aggregate(n=Sum("seat_count"))["n"] or 0
    assert ledger(event) == taken
    assert seats_left(event.event_id) + taken == event.total_seats
