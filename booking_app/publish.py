"""booking.completed: each confirmed reservation, as JSON, on the BOOKING_QUEUE queue.

Published right after the commit; if the broker is away the booking still stands,
the row keeps `published_at` unset, and `publish_pending` (every few seconds on
beat) sends it later. Consumers may see a message twice, never zero times: they key
on `reservationId`.
"""

import logging
import time

from django.conf import settings
from django.utils import timezone
from kombu import Queue

from booking_app.models import Reservation
from ticketing.celery import app

log = logging.getLogger(__name__)

# After a failure, requests stop trying the broker for this long and leave the
# messages to publish_pending: a broker outage must not slow bookings down.
_BACKOFF_SEC = 10.0
_broker_down_until = 0.0


def message(reservation: Reservation) -> dict:
    return {
        "type": "booking.completed",
        "reservationId": str(reservation.reservation_id),
        "eventId": reservation.event_id,
        "token": str(reservation.token),
        "seatCount": reservation.seat_count,
        "createdAt": reservation.created_at.isoformat(),
    }


def _send(reservations: list[Reservation]) -> None:
    queue = Queue(settings.BOOKING_QUEUE, durable=True)
    with app.producer_or_acquire() as producer:
        for reservation in reservations:
            producer.publish(
                message(reservation),
                routing_key=queue.name,
                declare=[queue],
                serializer="json",
                delivery_mode=2,
                retry=True,
                retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2},
            )


def publish_now(reservation: Reservation) -> None:
    """Called on commit from the request: best effort, never raises."""
    global _broker_down_until
    if time.monotonic() < _broker_down_until:
        return
    try:
        _send([reservation])
    except Exception as exc:  # any broker failure: publish_pending retries
        _broker_down_until = time.monotonic() + _BACKOFF_SEC
        log.warning("booking.completed for %s deferred: %s", reservation.reservation_id, exc)
        return
    Reservation.objects.filter(pk=reservation.pk).update(published_at=timezone.now())


def publish_pending(limit: int = 1000) -> int:
    """Send every confirmed reservation not yet published (oldest first)."""
    batch = list(Reservation.objects.filter(published_at__isnull=True).order_by("created_at")[:limit])
    if not batch:
        return 0
    _send(batch)
    Reservation.objects.filter(pk__in=[r.pk for r in batch]).update(published_at=timezone.now())
    return len(batch)
