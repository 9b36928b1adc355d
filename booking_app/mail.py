"""The booking's confirmation email, and the signed link it carries to the
booking's page, where the buyer sees and cancels it.

The link carries the reservation id signed with SECRET_KEY (django.core.signing):
whoever holds the mail holds the booking, as whoever holds the reservation number
and token does through the API. The mail goes out after the booking committed, on a
Celery worker (tasks.confirmation_soon): a mail server that is slow or away never
fails or slows a booking. The row records whether it went out, so that the pages
never promise a mail that was not sent.
"""

import logging
import uuid

from django.core import signing
from django.core.mail import send_mail
from django.db import DatabaseError
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation

from booking_app.models import Reservation
from ticketing import money

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
