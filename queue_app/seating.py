"""Seat maps: an event's sections, general admission or numbered seats in rows,
each with its price, read from the JSON format that docs/seat-map.schema.json
describes (examples in docs/examples/). The schema is the one description of the
format: maps are checked against it, then for what a schema cannot say (an id used
twice). A map is replaced whole, and only while none of the event's seats is held
or sold: a seat's id must mean the same seat for as long as anyone holds it."""

import functools
import json
from pathlib import Path

from django.conf import settings
from django.db import transaction
from jsonschema import Draft202012Validator

from queue_app.models import Event, Seat, Section

SCHEMA_PATH = Path(settings.BASE_DIR) / "docs" / "seat-map.schema.json"
# The errors a refusal lists: enough to fix a map, not a wall of text.
_ERRORS_SHOWN = 10


class SeatMapError(ValueError):
    """A map that cannot be the event's; its args are the reasons, one line each."""


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def seat_map_parse(data: object, *, price: int) -> list[tuple[Section, list[Seat]]]:
    """The sections and seats a map describes (unsaved); a section without a price
    has the event's `price`. SeatMapError names every problem found, by its path."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise SeatMapError(*[f"{_where(e.absolute_path)}: {e.message}" for e in errors[:_ERRORS_SHOWN]])
    parsed: list[tuple[Section, list[Seat]]] = []
    problems: list[str] = []
    codes: set[str] = set()
    for position, spec in enumerate(data["sections"]):
        if spec["id"] in codes:
            problems.append(f"sections/{position}/id: {spec['id']!r} names two sections")
        codes.add(spec["id"])
        seats: list[Seat] = []
        ids: set[str] = set()
        for n, row in enumerate(spec.get("rows", [])):
            first = row.get("first", 1)
            labels = row.get("seats") or [str(first + i) for i in range(row["count"])]
            for i, label in enumerate(labels):
                if label is None:
                    continue  # an aisle
                seat_id = f"{spec['id']}-{row['row']}-{label}"
                if seat_id in ids:
                    problems.append(f"sections/{position}/rows/{n}: seat {seat_id} is there twice")
                ids.add(seat_id)
                x, y = row.get("x", 0) + i * row.get("dx", 1), row.get("y", 0)
                seats.append(Seat(seat_id=seat_id, row=row["row"], label=label, index=len(seats), x=x, y=y))
        section = Section(
            code=spec["id"],
            name=spec["name"],
            price=spec.get("price", price),
            places=spec.get("places", len(seats)),
            numbered="rows" in spec,
            position=position,
            box=spec.get("box"),
        )
        parsed.append((section, seats))
    if problems:
        raise SeatMapError(*problems[:_ERRORS_SHOWN])
    return parsed


def seat_map_apply(event: Event, data: object) -> int:
    """Make `data` the event's map, replacing the one it had; its seats in all. Call
    it in the transaction that saves the event with that total (init_event): the
    event's row stays locked until then, so no booking takes a seat in between."""
    with transaction.atomic():
        locked = Event.objects.select_for_update().get(pk=event.pk)
        if locked.seats_sold:
            raise SeatMapError(f"{locked.seats_sold} seats are held or sold: the map cannot change now")
        parsed = seat_map_parse(data, price=locked.price)
        Section.objects.filter(event=locked).delete()
        for section, seats in parsed:
            section.event = locked
            section.save()
            for seat in seats:
                seat.section = section
            Seat.objects.bulk_create(seats, batch_size=5000)
    return sum(section.places for section, _ in parsed)


def seat_map_read(path: str) -> object:
    """A map file's JSON; SeatMapError when it cannot be read or is not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SeatMapError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SeatMapError(f"{path}: not JSON: {exc}") from None


def _where(path: object) -> str:
    return "/".join(str(p) for p in path) or "the map"
