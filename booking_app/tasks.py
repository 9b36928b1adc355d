import logging
import uuid

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError

from booking_app import checkout, mail, publish, reconcile, retention, services
from ticketing.errors import REDIS_ERRORS

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def publish_pending() -> int:
    return publish.publish_pending()


@shared_task(ignore_result=True)
def reconcile_all() -> dict[str, bool]:
    """Outbox settled, seats recounted from Postgres, cancellations returned: every event."""
    return reconcile.events_reconcile()


@shared_task(ignore_result=True)
def holds_expire() -> int:
    """Holds whose time ran out, released (or, paid in time, confirmed), then the
    seats still held noted for the polls: checkout.py."""
    ended = checkout.holds_expire()
    checkout.holds_note()
    return ended


@shared_task(ignore_result=True)
def refunds_retry() -> int:
    return checkout.refunds_retry()


@shared_task(ignore_result=True)
def purge_closed() -> dict[str, int]:
    """Closed events' Redis data, once their grace period is over (booking_app/retention.py)."""
    return retention.events_purge()


@shared_task(bind=True, ignore_result=True, acks_late=True, max_retries=mail.SETTLE_TRIES)
def settle_pending(self, event_id: str, reservation_id: str, token: str, seat_count: int) -> str:
    """A booking answered BOOKING_PENDING, decided even if Redis lost it
    (services.settle_unheard); asked again every grace period while it cannot be."""
    b = services.Booking(uuid.UUID(reservation_id), event_id, token, seat_count)
    try:
        outcome = services.settle_unheard(b)
    except (DatabaseError, *REDIS_ERRORS):
        outcome = None
    if outcome is None:
        raise self.retry(countdown=settings.BOOKING_RECONCILE_GRACE_SEC)
    return outcome
