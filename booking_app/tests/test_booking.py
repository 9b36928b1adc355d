import uuid

import pytest

from booking_app import reconcile
from booking_app.models import Reservation
from queue_app import events
from testsupport.booking import book, seats_left
from testsupport.line import unknown_token
from ticketing import store


def test_a_booking_is_confirmed_in_postgres(api, make_event, active_tokens, rc):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    status, body = book(api, token, event.event_id, 3, buyerName="Kim", buyerEmail="kim@example.com")
    assert status == 200, body
    data = body["data"]
    assert (data["seatCount"], data["remainingSeats"], data["status"]) == (3, 7, "CONFIRMED")
    row = Reservation.objects.get(reservation_id=data["reservationId"])
    assert (str(row.token), row.seat_count, row.status, row.buyer_name, row.buyer_email) == (
        token,
        3,
        "CONFIRMED",
        "Kim",
        "kim@example.com",
    )
    k = store.EventKeys(event.event_id)
    assert seats_left(event.event_id) == 7
    assert rc.get(k.booked(token)).decode() == data["reservationId"]
    assert rc.ttl(k.booked(token)) == -1  # kept for the life of the event
    assert rc.xlen(k.outbox) == 0  # confirmed: nothing left in the outbox
    assert int(rc.get(k.active)) == 0  # no longer counted as active
    polled = api.poll(token, event.event_id)[1]["data"]
    assert (polled["status"], polled["reservationId"], polled["nextPollMs"]) == (
        "BOOKED",
        data["reservationId"],
        0,
    )
    status, body = api.rejoin(token, event.event_id)
    assert (status, body["error"]["code"], body["error"]["reservationId"]) == (
        409,
        "ALREADY_BOOKED",
        data["reservationId"],
    )


def test_a_booking_confirmed_during_a_recount_leaves_its_outbox_entry_to_reconcile(
    api, make_event, active_tokens, rc
):
    """While reconcile recounts seats (its mark held), a confirmed booking's outbox
    entry stays (lua/outbox_done.lua): taken out between the recount's Postgres
    snapshot and its outbox read, the booking would count neither as sold nor as
    pending, and the recount would put its seats back on sale."""
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    k = store.EventKeys(event.event_id)
    rc.set(k.recount, "a recount in progress", px=60_000)
    try:
        status, body = book(api, token, event.event_id, 2)
        assert (status, body["data"]["status"]) == (200, "CONFIRMED")
        assert rc.xlen(k.outbox) == 1  # left for reconcile
    finally:
        rc.delete(k.recount)
    report = reconcile.booking_reconcile(event.event_id)
    assert report.consistent and report.written == []
    assert rc.xlen(k.outbox) == 0
    assert seats_left(event.event_id) == 8


def test_a_second_booking_is_already_booked_with_the_first_id(api, make_event, active_tokens):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    first = book(api, token, event.event_id, 1)[1]["data"]["reservationId"]
    status, body = book(api, token, event.event_id, 1)
    assert (status, body["error"]["code"], body["error"]["reservationId"]) == (409, "ALREADY_BOOKED", first)
    assert Reservation.objects.filter(token=token).count() == 1
    assert seats_left(event.event_id) == 9


def test_only_an_active_token_may_book(api, make_event, active_tokens, snapshot):
    event = make_event(total_seats=10)
    active_tokens(event, 1)
    waiting = api.token(event.event_id)
    for token in (waiting, unknown_token(event.event_id)):
        before = snapshot(event.event_id)
        status, body = book(api, token, event.event_id)
        assert (status, body["error"]["code"]) == (403, "NOT_ACTIVE")
        assert snapshot(event.event_id) == before
    assert not Reservation.objects.filter(event_id=event.event_id).exists()


def test_an_expired_window_may_not_book(api, make_event, active_tokens):
    import time

    event = make_event(total_seats=10, active_window_seconds=1)
    token = active_tokens(event, 1)[0]
    time.sleep(1.1)
    status, body = book(api, token, event.event_id)
    assert (status, body["error"]["code"]) == (403, "NOT_ACTIVE")
    assert seats_left(event.event_id) == 10


@pytest.mark.parametrize("status_", ["PAUSED", "CLOSED"])
def test_a_closed_or_paused_event_refuses_bookings(api, make_event, active_tokens, snapshot, status_):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    event.status = status_
    events.event_publish(event)
    before = snapshot(event.event_id)
    status, body = book(api, token, event.event_id)
    assert (status, body["error"]["code"]) == (403, "EVENT_CLOSED")
    assert snapshot(event.event_id) == before


def test_sold_out_and_insufficient_seats(api, make_event, active_tokens, snapshot):
    event = make_event(total_seats=3)
    a, b, c = active_tokens(event, 3)
    assert book(api, a, event.event_id, 2)[0] == 200
    before = snapshot(event.event_id)
    status, body = book(api, b, event.event_id, 2)
    assert (status, body["error"]["code"], body["error"]["remainingSeats"]) == (409, "INSUFFICIENT_SEATS", 1)
    assert snapshot(event.event_id) == before
    assert book(api, b, event.event_id, 1)[0] == 200
    status, body = book(api, c, event.event_id, 1)
    assert (status, body["error"]["code"]) == (409, "SOLD_OUT")
    assert seats_left(event.event_id) == 0
    assert api.poll(c, event.event_id)[1]["data"]["soldOut"] is True


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"seatCount": 0}, "VALIDATION_ERROR"),
        ({"seatCount": 5}, "VALIDATION_ERROR"),  # the event's most per booking is 4
        ({"seatCount": -1}, "VALIDATION_ERROR"),
        ({"seatCount": "2"}, "VALIDATION_ERROR"),
        ({"seatCount": 1.5}, "VALIDATION_ERROR"),
        ({"seatCount": True}, "VALIDATION_ERROR"),
        ({"seatCount": None}, "VALIDATION_ERROR"),
        ({"seatCount": 10**30}, "VALIDATION_ERROR"),
        ({}, "VALIDATION_ERROR"),
        ({"seatCount": 1, "token": "not-a-uuid"}, "VALIDATION_ERROR"),
        ({"seatCount": 1, "token": None}, "MISSING_TOKEN"),
        ({"seatCount": 1, "buyerEmail": "nope"}, "VALIDATION_ERROR"),
        ({"seatCount": 1, "buyerName": "x" * 201}, "VALIDATION_ERROR"),
        ({"seatCount": 1, "buyerName": 42}, "VALIDATION_ERROR"),
        ({"seatCount": 1, "eventId": 7}, "VALIDATION_ERROR"),
    ],
)
def test_malformed_bookings_are_400_and_change_nothing(api, make_event, active_tokens, snapshot, body, code):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    before = snapshot(event.event_id)
    status, answer = api.call("post", "/api/booking", {"token": token, "eventId": event.event_id, **body})
    assert (status, answer["error"]["code"]) == (400, code)
    assert snapshot(event.event_id) == before
    assert not Reservation.objects.exists()


def test_garbage_booking_bodies_are_400(api, make_event, active_tokens, snapshot):
    event = make_event(total_seats=10)
    active_tokens(event, 1)
    before = snapshot(event.event_id)
    for raw in (b"\x00\xff", b"[]", b"{", b'{"seatCount": 1' + b" " * 20_000 + b"}"):
        resp = api.client.post("/api/booking", data=raw, content_type="application/json")
        assert 400 <= resp.status_code < 500
        assert resp.json()["success"] is False
    assert snapshot(event.event_id) == before


def test_booking_an_unknown_event_is_404(api, db):
    status, body = book(api, unknown_token("no-such-event"), "no-such-event")
    assert (status, body["error"]["code"]) == (404, "EVENT_NOT_FOUND")


def test_the_refusal_order_follows_the_design(api, make_event, active_tokens):
    event = make_event(total_seats=1)
    token = active_tokens(event, 1)[0]
    # Not active beats a bad seat count; booked beats not active; closed beats booked.
    assert book(api, unknown_token(event.event_id), event.event_id, 99)[1]["error"]["code"] == "NOT_ACTIVE"
    book(api, token, event.event_id, 1)
    assert book(api, token, event.event_id, 99)[1]["error"]["code"] == "ALREADY_BOOKED"
    event.status = "CLOSED"
    events.event_publish(event)
    assert book(api, token, event.event_id, 1)[1]["error"]["code"] == "EVENT_CLOSED"


# --- Rate limits -------------------------------------------------------------------


def _book_from(api, token: str, event_id: str, address: str) -> tuple[int, dict]:
    body = {"token": token, "seatCount": 1, "eventId": event_id}
    return api.call("post", "/api/booking", body, REMOTE_ADDR=address)


def test_bookings_are_limited_per_address_whatever_the_tokens(api, event, settings, snapshot):
    settings.RATE_LIMIT_BOOKING = 3
    address = f"10.77.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    tokens = [api.token(event.event_id) for _ in range(4)]  # waiting: each answers NOT_ACTIVE
    answers = [_book_from(api, t, event.event_id, address)[1] for t in tokens[:3]]
    assert [a["error"]["code"] for a in answers] == ["NOT_ACTIVE"] * 3
    before = snapshot(event.event_id)
    status, body = _book_from(api, tokens[3], event.event_id, address)
    assert (status, body["error"]["code"]) == (429, "RATE_LIMIT")
    assert api.last["Retry-After"] == "1"
    assert snapshot(event.event_id) == before
    assert _book_from(api, tokens[3], event.event_id, "10.78.0.1")[1]["error"]["code"] == "NOT_ACTIVE"


def test_bookings_are_limited_per_token_whatever_the_address(api, event, settings):
    settings.RATE_LIMIT_BOOKING_TOKEN = 2
    token = api.token(event.event_id)
    codes = [
        _book_from(api, spelling, event.event_id, f"10.79.0.{i}")[1]["error"]["code"]
        for i, spelling in enumerate((token, token.upper(), token))
    ]
    assert codes == ["NOT_ACTIVE", "NOT_ACTIVE", "RATE_LIMIT"]


def test_the_booking_limits_are_on_by_default():
    from ticketing import settings as defaults  # as configured, before the tests' own

    assert (defaults.RATE_LIMIT_BOOKING, defaults.RATE_LIMIT_BOOKING_TOKEN) == (10, 2)


@pytest.mark.django_db(transaction=True)
def test_the_line_and_the_booking_say_the_same_for_the_same_code(api, make_event, active_tokens):
    """A closed or unknown event reads the same whichever service refused it."""
    from queue_app.events import event_publish
    from queue_app.models import Event

    event = make_event(total_seats=10)
    [token] = active_tokens(event, 1)
    answers = {}
    for name, event_id in (("unknown", "no-such-event"), ("closed", event.event_id)):
        if name == "closed":
            Event.objects.filter(pk=event.pk).update(status=Event.Status.CLOSED)
            event_publish(Event.objects.get(pk=event.pk))
        _, joined = api.call("post", "/api/queue/join", {"eventId": event_id})
        ticket = token if name == "closed" else unknown_token(event_id)
        _, booked = api.call("post", "/api/booking", {"eventId": event_id, "token": ticket, "seatCount": 1})
        answers[name] = (joined["error"], booked["error"])
    for joined, booked in answers.values():
        assert joined["code"] == booked["code"] and joined["message"] == booked["message"], (joined, booked)
    assert answers["unknown"][0]["code"] == "EVENT_NOT_FOUND"
    assert answers["closed"][0]["code"] == "EVENT_CLOSED"
