"""Which seats are free, as crowds read it (GET /api/events/<id>/seats, queue_app/
availability.py): each section's price and places free, every numbered seat's state
in 2 bits, from each process's copy, never more than one refresh behind."""

import base64
import time
import uuid

import pytest
from django.test import override_settings

from booking_app.models import Reservation
from queue_app import availability, events, seating
from queue_app.models import Event
from ticketing import store

pytestmark = pytest.mark.django_db(transaction=True)

MAP = {
    "sections": [
        {"id": "R", "name": "R seats", "price": 3000, "rows": [{"row": "A", "count": 6}]},
        {"id": "GA", "name": "Floor", "places": 5},
    ]
}


@pytest.fixture
def mapped(make_event):
    event = make_event()
    total = seating.seat_map_apply(event, MAP)
    Event.objects.filter(pk=event.pk).update(total_seats=total)
    event.refresh_from_db()
    events.event_publish(event)
    availability.forget()
    return event


def states(section: dict) -> list[int]:
    """A section's seats' states, decoded as a page decodes them."""
    raw = base64.b64decode(section["state"])
    return [(raw[i // 4] >> (6 - 2 * (i % 4))) & 3 for i in range(section["places"])]


def sold(event: Event, *seats: str, status: str = "CONFIRMED") -> None:
    extra = {"hold_expires_at": "2030-01-01T00:00:00Z"} if status == "HELD" else {}
    Reservation.objects.create(
        event=event,
        token=uuid.uuid4(),
        seat_count=len(seats),
        section="R",
        seats=list(seats),
        status=status,
        **extra,
    )


def test_an_event_without_a_map_is_one_unnumbered_section(api, make_event):
    event = make_event(total_seats=40)
    status, body = api.call("get", f"/api/events/{event.event_id}/seats")
    assert status == 200, body
    data = body["data"]
    assert (data["seatsLeft"], data["eventStatus"]) == (40, "OPEN")
    assert data["sections"] == [
        {
            "id": "GA",
            "price": 0,
            "places": 40,
            "free": 40,
            "numbered": False,
            "state": None,
        }
    ]


def test_each_seat_shows_free_held_sold_or_blocked(api, mapped):
    sold(mapped, "R-A-2")
    sold(mapped, "R-A-3", status="HELD")
    Reservation.objects.create(event=mapped, token=uuid.uuid4(), seat_count=2, section="GA")
    seating.seats_block(mapped, ["R-A-5"])
    # The map is put in Redis from Postgres (as after a Redis that lost it).
    store.client().delete(store.EventKeys(mapped.event_id).sections)
    events.event_publish(mapped)
    response = api.client.get(f"/api/events/{mapped.event_id}/seats")
    assert response["Cache-Control"] == "public, max-age=1"
    r, ga = response.json()["data"]["sections"]
    assert (r["id"], r["price"], r["places"], r["free"]) == ("R", 3000, 6, 3)
    assert states(r) == [0, 2, 1, 0, 3, 0]
    assert (ga["id"], ga["free"], ga["state"], ga["numbered"]) == ("GA", 3, None, False)
    assert response.json()["data"]["seatsLeft"] == 6


def test_a_copy_is_read_once_per_refresh_and_never_older(api, mapped, settings):
    with override_settings(QUEUE_LINE_REFRESH_MS=300):
        first = api.call("get", f"/api/events/{mapped.event_id}/seats")[1]["data"]
        seating.seats_block(mapped, ["R-A-1"])
        again = api.call("get", f"/api/events/{mapped.event_id}/seats")[1]["data"]
        assert again["refreshedAt"] == first["refreshedAt"]  # the copy, not Redis
        time.sleep(0.35)
        later = api.call("get", f"/api/events/{mapped.event_id}/seats")[1]["data"]
    assert later["refreshedAt"] > first["refreshedAt"]
    assert states(later["sections"][0])[0] == 3


@pytest.mark.parametrize(
    ("event_id", "status", "code"),
    [("no-such-event", 404, "EVENT_NOT_FOUND"), ("a b", 400, "VALIDATION_ERROR")],
)
def test_an_unknown_or_bad_event_is_refused(api, event_id, status, code):
    answer, body = api.call("get", f"/api/events/{event_id}/seats")
    assert (answer, body["error"]["code"]) == (status, code)
