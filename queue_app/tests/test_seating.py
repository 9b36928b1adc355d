"""Seat maps (queue_app/seating.py): `init_event --seat-map` loads the documented
format (docs/seat-map.schema.json) into sections and numbered seats, refuses a map
that is not one with the reasons, and never changes a map once seats are taken."""

import copy
import json
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from jsonschema import Draft202012Validator

from queue_app import seating
from queue_app.models import Event, Seat, Section
from testsupport.booking import seats_left

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = Path(settings.BASE_DIR) / "docs" / "examples"


def example(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text())


def init(event_id: str, *args: str) -> str:
    out = StringIO()
    call_command("init_event", event_id, *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def event_id():
    name = f"map-{uuid.uuid4().hex[:8]}"
    yield name
    Event.objects.filter(event_id=name).delete()


@pytest.mark.parametrize("name", ["ktx-train.json", "concert-hall.json"])
def test_the_examples_follow_the_schema(name):
    schema = json.loads(seating.SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(schema)
    assert not list(Draft202012Validator(schema).iter_errors(example(name)))


def test_the_ktx_map_makes_its_cars_rows_and_seats(event_id):
    out = init(event_id, "--seat-map", str(EXAMPLES / "ktx-train.json"), "--price", "59800")
    event = Event.objects.get(event_id=event_id)
    # Car 1: 12 rows of A, B, C (an aisle after A); car 2: 14 rows of A-D; 20 standing.
    assert event.total_seats == 12 * 3 + 14 * 4 + 20 == seats_left(event_id)
    assert "3 sections" in out and "112 seats (112 left)" in out
    sections = list(event.sections.values_list("code", "price", "places", "numbered"))
    assert sections == [("car1", 83700, 36, True), ("car2", 59800, 56, True), ("stand", 50800, 20, False)]
    first = Seat.objects.filter(section__event=event, section__code="car1").order_by("index")
    assert [s.seat_id for s in first[:4]] == ["car1-1-A", "car1-1-B", "car1-1-C", "car1-2-A"]
    assert (first[1].x, first[1].y) == (2, 0)  # the aisle after A is a gap, not a seat
    assert Seat.objects.filter(section__event=event).count() == 92


def test_a_map_with_rows_counted_numbers_its_seats(event_id):
    init(event_id, "--seat-map", str(EXAMPLES / "concert-hall.json"))
    r = Section.objects.get(event__event_id=event_id, code="R")
    assert r.places == 100 and r.seats.first().seat_id == "R-A-1" and r.seats.last().seat_id == "R-E-20"
    balcony = Section.objects.get(event__event_id=event_id, code="BAL")
    assert balcony.seats.get(seat_id="BAL-1-11").x == 1 + 12  # after the two-seat aisle


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m: m.pop("sections"), "'sections' is a required property"),
        (lambda m: m["sections"][0].update(id="car-1"), "sections/0/id: 'car-1' does not match"),
        (lambda m: m["sections"][2].update(rows=[{"row": "1", "count": 2}]), "sections/2"),
        (lambda m: m["sections"][1].update(id="car1"), "sections/1/id: 'car1' names two sections"),
        (lambda m: m["sections"][0]["rows"][0].update(seats=["A", "A"]), "seat car1-1-A is there twice"),
        (lambda m: m["sections"][0].update(price=-1), "sections/0/price: -1 is less than the minimum"),
    ],
)
def test_a_map_that_is_not_one_is_refused_with_its_reasons_and_changes_nothing(
    event_id, tmp_path, change, reason
):
    init(event_id, "--seats", "7")
    bad = copy.deepcopy(example("ktx-train.json"))
    change(bad)
    path = tmp_path / "map.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(CommandError, match=reason):
        init(event_id, "--seat-map", str(path))
    event = Event.objects.get(event_id=event_id)
    assert event.total_seats == 7 == seats_left(event_id) and not event.sections.exists()


def test_a_file_that_is_not_there_or_not_json_is_said_so(event_id, tmp_path):
    with pytest.raises(CommandError, match="No such file"):
        init(event_id, "--seat-map", str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{sections:")
    with pytest.raises(CommandError, match="not JSON"):
        init(event_id, "--seat-map", str(tmp_path / "bad.json"))
    assert not Event.objects.filter(event_id=event_id).exists()


def test_seats_and_a_map_that_disagree_are_refused(event_id):
    with pytest.raises(CommandError, match="the seat map has 112 seats"):
        init(event_id, "--seats", "100", "--seat-map", str(EXAMPLES / "ktx-train.json"))


def test_a_map_is_not_changed_once_seats_are_taken(event_id):
    init(event_id, "--seat-map", str(EXAMPLES / "ktx-train.json"))
    Event.objects.filter(event_id=event_id).update(seats_sold=2)  # as a booking's trigger would
    with pytest.raises(CommandError, match="2 seats are held or sold: the map cannot change now"):
        init(event_id, "--seat-map", str(EXAMPLES / "concert-hall.json"))
    assert Section.objects.filter(event__event_id=event_id).count() == 3
    assert Event.objects.get(event_id=event_id).total_seats == 112


def test_an_event_without_a_map_has_no_sections(event_id):
    init(event_id, "--seats", "40")
    event = Event.objects.get(event_id=event_id)
    assert event.total_seats == 40 and not event.sections.exists()
