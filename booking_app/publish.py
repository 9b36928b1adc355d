"""booking.completed: each confirmed reservation, as JSON, on the BOOKING_QUEUE queue.

On commit the request only hands the reservation to this process's publisher
thread, which sends what has accumulated in one go and marks it published with one
UPDATE: a booking costs the broker and the database nothing extra, and a broker
outage never fails or slows a booking. Whatever is not marked published (broker
away, process died with messages in hand) is sent by `publish_pending`, every few
seconds on beat. Delivery is at least once: consumers key on `reservationId`.
"""

import logging
import queue
import threading
import time

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from kombu import Queue

from booking_app.models import Reservation
from ticketing.celery import app

log = logging.getLogger(__name__)

_BATCH = 500
# After a failure the publisher leaves messages to publish_pending for this long,
# instead of queueing up behind a dead broker.
_BACKOFF_SEC = 10.0

_pending: queue.Queue[Reservation] = queue.Queue(maxsize=10_000)
_started = threading.Lock()
_thread: threading.Thread | None = None
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
    """Publish, then mark published: a crash in between means a duplicate, not a loss."""
    target = Queue(settings.BOOKING_QUEUE, durable=True)
    with app.producer_or_acquire() as producer:
        for reservation in reservations:
            producer.publish(
                message(reservation),
                routing_key=target.name,
                declare=[target],
                serializer="json",
                delivery_mode=2,
                retry=True,
                retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2},
            )
    Reservation.objects.filter(pk__in=[r.pk for r in reservations]).update(published_at=timezone.now())


def publish_soon(reservation: Reservation) -> None:
    """Called on commit from the request: hands over and returns at once."""
    global _thread
    if _thread is None or not _thread.is_alive():
        with _started:  # one publisher per process, started after gunicorn's fork
            if _thread is None or not _thread.is_alive():
                _thread = threading.Thread(target=_publisher, name="booking-publisher", daemon=True)
                _thread.start()
    try:
        _pending.put_nowait(reservation)
    except queue.Full:
        pass  # publish_pending sends it


def _publisher() -> None:
    global _broker_down_until
    while True:
        batch = [_pending.get()]
        while len(batch) < _BATCH:
            try:
                batch.append(_pending.get_nowait())
            except queue.Empty:
                break
        try:
            if time.monotonic() >= _broker_down_until:
                close_old_connections()
                _send(batch)
        except Exception as exc:  # any broker or database failure: publish_pending retries
            _broker_down_until = time.monotonic() + _BACKOFF_SEC
            log.warning("booking.completed for %d reservations deferred: %s", len(batch), exc)
        finally:
            for _ in batch:
                _pending.task_done()


def wait_until_sent(timeout: float = 10) -> bool:
    """Block until the publisher has handled everything handed to it (shutdown, tests)."""
    deadline = time.monotonic() + timeout
    while _pending.unfinished_tasks:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def publish_pending(limit: int = 1000) -> int:
    """Send every confirmed reservation not yet published (oldest first): not a hold
    until it is paid, nor one that never was (released, or refunded unconfirmed)."""
    never = Reservation.Status.VOID, Reservation.Status.HELD, Reservation.Status.RELEASED
    unpublished = (
        Reservation.objects.filter(published_at__isnull=True)
        .exclude(status__in=never)
        .exclude(status=Reservation.Status.REFUNDED, paid_at=None)
    )
    batch = list(unpublished.order_by("created_at")[:limit])
    if batch:
        _send(batch)
    return len(batch)
