"""Postgres' own refusal of a seat sold twice (booking_app/migrations/0011_seats.py):
whatever Redis lets through, a numbered seat has one live reservation at most, a
seat the operator blocked has none, a section never has more seats taken than it
has, and a reservation names only seats of its section. Proven here on the rows
themselves, by concurrent writers each on its own connection."""

import random
import threading
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from booking_app.models import Reservation, TakenSeat
from queue_app.models import Event, Seat, Section
from testsupport import CheckedThread

pytestmark = pytest.mark.django_db(transaction=True)

HALL = Path(settings.BASE_DIR) / "docs" / "examples" / "concert-hall.json"


@pytest.fixture
def hall():
    """The example concert hall, free: its sections and seats in Postgres."""
    event_id = f"hall-{uuid.uuid4().hex[:8]}"
    call_command("init_event", event_id, "--seat-map", str(HALL), stdout=open("/dev/null", "w"))  # noqa: SIM115
    yield Event.objects.get(event_id=event_id)
    TakenSeat.objects.filter(event_id=event_id).delete()
    Reservation.objects.filter(event_id=event_id).delete()
    Event.objects.filter(event_id=event_id).delete()


def numbered(event: Event) -> Section:
    return event.sections.filter(numbered=True).first()


def book(
    event: Event, section: Section, seats: list[str], *, count: int | None = None, **fields
) -> Reservation:
    return Reservation.objects.create(
        event=event,
        token=uuid.uuid4(),
        seat_count=count or len(seats),
        section=section.code,
        seats=seats,
        **fields,
    )


def ledger(event: Event, section: Section) -> tuple[int, int, int]:
    """The event's ledger, the section's, and the seats taken."""
    event.refresh_from_db()
    section.refresh_from_db()
    return event.seats_sold, section.sold, TakenSeat.objects.filter(event=event).count()


def test_a_booking_takes_its_seats_and_gives_them_back(hall):
    section = numbered(hall)
    ids = list(section.seats.order_by("index").values_list("seat_id", flat=True)[:2])
    row = book(hall, section, ids)
    assert sorted(TakenSeat.objects.filter(reservation=row).values_list("seat_id", flat=True)) == sorted(ids)
    assert ledger(hall, section) == (2, 2, 2)

    Reservation.objects.filter(pk=row.pk).update(status=Reservation.Status.CANCELLED)
    assert ledger(hall, section) == (0, 0, 0)
    again = book(hall, section, ids)  # a seat given back sells again
    assert ledger(hall, section) == (2, 2, 2)
    Reservation.objects.filter(pk=again.pk).delete()
    assert ledger(hall, section) == (0, 0, 0)


def test_a_hold_is_taken_and_released_and_late_confirmation_takes_it_again(hall):
    section = numbered(hall)
    seat = section.seats.order_by("index").values_list("seat_id", flat=True).first()
    held = book(hall, section, [seat], status=Reservation.Status.HELD, hold_expires_at="2030-01-01T00:00:00Z")
    assert ledger(hall, section) == (1, 1, 1)
    Reservation.objects.filter(pk=held.pk).update(status=Reservation.Status.CONFIRMED)
    assert ledger(hall, section) == (1, 1, 1)  # held to confirmed moves nothing
    Reservation.objects.filter(pk=held.pk).update(status=Reservation.Status.RELEASED)
    assert ledger(hall, section) == (0, 0, 0)
    Reservation.objects.filter(pk=held.pk).update(status=Reservation.Status.CONFIRMED)
    assert ledger(hall, section) == (1, 1, 1)


def test_a_seat_taken_or_blocked_is_refused_and_nothing_changes(hall):
    section = numbered(hall)
    a, b, c = section.seats.order_by("index").values_list("seat_id", flat=True)[:3]
    book(hall, section, [a])
    Seat.objects.filter(section=section, seat_id=c).update(blocked=True)  # the operator blocked it
    assert TakenSeat.objects.filter(event=hall, seat_id=c, reservation=None).exists()
    before = ledger(hall, section)
    for seats in ([b, a], [c], [b, b]):
        with pytest.raises(IntegrityError, match="one_booking_per_seat|no_such_seat"), transaction.atomic():
            book(hall, section, seats)
    assert ledger(hall, section) == before
    assert not Reservation.objects.filter(event=hall, seats__contains=[b]).exists()
    with pytest.raises(IntegrityError, match="one_booking_per_seat"), transaction.atomic():
        Seat.objects.filter(section=section, seat_id=a).update(blocked=True)  # a sold seat is never blocked
    Seat.objects.filter(section=section, seat_id=c).update(blocked=False)
    book(hall, section, [c])  # released, it sells


def test_only_seats_of_the_section_and_one_id_per_seat(hall):
    section = numbered(hall)
    other = hall.sections.exclude(pk=section.pk).filter(numbered=True).first()
    theirs = other.seats.values_list("seat_id", flat=True).first()
    with pytest.raises(IntegrityError, match="no_such_seat"), transaction.atomic():
        book(hall, section, [theirs])
    with pytest.raises(IntegrityError, match="no_such_seat"), transaction.atomic():
        book(hall, section, ["nowhere-1-1"])
    seat = section.seats.values_list("seat_id", flat=True).first()
    with pytest.raises(IntegrityError, match="a_seat_id_per_seat"), transaction.atomic():
        book(hall, section, [seat], count=2)
    with pytest.raises(IntegrityError, match="no_such_section"), transaction.atomic():
        Reservation.objects.create(event=hall, token=uuid.uuid4(), seat_count=1, section="nope")
    assert ledger(hall, section) == (0, 0, 0)


def test_an_unnumbered_section_never_takes_more_than_its_places(hall):
    floor = hall.sections.filter(numbered=False).first()
    assert floor is not None, "the example hall has a standing floor"
    book(hall, floor, [], count=floor.places - 1)
    with pytest.raises(IntegrityError, match="section_never_oversold"), transaction.atomic():
        book(hall, floor, [], count=2)
    book(hall, floor, [], count=1)
    floor.refresh_from_db()
    assert floor.sold == floor.places


def test_concurrent_bookings_of_overlapping_seats_sell_each_seat_once(hall):
    """Many writers at once, each asking for 1-3 of a few seats: every seat ends with
    one reservation at most, and both ledgers count exactly the winners' seats."""
    section = numbered(hall)
    ids = list(section.seats.order_by("index").values_list("seat_id", flat=True)[:12])
    start = threading.Barrier(40)
    won: list[Reservation] = []
    refused: list[str] = []

    def writer(n: int) -> None:
        seats = random.Random(n).sample(ids, random.Random(n).randint(1, 3))
        start.wait()
        try:
            won.append(book(hall, section, seats))
        except IntegrityError as exc:
            assert "one_booking_per_seat" in str(exc), exc
            refused.append(str(exc))
        finally:
            connection.close()

    threads = [CheckedThread(target=writer, args=(n,), name=f"writer {n}") for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    taken = [seat for row in won for seat in row.seats]
    assert refused, "the writers raced for the same seats"
    assert len(taken) == len(set(taken)), "a seat in two live reservations"
    assert ledger(hall, section) == (len(taken), len(taken), len(taken))
