"""GET /api/events/<id>/seat-map (queue_app/layout.py): an event's map as a browser
draws it. Each seat's id is rebuilt from its section, row and label, in the order of
its index (its bit in the section's state); aisles are gaps, not seats; an event
without a map is one unnumbered section; the browser keeps the answer (Cache-Control)
and asks again with its ETag (304). The production server answers it the same."""

import hashlib
import json
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from queue_app.models import Event, Seat, Section
from testsupport.clients import ServerClient
from ticketing.tests.test_contract import Call, assert_documented

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = Path(settings.BASE_DIR) / "docs" / "examples"
MAPS = ["ktx-train.json", "concert-hall.json"]


def init(event_id: str, *args: str) -> None:
    call_command("init_event", event_id, *args, stdout=StringIO())


def seat_map(client: Client | ServerClient, event_id: str, **headers: str):
    return client.generic("GET", f"/api/events/{event_id}/seat-map", **headers)


@pytest.fixture
def event_id():
    name = f"layout-{uuid.uuid4().hex[:8]}"
    yield name
    Event.objects.filter(event_id=name).delete()


@pytest.mark.parametrize("name", MAPS)
def test_each_seat_id_is_rebuilt_in_index_order(client, event_id, name):
    init(event_id, "--seat-map", str(EXAMPLES / name))
    response = seat_map(client, event_id)
    assert response.status_code == 200, response.content
    data = response.json()["data"]
    event = Event.objects.get(event_id=event_id)
    assert (data["eventId"], data["currency"]) == (event_id, event.currency)
    sections = Section.objects.filter(event=event).order_by("position")
    assert [s["id"] for s in data["sections"]] == [s.code for s in sections]
    for shown, section in zip(data["sections"], sections, strict=True):
        assert (shown["name"], shown["price"], shown["places"], shown["numbered"], shown["box"]) == (
            section.name,
            section.price,
            section.places,
            section.numbered,
            section.box,
        )
        seats = list(
            Seat.objects.filter(section=section).order_by("index").values_list("index", "seat_id", "x", "y")
        )
        drawn = [
            (f"{section.code}-{row['row']}-{label}", x, row["y"])
            for row in shown["rows"]
            for label, x in zip(row["labels"], row["xs"], strict=True)
        ]
        assert drawn == [(seat_id, x, y) for _, seat_id, x, y in seats]
        assert [index for index, *_ in seats] == list(range(len(seats)))  # a running position
        assert len(drawn) == (section.places if section.numbered else 0)


def test_aisles_are_gaps_not_seats(client, event_id):
    init(event_id, "--seat-map", str(EXAMPLES / "ktx-train.json"), "--price", "59800")
    car1, car2, stand = seat_map(client, event_id).json()["data"]["sections"]
    assert len(car1["rows"]) == 12 and len(car2["rows"]) == 14
    assert car1["rows"][2] == {"row": "3", "y": 2.0, "labels": ["A", "B", "C"], "xs": [0.0, 2.0, 3.0]}
    assert car2["rows"][0] == {
        "row": "1",
        "y": 14.0,
        "labels": ["A", "B", "C", "D"],
        "xs": [0.0, 1.0, 3.0, 4.0],
    }
    assert stand == {
        "id": "stand",
        "name": "Standing (car 2 vestibule)",
        "price": 50800,
        "places": 20,
        "numbered": False,
        "box": {"x": 0, "y": 29, "width": 5, "height": 3},
        "rows": [],
    }


def test_rows_counted_are_numbered_and_a_two_seat_aisle_is_skipped(client, event_id):
    init(event_id, "--seat-map", str(EXAMPLES / "concert-hall.json"))
    floor, r, _, balcony = seat_map(client, event_id).json()["data"]["sections"]
    assert (floor["numbered"], floor["places"], floor["rows"]) == (False, 200, [])
    assert r["rows"][0]["labels"] == [str(n) for n in range(1, 21)] and r["rows"][0]["xs"][0] == 2.0
    first = balcony["rows"][0]
    assert first["labels"] == [str(n) for n in range(1, 21)]
    assert first["xs"] == [float(x) for x in [*range(1, 11), *range(13, 23)]]


@pytest.mark.parametrize("name", MAPS)
def test_three_queries_whatever_the_seats(client, event_id, name, django_assert_max_num_queries):
    init(event_id, "--seat-map", str(EXAMPLES / name))
    with django_assert_max_num_queries(3):  # the event, its sections, their seats
        assert seat_map(client, event_id).status_code == 200


def test_an_event_without_a_map_is_one_unnumbered_section(client, event_id, django_assert_max_num_queries):
    init(event_id, "--seats", "40", "--price", "55000")
    with django_assert_max_num_queries(2):
        response = seat_map(client, event_id)
    assert response.json() == {
        "success": True,
        "data": {
            "eventId": event_id,
            "currency": "KRW",
            "sections": [
                {
                    "id": "GA",
                    "name": "General admission",
                    "price": 55000,
                    "places": 40,
                    "numbered": False,
                    "box": None,
                    "rows": [],
                }
            ],
        },
    }
    korean = seat_map(client, event_id, HTTP_ACCEPT_LANGUAGE="ko")
    assert korean.json()["data"]["sections"][0]["name"] == "비지정석"
    assert korean["ETag"] != response["ETag"]
    assert {"Accept-Language", "Cookie"} <= {v.strip() for v in response["Vary"].split(",")}


def test_an_unknown_event_is_not_found_in_the_envelope(client):
    response = seat_map(client, "no-such-event")
    assert response.status_code == 404
    assert response.json() == {
        "success": False,
        "error": {"code": "EVENT_NOT_FOUND", "message": "No such event."},
    }
    assert "ETag" not in response and "Cache-Control" not in response


@pytest.mark.parametrize("bad", ["bad!id", "-leading", "x" * 65, "caf%C3%A9"])
def test_a_malformed_event_id_is_refused(client, bad):
    response = seat_map(client, bad)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_the_browser_keeps_it_and_asks_again_with_its_etag(client, event_id):
    init(event_id, "--seat-map", str(EXAMPLES / "ktx-train.json"))
    first = seat_map(client, event_id)
    etag = first["ETag"]
    assert etag == f'"{hashlib.sha256(first.content).hexdigest()}"'  # strong: a hash of the body
    assert {v.strip() for v in first["Cache-Control"].split(",")} == {"public", "max-age=300"}

    again = seat_map(client, event_id, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b""
    assert (again["ETag"], again["Cache-Control"]) == (etag, first["Cache-Control"])
    assert seat_map(client, event_id, HTTP_IF_NONE_MATCH='"another"').status_code == 200

    # A new map, or a new price, is a new body and a new ETag.
    init(event_id, "--seat-map", str(EXAMPLES / "concert-hall.json"))
    replaced = seat_map(client, event_id, HTTP_IF_NONE_MATCH=etag)
    assert replaced.status_code == 200 and replaced["ETag"] != etag
    Section.objects.filter(event__event_id=event_id, code="R").update(price=160000)
    repriced = seat_map(client, event_id, HTTP_IF_NONE_MATCH=replaced["ETag"])
    assert repriced.status_code == 200 and repriced["ETag"] != replaced["ETag"]


def test_the_production_server_answers_as_django_does(client, production_server, event_id):
    init(event_id, "--seat-map", str(EXAMPLES / "ktx-train.json"))
    server = ServerClient(production_server)
    path = f"/api/events/{event_id}/seat-map"
    answers = [seat_map(lane, event_id) for lane in (client, server)]
    for response in answers:
        assert response.status_code == 200, response.content
        assert_documented(Call("GET", path), response)
    assert json.loads(answers[0].content) == json.loads(answers[1].content)
    assert answers[0]["ETag"] == answers[1]["ETag"]
    assert seat_map(server, event_id, HTTP_IF_NONE_MATCH=answers[1]["ETag"]).status_code == 304

    for bad, status in (("no-such-event", 404), ("bad!id", 400)):
        response = seat_map(server, bad)
        assert response.status_code == status
        assert_documented(Call("GET", f"/api/events/{bad}/seat-map"), response)
