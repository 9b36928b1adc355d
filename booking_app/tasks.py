import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.http import HttpRequest
from django.utils import translation

from booking_app import checkout, mail, publish, reconcile, retention, services
from ticketing.celery import app
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


# How many grace periods a pending booking is waited for (a day at 30 s): its
# confirmation waits as long as its decision.
_SETTLE_TRIES = 24 * 60 * 2


@shared_task(bind=True, ignore_result=True, acks_late=True, max_retries=_SETTLE_TRIES)
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


@shared_task(bind=True, ignore_result=True, max_retries=None)
def send_confirmation(self, reservation_id: str, base_url: str, language: str, pending: bool = False) -> str:
    """The booking's confirmation email (booking_app/mail.py). A pending booking is
    waited for as long as reconcile may take to decide it (a decided one has its row
    already: none means nothing to mail); a mail server that refuses is tried again
    with growing pauses, and the pages say "not sent" only after the last try."""
    outcome = mail.confirmation_send(reservation_id=reservation_id, base_url=base_url, language=language)
    tries = self.request.retries
    if outcome == mail.UNDECIDED and pending and tries < _SETTLE_TRIES:
        raise self.retry(countdown=settings.BOOKING_RECONCILE_GRACE_SEC)
    if outcome == mail.REFUSED:
        if tries < settings.CONFIRMATION_MAIL_RETRIES:
            raise self.retry(countdown=min(600, 10 * 2**tries))  # 10 s, 20 s, 40 s, ...
        mail.not_sent(reservation_id)
    return outcome


def confirmation_soon(
    request: HttpRequest, reservation_id: uuid.UUID | str, *, buyer_email: str, pending: bool = False
) -> None:
    """Have the booking's confirmation mailed, in the request's language, with links
    to this site as the buyer reached it; nothing when the buyer gave no address.
    Called once the booking is decided (booking_reserve has committed) or known
    pending (the task waits for the decision); not through on_commit, which would ask
    a database that may be away. Handed to the broker from a thread of its own: a
    broker that is away (each try waits for its connection timeout) never slows or
    fails the booking; it costs the mail, and the row says it was not sent."""
    if not buyer_email:
        return
    base_url = request.build_absolute_uri("/").rstrip("/")
    args = (str(reservation_id), base_url, translation.get_language() or "en")

    def enqueue() -> None:
        try:
            send_confirmation.apply_async((*args, pending), retry=False)
        except Exception as exc:  # noqa: BLE001 (the broker's errors are many kinds)
            log.error("confirmation of %s not queued, the broker is away: %r", reservation_id, exc)
            mail.not_sent(str(reservation_id))
        finally:
            close_old_connections()  # the thread's own database connection, if it opened one

    if app.conf.task_always_eager:  # (tests that run tasks where they are queued)
        enqueue()
    else:
        _QUEUEING.submit(enqueue)


# Hands confirmations to the broker off the request's thread (a few at a time: each
# is one publish, or one connection timeout while the broker is away).
_QUEUEING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mail-queue")
