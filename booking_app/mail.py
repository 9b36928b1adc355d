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
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation

from booking_app.models import Reservation

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


def confirmation_send(*, reservation_id: str, base_url: str, language: str) -> bool:
    """Mail the buyer their booking; False when there is no one to mail or the mail
    server would not take it (logged, and recorded on the row for the pages)."""
    reservation = (
        Reservation.objects.select_related("event")
        .filter(reservation_id=reservation_id, status=Reservation.Status.CONFIRMED)
        .exclude(buyer_email="")
        .first()
    )
    if reservation is None:
        return False
    context = {
        "reservation": reservation,
        "link": base_url + reverse("booking-page", args=[link_token(reservation.reservation_id)]),
    }
    with translation.override(language):
        subject = render_to_string("booking_app/confirmation_subject.txt", context).strip()
        body = render_to_string("booking_app/confirmation_mail.txt", context)
    try:
        send_mail(subject, body, None, [reservation.buyer_email])
    except OSError as exc:  # smtplib's errors are OSErrors, as are refused connections
        log.error("confirmation of %s not sent, the mail server refused it: %r", reservation_id, exc)
        _mark(reservation_id, Reservation.MailStatus.FAILED)
        return False
    _mark(reservation_id, Reservation.MailStatus.SENT)
    return True


def not_queued(reservation_id: str) -> None:
    """The broker would not take the mail: the pages must not say it is on its way."""
    _mark(reservation_id, Reservation.MailStatus.FAILED)


def _mark(reservation_id: str, status: str) -> None:
    Reservation.objects.filter(reservation_id=reservation_id).update(mail_status=status)
