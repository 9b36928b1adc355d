"""Seat maps: an event's sections, general admission or numbered seats in rows,
each with its price, read from the JSON format that docs/seat-map.schema.json
describes (examples in docs/examples/). The schema is the one description of the
format: maps are checked against it, then for what a schema cannot say (an id used
twice). A map is replaced whole, and only while none of the event's seats is held
or sold: a seat's id must mean the same seat for as long as anyone holds it."""

import dataclasses
import functools
import json
from collections.abc import Mapping
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.module_loading import import_string
from jsonschema import Draft202012Validator

from queue_app.models import Event, Seat, Section
from ticketing import store

_SEATS_PUBLISH = store.Caller("seats_publish", passes="version state ids specs")
_SEATS_BLOCK = store.Caller("seats_block", passes="block seat_ids")
# A numbered seat's state in Redis (lua/lib/seats.lua), 2 bits.
FREE, HELD, SOLD, BLOCKED = 0, 1, 2, 3


def seat_states(raw: bytes) -> list[int]:
    """Seats' states as Redis keeps them (and GET /api/events/<id>/seats serves them):
    2 bits a seat, a byte's first seat in its high bits; 4 a byte, padding included."""
    return [byte >> shift & 3 for byte in raw for shift in (6, 4, 2, 0)]


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


@dataclasses.dataclass
class Placed:
    """An event's map as Redis keeps it (lua/lib/seats.lua): each numbered seat's
    state by position, 2 bits each; each position's seat id ('' between sections);
    and per section its spec and its blocked seats."""

    states: bytes
    ids: list[str]
    sections: list[tuple[Section, str, int]]  # section, spec, seats blocked


def seats_placed(event_id: str, taken: Mapping[str, int]) -> Placed | None:
    """The map with these seats taken (seat id -> HELD or SOLD) and the blocked ones
    blocked; None for an event without one. Each section's seats take the positions
    from its base, a multiple of 4, so that a section's states start at a byte
    (GET /api/events/<id>/seats serves them as they are)."""
    sections = list(Section.objects.filter(event__event_id=event_id).order_by("position"))
    if not sections:
        return None
    rows = (
        Seat.objects.filter(section__in=sections)
        .order_by("section__position", "index")
        .values_list("section_id", "seat_id", "row", "x", "blocked")
    )
    by_section: dict[int, list[tuple[str, str, float, bool]]] = {section.pk: [] for section in sections}
    for section_id, seat_id, row, x, blocked in rows:
        by_section[section_id].append((seat_id, row, x, blocked))
    states, ids, placed = bytearray(), [], []
    for section in sections:
        seats = by_section[section.pk]
        base, blocked = len(ids), 0
        for seat_id, _row, _x, is_blocked in seats:
            state = BLOCKED if is_blocked else taken.get(seat_id, FREE)
            blocked += is_blocked
            if len(ids) % 4 == 0:
                states.append(0)
            states[-1] |= state << (6 - 2 * (len(ids) % 4))  # a byte's first seat in its high bits
            ids.append(seat_id)
        ids.extend([""] * (-len(ids) % 4))
        spec = f"{base} {section.places} {int(section.numbered)} {section.price} {_segments(seats)}"
        placed.append((section, spec.rstrip(), blocked))
    return Placed(bytes(states), ids, placed)


def seat_map_publish(event: Event) -> int | None:
    """Put the event's map in Redis, where bookings take seats (lua/seats_publish.lua),
    unless this version of it is there already; seats left, or None without a map.
    A seat's state comes from Postgres: blocked, or held or sold by a reservation
    (settings.SEATS_TAKEN, so that the line never imports the booking app)."""
    placed = seats_placed(event.event_id, import_string(settings.SEATS_TAKEN)(event.event_id))
    if placed is None:
        return None
    specs = []
    for section, spec, blocked in placed.sections:
        specs += [section.code, spec, section.places - section.sold - blocked]
    outcome, left = store.run(
        _SEATS_PUBLISH.call(
            store.EventKeys(event.event_id),
            version=",".join(str(section.pk) for section, _, _ in placed.sections),
            state=placed.states,
            ids="".join(f"{i}," for i in placed.ids),
            specs=specs,
        )
    )
    return left


def _segments(seats: list[tuple[str, str, float, bool]]) -> str:
    """The runs of adjacent seats, in index order, as sizes: a row, or the part of a
    row between two aisles (a gap wider than the row's usual step)."""
    sizes: list[int] = []
    previous: tuple[str, float] | None = None
    steps: dict[str, float] = {}
    for (_, row, x, _), (_, next_row, next_x, _) in zip(seats, seats[1:], strict=False):
        if row == next_row and next_x > x:
            steps[row] = min(steps.get(row, next_x - x), next_x - x)
    for _, row, x, _ in seats:
        if previous is None or previous[0] != row or x - previous[1] > 1.5 * steps.get(row, 1):
            sizes.append(0)
        sizes[-1] += 1
        previous = (row, x)
    return ",".join(map(str, sizes))


def seats_block(event: Event, seat_ids: list[str], *, block: bool = True) -> list[str]:
    """Block numbered seats (keep them off sale), or release blocked ones (`block`
    False); the seats whose state Redis left as it was (a booking not decided in
    Postgres yet holds it: it will be refused there, and the seat stays taken).

    Postgres first: a seat held or sold is never blocked (SeatMapError names it),
    through the blocked seats' rows in the taken seats (booking_app/migrations/
    0011_seats.py). Redis moves within the same transaction, so that a Redis that
    cannot be reached changes nothing; a commit lost after it leaves the seat off
    sale in Redis, the safe side, until the operator tries again."""
    with transaction.atomic():
        seats = {
            s.seat_id: s
            for s in Seat.objects.select_for_update().filter(section__event=event, seat_id__in=seat_ids)
        }
        unknown = sorted(set(seat_ids) - set(seats))
        if unknown:
            raise SeatMapError(f"no such seats: {', '.join(unknown)}")
        taken = []
        for seat in seats.values():
            try:
                with transaction.atomic():
                    Seat.objects.filter(pk=seat.pk).update(blocked=block)
            except IntegrityError:
                taken.append(seat.seat_id)
        if taken:
            raise SeatMapError(f"held or sold, so not blocked: {', '.join(sorted(taken))}")
        kept: list[str] = []
        sections = sorted({seat_id.split("-", 1)[0] for seat_id in seats})
        for code in sections:
            mine = [seat_id for seat_id in seats if seat_id.split("-", 1)[0] == code]
            moved, *left_as_is = store.run(
                _SEATS_BLOCK.call(store.EventKeys(event.event_id), block=int(block), seat_ids=mine)
            )
            kept += [seat_id.decode() for seat_id in left_as_is]
    return kept
