"""Choosing seats (lua/reserve.lua with lua/lib/seats.lua, then Postgres): seats held
by id, all or none; the best free seats picked in a section, side by side when
asked, never across an aisle; unnumbered places per section; every booking answer
naming what it holds; seats given back free at once; Postgres refusing a seat that
Redis wrongly thought free; and a crowd racing for a few seats on the production
server, each seat sold once."""

import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from io import StringIO
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.core.management import call_command

from booking_app import reconcile
from booking_app.models import TAKEN, Reservation, TakenSeat
from booking_app.services import Booking, reserve_call
from queue_app import events, seating
from queue_app.models import Event, Seat, Section
from testsupport import CheckedThread
from testsupport.booking import checkout_path, pay, row, seats_left
from testsupport.line import admit_all
from testsupport.servers import database_url_of_tests
from ticketing import store

pytestmark = pytest.mark.django_db(transaction=True)

# Row A has an aisle between its seats 3 and 4; row B has none.
ROWS = [{"row": "A", "seats": ["1", "2", "3", None, "4", "5"]}, {"row": "B", "count": 4}]
MAP = {"sections": [{"id": "R", "name": "R seats", "rows": ROWS}, {"id": "GA", "name": "Floor", "places": 5}]}
PRICED = {
    "sections": [
        {"id": "R", "name": "R seats", "price": 154_000, "rows": ROWS},
        {"id": "GA", "name": "Floor", "price": 99_000, "places": 5},
    ]
}


@pytest.fixture
def mapped(make_event, active_tokens):
    """An event with a seat map, in Postgres and Redis, and people ready to book."""

    def make(seat_map: dict = MAP, people: int = 4, **fields) -> tuple[Event, list[str]]:
        event = make_event(max_seats_per_booking=4, **fields)
        total = seating.seat_map_apply(event, seat_map)
        Event.objects.filter(pk=event.pk).update(total_seats=total)
        event.refresh_from_db()
        events.event_publish(event)
        return event, active_tokens(event, people)

    return make


def choose(api, token: str, event: Event, **fields) -> tuple[int, dict]:
    """POST /api/booking with these fields (seats, section, seatCount, together)."""
    return api.call("post", "/api/booking", {"token": token, "eventId": event.event_id, **fields})


def state(event: Event, seat_id: str) -> int:
    """A seat's state in Redis: 0 free, 1 held, 2 sold, 3 blocked."""
    k = store.EventKeys(event.event_id)
    position = int(store.client().hget(k.seat_index, seat_id))
    return store.client().bitfield(k.seat_state).get("u2", f"#{position}").execute()[0]


def places_left(event: Event, section: str) -> int:
    return int(store.client().hget(store.EventKeys(event.event_id).section_left, section))


def assert_seats_agree(event: Event) -> None:
    """Redis and Postgres tell one story: each section's places left plus its taken
    seats are its places, the sections add up to seats left, and every seat a live
    reservation holds is taken in Redis and in TakenSeat (and no other seat is)."""
    live = Reservation.objects.filter(event=event, status__in=TAKEN)
    held = [seat for seats in live.values_list("seats", flat=True) for seat in seats]
    assert len(held) == len(set(held)), "a seat in two live reservations"
    blocked = set(Seat.objects.filter(section__event=event, blocked=True).values_list("seat_id", flat=True))
    assert sorted(TakenSeat.objects.filter(event=event).values_list("seat_id", flat=True)) == sorted(
        held + list(blocked)
    )
    total = 0
    for section in Section.objects.filter(event=event):
        taken = sum(live.filter(section=section.code).values_list("seat_count", flat=True))
        off = section.seats.filter(blocked=True).count()
        assert section.sold == taken
        assert places_left(event, section.code) + taken + off == section.places, section.code
        total += places_left(event, section.code)
        for seat in section.seats.values_list("seat_id", flat=True):
            expected = 3 if seat in blocked else None
            assert (state(event, seat) != 0) == (seat in held or seat in blocked), seat
            assert expected is None or state(event, seat) == expected, seat
    assert seats_left(event.event_id) == total


def test_seats_by_id_are_held_all_or_none(api, mapped):
    event, (a, b, _, _) = mapped()
    status, body = choose(api, a, event, seats=["R-A-2"])
    assert status == 200, body
    assert (body["data"]["seats"], body["data"]["section"], body["data"]["seatCount"]) == (["R-A-2"], "R", 1)
    assert state(event, "R-A-2") == 2

    status, body = api.call(
        "post", "/api/booking", {"token": b, "eventId": event.event_id, "seats": ["R-A-1", "R-A-2"]}
    )
    assert (status, body["error"]["code"], body["error"]["seats"]) == (409, "SEAT_TAKEN", ["R-A-2"])
    assert state(event, "R-A-1") == 0, "nothing of a refused choice is held"
    assert places_left(event, "R") == 8
    status, body = api.call(
        "post", "/api/booking", {"token": b, "eventId": event.event_id, "seats": ["R-A-1"]}
    )
    assert status == 200, body  # the rest of the choice is still there to take
    assert_seats_agree(event)


def test_the_best_seats_are_picked_side_by_side_never_across_an_aisle(api, mapped):
    event, tokens = mapped(people=6)
    picks = []
    for token, count, together in ((tokens[0], 2, True), (tokens[1], 2, True), (tokens[2], 3, True)):
        payload = {
            "token": token,
            "eventId": event.event_id,
            "section": "R",
            "seatCount": count,
            "together": together,
        }
        status, body = api.call("post", "/api/booking", payload)
        assert status == 200, body
        picks.append(body["data"]["seats"])
    # Front row first; are not side by side (the aisle), so the second
    # pair is.
    assert picks == [["R-A-1", "R-A-2"], ["R-A-4", "R-A-5"], ["R-B-1", "R-B-2", "R-B-3"]]
    # Left: A-3 and B-4, not adjacent.
    payload = {
        "token": tokens[3],
        "eventId": event.event_id,
        "section": "R",
        "seatCount": 2,
        "together": True,
    }
    status, body = api.call("post", "/api/booking", payload)
    assert (status, body["error"]["code"], body["error"]["remainingSeats"]) == (409, "NO_ADJACENT_SEATS", 2)
    status, body = api.call("post", "/api/booking", {**payload, "together": False})
    assert (status, body["data"]["seats"]) == (200, ["R-A-3", "R-B-4"])
    status, body = api.call("post", "/api/booking", {**payload, "token": tokens[4], "seatCount": 1})
    assert (status, body["error"]["code"]) == (409, "SECTION_SOLD_OUT")
    assert_seats_agree(event)


def test_unnumbered_places_are_taken_per_section(api, mapped):
    event, tokens = mapped(people=4)
    status, body = choose(api, tokens[0], event, seatCount=3, section="GA")
    assert (status, body["data"]["section"], body["data"]["seats"]) == (200, "GA", [])
    status, body = choose(api, tokens[1], event, seatCount=3, section="GA")
    assert (status, body["error"]["code"], body["error"]["remainingSeats"]) == (409, "INSUFFICIENT_SEATS", 2)
    assert choose(api, tokens[1], event, seatCount=2, section="GA")[0] == 200
    status, body = choose(api, tokens[2], event, seatCount=1, section="GA")
    assert (status, body["error"]["code"]) == (409, "SECTION_SOLD_OUT")
    assert choose(api, tokens[2], event, seatCount=1, section="R")[0] == 200  # other sections still sell
    assert_seats_agree(event)


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"seats": "R-A-1"}, 400, "VALIDATION_ERROR"),
        ({"seats": []}, 400, "VALIDATION_ERROR"),
        ({"seats": ["R A 1"]}, 400, "VALIDATION_ERROR"),
        ({"seats": [7]}, 400, "VALIDATION_ERROR"),
        ({"seats": ["R-A-1"], "seatCount": 2}, 400, "VALIDATION_ERROR"),
        ({"seats": ["R-A-1"], "together": True}, 400, "VALIDATION_ERROR"),
        ({"seats": ["R-A-1", "R-A-1"]}, 400, "VALIDATION_ERROR"),
        ({"seats": ["R-A-1", "GA-1-1"]}, 400, "VALIDATION_ERROR"),
        ({"seats": ["R-A-1"], "section": "GA"}, 400, "VALIDATION_ERROR"),
        ({"seats": ["R-Z-9"]}, 404, "SEAT_NOT_FOUND"),
        ({"section": "VIP", "seatCount": 1}, 404, "SECTION_NOT_FOUND"),
        ({"section": "R-1", "seatCount": 1}, 400, "VALIDATION_ERROR"),
        ({"section": "R", "seatCount": 1, "together": "yes"}, 400, "VALIDATION_ERROR"),
        ({"seatCount": 1}, 400, "VALIDATION_ERROR"),  # an event with a map: which section?
        ({"section": "R", "seatCount": 5}, 400, "VALIDATION_ERROR"),  # past the most per booking
        ({"section": "R"}, 400, "VALIDATION_ERROR"),
    ],
)
def test_a_bad_choice_is_refused_and_changes_nothing(api, mapped, fields, status, code):
    event, (token, *_) = mapped(people=1)
    before = (seats_left(event.event_id), places_left(event, "R"), places_left(event, "GA"))
    answer, body = api.call("post", "/api/booking", {"token": token, "eventId": event.event_id, **fields})
    assert (answer, body["error"]["code"]) == (status, code), body
    assert (seats_left(event.event_id), places_left(event, "R"), places_left(event, "GA")) == before
    assert not Reservation.objects.filter(event=event).exists()
    assert choose(api, token, event, seats=["R-A-1"])[0] == 200  # the token may still book


def test_the_ktx_example_sells_seats_by_id_and_the_best_free_ones(api, active_tokens):
    """The default event's kind of sale: init_event with docs/examples/ktx-train.json."""
    event_id = f"ktx-{uuid.uuid4().hex[:8]}"
    ktx = Path(settings.BASE_DIR) / "docs" / "examples" / "ktx-train.json"
    call_command("init_event", event_id, "--seat-map", str(ktx), "--max-per-booking", "4", stdout=StringIO())
    event = Event.objects.get(event_id=event_id)
    try:
        a, b, c = active_tokens(event, 3)
        status, body = choose(api, a, event, seats=["car1-1-A", "car1-1-B"])
        assert (status, body["data"]["section"], body["data"]["seats"]) == (
            200,
            "car1",
            ["car1-1-A", "car1-1-B"],
        )
        status, body = choose(api, b, event, section="car1", seatCount=2, together=True)
        # Row 1 has A, an aisle, then B and C: B is taken, so C alone is left there.
        assert (status, body["data"]["seats"]) == (200, ["car1-2-B", "car1-2-C"]), body
        status, body = choose(api, c, event, section="stand", seatCount=3)
        assert (status, body["data"]["section"], body["data"]["seats"]) == (200, "stand", [])
        assert_seats_agree(event)
    finally:
        events.event_wipe(event_id)
        Reservation.objects.filter(event=event).delete()
        event.delete()


def test_seats_on_an_event_without_a_map_are_refused(api, make_event, active_tokens):
    event = make_event(total_seats=10)
    (token,) = active_tokens(event, 1)
    status, body = choose(api, token, event, seats=["A-1-1"])
    assert (status, body["error"]["code"]) == (400, "VALIDATION_ERROR")
    status, body = choose(api, token, event, seatCount=1)
    assert status == 200 and "seats" not in body["data"] and "section" not in body["data"], body


def test_a_cancelled_booking_frees_its_seats_at_once(api, mapped):
    event, (a, b, *_) = mapped()
    status, body = choose(api, a, event, seats=["R-B-1", "R-B-2"])
    assert status == 200, body
    rid = body["data"]["reservationId"]
    status, body = api.call("get", f"/api/booking/{rid}?token={a}")
    assert (status, body["data"]["section"], body["data"]["seats"]) == (200, "R", ["R-B-1", "R-B-2"])
    status, body = api.call("delete", f"/api/booking/{rid}?token={a}")
    assert status == 200, body
    assert (state(event, "R-B-1"), state(event, "R-B-2")) == (0, 0)
    assert choose(api, b, event, seats=["R-B-2"])[0] == 200
    assert_seats_agree(event)


def test_a_hold_is_priced_by_its_section_and_shown_held_until_paid(api, mapped, priced, settings):
    settings.PAYMENTS_PROVIDER = settings.PAYMENTS_PROVIDER or "test"
    event, (a, b, *_) = mapped(PRICED, price=55_000, currency="KRW", hold_seconds=600)
    status, body = choose(api, a, event, seatCount=2, section="R", together=True)
    assert (status, body["data"]["status"], body["data"]["amount"]) == (200, "HELD", 2 * 154_000), body
    assert [state(event, seat) for seat in body["data"]["seats"]] == [1, 1]  # held
    held = body["data"]
    assert pay(checkout_path(held)).status_code in (200, 302)
    assert row(held["reservationId"]).status == "CONFIRMED"
    assert [state(event, seat) for seat in held["seats"]] == [2, 2]  # sold, once paid
    status, body = choose(api, b, event, seatCount=1, section="GA")
    assert (body["data"]["amount"], body["data"]["currency"]) == (99_000, "KRW")
    rid = body["data"]["reservationId"]
    assert Reservation.objects.get(reservation_id=rid).amount == 99_000
    assert_seats_agree(event)


def test_postgres_refuses_a_seat_redis_wrongly_thought_free(api, mapped):
    """Redis lost a booking of R-A-1 (its seat shows free there): Postgres still
    refuses a second reservation of it, the buyer hears SEAT_TAKEN, and the seat
    stays taken in Redis."""
    event, (a, b, *_) = mapped()
    assert choose(api, a, event, seats=["R-A-1"])[0] == 200
    k = store.EventKeys(event.event_id)
    position = int(store.client().hget(k.seat_index, "R-A-1"))
    store.client().bitfield(k.seat_state).set("u2", f"#{position}", 0).execute()
    store.client().hincrby(k.section_left, "R", 1)
    store.client().incr(k.seats)

    status, body = choose(api, b, event, seats=["R-A-1"])
    assert (status, body["error"]["code"], body["error"]["seats"]) == (409, "SEAT_TAKEN", ["R-A-1"])
    assert Reservation.objects.filter(event=event, status__in=TAKEN).count() == 1
    assert state(event, "R-A-1") != 0


def test_a_map_lost_with_redis_comes_back_from_postgres(api, mapped):
    event, (a, b, *_) = mapped()
    assert choose(api, a, event, seats=["R-A-1", "R-B-4"])[0] == 200
    assert choose(api, b, event, seatCount=2, section="GA")[0] == 200
    k = store.EventKeys(event.event_id)
    store.client().delete(k.sections, k.seat_index, k.seat_state, k.section_left, k.seats)
    events.event_publish(event)
    assert (state(event, "R-A-1"), state(event, "R-B-4"), state(event, "R-A-2")) == (2, 2, 0)
    assert (places_left(event, "R"), places_left(event, "GA"), seats_left(event.event_id)) == (7, 3, 10)
    assert_seats_agree(event)


def test_blocked_seats_are_off_sale_until_released(api, mapped):
    event, (a, b, c, _) = mapped()
    assert choose(api, a, event, seats=["R-A-2"])[0] == 200
    with pytest.raises(seating.SeatMapError, match="R-A-2"):
        seating.seats_block(event, ["R-A-1", "R-A-2"])  # a sold seat is never blocked; nor, then, the rest
    assert state(event, "R-A-1") == 0
    assert seating.seats_block(event, ["R-A-1", "R-B-1"]) == []
    assert (state(event, "R-A-1"), places_left(event, "R"), seats_left(event.event_id)) == (3, 6, 11)
    status, body = choose(api, b, event, seats=["R-A-1"])
    assert (status, body["error"]["code"], body["error"]["seats"]) == (409, "SEAT_TAKEN", ["R-A-1"])
    status, body = choose(api, b, event, section="R", seatCount=1)
    assert (status, body["data"]["seats"]) == (200, ["R-A-3"])  # the best seat not blocked
    assert_seats_agree(event)
    with pytest.raises(seating.SeatMapError, match="no such seats: R-Z-1"):
        seating.seats_block(event, ["R-Z-1"])
    assert seating.seats_block(event, ["R-A-1"], block=False) == []
    assert choose(api, c, event, seats=["R-A-1"])[0] == 200
    assert_seats_agree(event)


def test_reconcile_recounts_the_map_from_postgres_and_the_outbox(api, mapped):
    """Redis' map drifted (a sold seat shown free, a free one held, places miscounted):
    the recount sets every seat and section from Postgres, counting a booking still
    between Redis and Postgres (in the outbox) and the blocked seats as taken."""
    event, (a, b, c, _) = mapped()
    assert choose(api, a, event, seats=["R-A-1"])[0] == 200
    assert choose(api, b, event, section="GA", seatCount=2)[0] == 200
    seating.seats_block(event, ["R-B-4"])
    stranded = Booking(uuid.uuid4(), event.event_id, c, 1, seat_ids=("R-B-1",))
    assert store.run(reserve_call(stranded)).outcome == b"OK"  # its process died before Postgres
    k = store.EventKeys(event.event_id)
    for seat, value in (("R-A-1", 0), ("R-A-2", 1)):
        store.client().bitfield(k.seat_state).set(
            "u2", f"#{int(store.client().hget(k.seat_index, seat))}", value
        ).execute()
    store.client().hincrby(k.section_left, "R", 3)
    store.client().hincrby(k.section_left, "GA", -1)

    report = reconcile.booking_reconcile(event.event_id)
    assert (report.verdict, report.map_healed) == ("HEALED", ["seats", "R", "GA"])
    assert [state(event, seat) for seat in ("R-A-1", "R-A-2", "R-B-1", "R-B-4")] == [2, 0, 2, 3]
    assert (places_left(event, "R"), places_left(event, "GA"), seats_left(event.event_id)) == (6, 3, 9)
    assert reconcile.booking_reconcile(event.event_id).map_healed == []  # right now: nothing to correct


def test_a_seat_sold_again_is_not_shown_free_by_a_give_back_redis_forgot(api, mapped):
    """Redis back from a snapshot taken before a cancellation of R-A-1 whose seat was
    sold again since: the give-back reconcile makes again counts the seat back but
    does not show it free, since another buyer holds it, and nothing is left to heal."""
    event, (a, b, *_) = mapped()
    status, body = choose(api, a, event, seats=["R-A-1"])
    assert status == 200, body
    k = store.EventKeys(event.event_id)
    names = (k.seats, k.section_left, k.seat_state, k.returned)
    snapshot = {name: store.client().dump(name) for name in names}
    assert api.call("delete", f"/api/booking/{body['data']['reservationId']}?token={a}")[0] == 200
    assert choose(api, b, event, seats=["R-A-1"])[0] == 200
    for name, value in snapshot.items():  # the snapshot: R-A-1 a's, its give-back never made
        store.client().delete(name)
        if value is not None:
            store.client().restore(name, 0, value)

    reconcile.booking_reconcile(event.event_id)
    assert state(event, "R-A-1") == 2  # b's
    assert reconcile.booking_reconcile(event.event_id).verdict == "consistent"
    assert_seats_agree(event)


def _post(base: str, payload: dict) -> tuple[int, dict]:
    resp = requests.post(f"{base}/api/booking", json=payload, timeout=60)
    return resp.status_code, resp.json()


def test_a_crowd_racing_for_a_few_seats_sells_each_once(postgres, gunicorn, make_event, active_tokens):
    """200 buyers at once on the production server, for the same 20 seats (two rows
    of 10, an aisle in the middle): each chooses 1-2 seats by id, or asks for the best
    1-3 (side by side or not). Every seat is sold once, every answer says what its
    buyer got, and Redis and Postgres agree at the end."""
    event = make_event(max_seats_per_booking=4, admit_per_second=200)
    labels = ["1", "2", "3", "4", "5", None, "6", "7", "8", "9", "10"]
    crowd = {"sections": [{"id": "R", "name": "R", "rows": [{"row": r, "seats": labels} for r in "AB"]}]}
    total = seating.seat_map_apply(event, crowd)
    assert total == 20
    Event.objects.filter(pk=event.pk).update(total_seats=total)
    event.refresh_from_db()
    events.event_publish(event)
    tokens = active_tokens(event, 200)
    admit_all(event.event_id)
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests()})
    ids = list(Section.objects.get(event=event, code="R").seats.values_list("seat_id", flat=True))
    start = threading.Barrier(40)
    lock = threading.Lock()

    def ask(i: int) -> dict:
        rng = random.Random(i)
        if rng.random() < 0.5:
            return {"seats": rng.sample(ids, rng.randint(1, 2))}
        return {"section": "R", "seatCount": rng.randint(1, 3), "together": rng.random() < 0.5}

    def buyer(i: int) -> tuple[dict, int, dict]:
        if i < 40:
            start.wait(timeout=30)
        asked = ask(i)
        status, body = _post(base, {"token": tokens[i], "eventId": event.event_id, **asked})
        with lock:
            return asked, status, body

    with ThreadPoolExecutor(max_workers=40) as pool:
        answers = list(pool.map(buyer, range(200)))
    rows = {str(r.reservation_id): r for r in Reservation.objects.filter(event=event)}
    codes = set()
    for asked, _status, body in answers:
        code = "OK" if body.get("success") else body["error"]["code"]
        codes.add(code)
        if code == "OK":
            row = rows[body["data"]["reservationId"]]
            assert row.status == "CONFIRMED" and list(row.seats) == body["data"]["seats"], body
            assert row.section == body["data"]["section"] == (asked.get("section") or "R")
            if "seats" in asked:
                assert body["data"]["seats"] == asked["seats"]
        elif code == "SEAT_TAKEN":
            assert set(body["error"]["seats"]) <= set(asked["seats"]), body
        else:
            assert code in {"SECTION_SOLD_OUT", "INSUFFICIENT_SEATS", "NO_ADJACENT_SEATS", "SOLD_OUT"}, body
    assert "SEAT_TAKEN" in codes, "the buyers raced for the same seats"
    sold = Reservation.objects.filter(event=event, status__in=TAKEN)
    assert sum(sold.values_list("seat_count", flat=True)) == Event.objects.get(pk=event.pk).seats_sold
    assert_seats_agree(event)
    assert uuid  # (ids of rows are UUIDs; read as text above)


def test_threads_errors_fail_the_test_here_too():
    """The crowd test's threads report through the pool: an exception in one is raised
    by pool.map in the test's thread, as CheckedThread does for bare threads."""
    failing = CheckedThread(target=lambda: 1 / 0, name="a failing buyer")
    failing.start()
    with pytest.raises(AssertionError, match="a failing buyer"):
        failing.join(5)
