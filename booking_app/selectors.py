from django.db.models import Sum

from booking_app.models import TAKEN, Reservation


def seats_sold(event_id: str) -> int:
    """Seats of held and confirmed reservations in Postgres: the durable count."""
    return (
        Reservation.objects.filter(event_id=event_id, status__in=TAKEN).aggregate(n=Sum("seat_count"))["n"]
        or 0
    )
