import uuid

from django.db.models import Q, Sum

from booking_app.buyers import email_key
from booking_app.models import TAKEN, Reservation, TakenSeat
from queue_app import support
from queue_app.models import Event


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


def support_leads(event: Event, query: support.Query) -> list[support.Lead]:
    """The tokens an operator's support lookup finds through reservations
    (queue_app/support.py, settings.SUPPORT_SOURCES): by a token's first digits, by
    the buyer's email (spelled as the seat caps spell it, booking_app.buyers), by the
    account that booked. At most MAX_FOUND + 1 of each kind."""
    rows = Reservation.objects.filter(event=event).order_by("created_at")
    most = support.MAX_FOUND + 1
    found: list[tuple[uuid.UUID, str]] = []
    if query.prefix:
        begins = rows.filter(token__startswith=support.hyphenated(query.prefix))
        found += [(token, support.PREFIX) for token in begins.values_list("token", flat=True)[:most]]
    if query.email:
        bought = rows.filter(Q(buyer_key=email_key(query.email)) | Q(buyer_email__iexact=query.email))
        found += [(token, support.EMAIL) for token in bought.values_list("token", flat=True)[:most]]
    users = support.accounts(query)
    if users:
        theirs = rows.filter(user__in=users)
        found += [(token, support.ACCOUNT) for token in theirs.values_list("token", flat=True)[:most]]
    return [support.Lead(token.bytes, how) for token, how in found]


def support_bookings(event_id: str, tokens: list[str]) -> dict[str, list[support.Booked]]:
    """The reservations of these tokens, oldest first, for a support lookup
    (settings.SUPPORT_BOOKINGS)."""
    found: dict[str, list[support.Booked]] = {}
    rows = Reservation.objects.filter(event_id=event_id, token__in=tokens).order_by("created_at", "pk")
    for row in rows:
        found.setdefault(str(row.token), []).append(
            support.Booked(
                pk=row.pk,
                reservation_id=str(row.reservation_id),
                status=row.status,
                status_label=str(row.get_status_display()),
                seat_count=row.seat_count,
                created_at=row.created_at,
            )
        )
    return found
