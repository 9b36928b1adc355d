import uuid

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError

from booking_app import publish, reconcile, retention, services
from ticketing.errors import REDIS_ERRORS


@shared_task(ignore_result=True)
def publish_pending() -> int:
    return publish.publish_pending()


@shared_task(ignore_result=True)
def reconcile_all() -> dict[str, bool]:
    """Outbox settled, seats recounted from Postgres, cancellations returned: every event."""
    return reconcile.events_reconcile()


@shared_task(ignore_result=True)
def purge_closed() -> dict[str, int]:
    """Closed events' Redis data, once their grace period is over (booking_app/retention.py)."""
    return retention.events_purge()


@shared_task(bind=True, ignore_result=True, acks_late=True, max_retries=24 * 60 * 2)
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
