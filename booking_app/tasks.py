import logging
import uuid

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, transaction
from django.http import HttpRequest
from django.utils import translation

from booking_app import mail, publish, reconcile, retention, services
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


@shared_task(ignore_result=True)
def send_confirmation(reservation_id: str, base_url: str, language: str) -> bool:
    """The booking's confirmation email (booking_app/mail.py)."""
    return mail.confirmation_send(reservation_id=reservation_id, base_url=base_url, language=language)


def confirmation_soon(request: HttpRequest, reservation_id: uuid.UUID) -> None:
    """Have the confirmation mailed once the booking is committed, in the request's
    language, with links to this site as the buyer reached it. A broker that is away
    costs the mail, never the booking: the row says it was not sent."""
    base_url = request.build_absolute_uri("/").rstrip("/")
    language = translation.get_language() or "en"

    def enqueue() -> None:
        try:
            send_confirmation.apply_async((str(reservation_id), base_url, language), retry=False)
        except Exception as exc:  # noqa: BLE001 (the broker's errors are many kinds)
            log.error("confirmation of %s not queued, the broker is away: %r", reservation_id, exc)
            mail.not_queued(str(reservation_id))

    transaction.on_commit(enqueue)
