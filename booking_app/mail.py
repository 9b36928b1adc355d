"""The booking's confirmation email, and the signed link it carries to the
booking's page, where the buyer sees and cancels it.

The link carries the reservation id signed with SECRET_KEY (django.core.signing):
whoever holds the mail holds the booking, as whoever holds the reservation number
and token does through the API. The mail goes out after the booking committed, on a
Celery worker (`confirmation_soon`, `send_confirmation`): a mail server that is slow or away never
fails or slows a booking. The row records whether it went out, so that the pages
never promise a mail that was not sent.
"""

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from celery import shared_task
from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.db import DatabaseError, close_old_connections
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation

from booking_app.models import Reservation
from ticketing import money
from ticketing.celery import app

log = logging.getLogger(__name__)

_SALT = "booking_app.mail"


def link_token(reservation_id: uuid.UUID) -> str:
    return signing.dumps(str(reservation_id), salt=_SALT)


def reservation_id_of(token: str) -> uuid.UUID | None:
    """The reservation a link names; None for a link this service did not sign.
    The link does not expire: it is the buyer's receipt for as long as the booking is."""
    try:
        return uuid.UUID(signing.loads(token, salt=_SALT))
    except (signing.BadSignature, ValueError, TypeError):
        return None


# What became of one attempt to mail a booking (the task retries the last two).
SENT, NOBODY, UNDECIDED, REFUSED = "SENT", "NOBODY", "UNDECIDED", "REFUSED"


def confirmation_send(*, reservation_id: str, base_url: str, language: str) -> str:
    """Mail the buyer their booking, once. NOBODY when there is no one to mail (no
    address, cancelled, voided, or mailed before), UNDECIDED while the booking has no
    row yet (a pending booking is decided later), REFUSED when the mail server would
    not take it."""
    row = Reservation.objects.select_related("event").filter(reservation_id=reservation_id).first()
    if row is None:
        return UNDECIDED
    if row.status != Reservation.Status.CONFIRMED or not row.buyer_email:
        return NOBODY
    if row.mail_status == Reservation.MailStatus.SENT:
        return NOBODY  # a task delivered twice mails once
    context = {
        "reservation": row,
        "link": base_url + reverse("booking-page", args=[link_token(row.reservation_id)]),
        "amount": money.shown(row.amount, row.currency) if row.amount else "",
    }
    with translation.override(language):
        subject = render_to_string("booking_app/confirmation_subject.txt", context).strip()
        body = render_to_string("booking_app/confirmation_mail.txt", context)
    try:
        send_mail(subject, body, None, [row.buyer_email])
    except OSError as exc:  # smtplib's errors are OSErrors, as are refused connections
        log.warning("confirmation of %s not sent, the mail server refused it: %r", reservation_id, exc)
        return REFUSED
    _mark(reservation_id, Reservation.MailStatus.SENT)
    return SENT


def not_sent(reservation_id: str) -> None:
    """The mail will not go out (the broker would not take it, or the mail server
    refused every try): the pages must not say it is on its way."""
    log.error("confirmation of %s not sent", reservation_id)
    try:
        _mark(reservation_id, Reservation.MailStatus.FAILED)
    except DatabaseError as exc:  # a pending booking's row is written later, or never
        log.error("confirmation of %s: not recorded as unsent: %r", reservation_id, exc)


def _mark(reservation_id: str, status: str) -> None:
    Reservation.objects.filter(reservation_id=reservation_id).update(mail_status=status)


# How many grace periods a pending booking is waited for (a day at 30 s): its
# decision (tasks.settle_pending), and its confirmation as long as its decision.
SETTLE_TRIES = 24 * 60 * 2


# Queued by this name since the task lived in booking_app/tasks.py: messages in a
# broker across an upgrade still find it.
@shared_task(name="booking_app.tasks.send_confirmation", bind=True, ignore_result=True, max_retries=None)
def send_confirmation(self, reservation_id: str, base_url: str, language: str, pending: bool = False) -> str:
    """The booking's confirmation email (booking_app/mail.py). A pending booking is
    waited for as long as reconcile may take to decide it (a decided one has its row
    already: none means nothing to mail); a mail server that refuses is tried again
    with growing pauses, and the pages say "not sent" only after the last try."""
    outcome = confirmation_send(reservation_id=reservation_id, base_url=base_url, language=language)
    tries = self.request.retries
    if outcome == UNDECIDED and pending and tries < SETTLE_TRIES:
        raise self.retry(countdown=settings.BOOKING_RECONCILE_GRACE_SEC)
    if outcome == REFUSED:
        if tries < settings.CONFIRMATION_MAIL_RETRIES:
            raise self.retry(countdown=min(600, 10 * 2**tries))  # 10 s, 20 s, 40 s, ...
        not_sent(reservation_id)
    return outcome


def confirmation_soon(
    request: HttpRequest, reservation_id: uuid.UUID | str, *, buyer_email: str, pending: bool = False
) -> None:
    """Have the booking's confirmation mailed, in the request's language, with links
    to this site as the buyer reached it (`confirmation_queue`)."""
    confirmation_queue(
        reservation_id,
        buyer_email=buyer_email,
        site=request.build_absolute_uri("/").rstrip("/"),
        language=translation.get_language() or "en",
        pending=pending,
    )


def confirmation_queue(
    reservation_id: uuid.UUID | str, *, buyer_email: str, site: str, language: str, pending: bool = False
) -> None:
    """Have the booking's confirmation mailed in `language`, with links to `site`;
    nothing when the buyer gave no address. Called once the booking is decided (it
    has committed) or known pending (the task waits for the decision); not through
    on_commit, which would ask a database that may be away. Handed to the broker
    from a thread of its own: a broker that is away (each try waits for its
    connection timeout) never slows or fails the booking; it costs the mail, and the
    row says it was not sent. So does a confirmation outside a request (checkout's
    sweep) on a server that was not told its address (SITE_URL)."""
    if not buyer_email:
        return
    if not site:
        log.error("confirmation of %s not queued: no SITE_URL to link to", reservation_id)
        not_sent(str(reservation_id))
        return
    args = (str(reservation_id), site, language)

    def enqueue() -> None:
        try:
            send_confirmation.apply_async((*args, pending), retry=False)
        except Exception as exc:  # noqa: BLE001 (the broker's errors are many kinds)
            log.error("confirmation of %s not queued, the broker is away: %r", reservation_id, exc)
            not_sent(str(reservation_id))
        finally:
            close_old_connections()  # the thread's own database connection, if it opened one

    if app.conf.task_always_eager:  # (tests that run tasks where they are queued)
        enqueue()
    else:
        _QUEUEING.submit(enqueue)


# Hands confirmations to the broker off the request's thread (a few at a time: each
# is one publish, or one connection timeout while the broker is away).
_QUEUEING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mail-queue")
