import uuid

from django.db.models import Sum

from booking_app.models import TAKEN, Reservation, TakenSeat


def seats_sold(event_id: str) -> int:
    """Seats of held and confirmed reservations in Postgres: the durable count."""
    return (
        Reservation.objects.filter(event_id=event_id, status__in=TAKEN).aggregate(n=Sum("seat_count"))["n"]
        or 0
    )


def reservation_status(reservation_id: str) -> str | None:
    """A reservation's status as Postgres has it (HELD, CONFIRMED, ...): one read on
    the unique index of reservation_id. None when there is no such row: a booking
    answered BOOKING_PENDING has none until reconcile writes it, and a mark that is
    not a UUID names none. The line asks it for a BOOKED poll (settings.RESERVATION_STATUS)."""
    try:
        rid = uuid.UUID(reservation_id)
    except ValueError:
        return None
    try:
        return Reservation.objects.values_list("status", flat=True).get(reservation_id=rid)
    except Reservation.DoesNotExist:
        return None


def seats_taken(event_id: str) -> dict[str, int]:
    """The event's numbered seats that reservations hold (1) or sold (2), by seat id,
    in the states of lua/lib/seats.lua; the seat map asks it when it is put in Redis
    (settings.SEATS_TAKEN)."""
    rows = TakenSeat.objects.filter(event_id=event_id, reservation__isnull=False)
    return {
        seat: 1 if status == Reservation.Status.HELD else 2
        for seat, status in rows.values_list("seat_id", "reservation__status")
    }
