"""Confirmed email addresses: with ACCOUNTS_REQUIRE_CONFIRMED_EMAIL, an account holds
a place on an account-only event only once the mailbox it names has received a
link and the link was followed. A script then needs a mailbox per account, and one
mailbox confirms one account (models.ConfirmedEmail).

The link carries the account and the address, signed with SECRET_KEY and
timestamped (django.core.signing): nothing is stored until it is followed, and it
works for LINK_MAX_AGE. It is sent through Django's email backend (EMAIL_URL).
"""

import enum
import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core import signing
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse

from accounts_app.models import ConfirmedEmail
from booking_app.buyers import email_key

log = logging.getLogger(__name__)

LINK_MAX_AGE = 3 * 86_400  # three days: a mail may wait in a spam folder
_SALT = "accounts_app.confirm"


def may_hold_place(user_id: int) -> bool:
    """Whether the account may hold a place on an account-only event: always,
    unless confirmed addresses are required and it has none."""
    if not settings.ACCOUNTS_REQUIRE_CONFIRMED_EMAIL:
        return True
    return ConfirmedEmail.objects.filter(user_id=user_id).exists()


def confirmed_email(user_id: int) -> str | None:
    """The account's confirmed email address, or None: what a presale's allow-list
    of email domains reads (an address typed at sign-up and never confirmed proves
    nothing about where its owner works or studies)."""
    return ConfirmedEmail.objects.filter(user_id=user_id).values_list("email", flat=True).first()


def confirmed_address(user: AbstractBaseUser) -> str | None:
    found = ConfirmedEmail.objects.filter(user=user).values_list("email", flat=True).first()
    return found


def send_link(request: HttpRequest, user: AbstractBaseUser, email: str) -> bool:
    """Mail `email` the link that confirms it for `user`, in the request's
    language; False when the mail server would not take it (logged)."""
    token = signing.dumps([user.pk, email], salt=_SALT)
    context = {
        "username": user.get_username(),
        "link": request.build_absolute_uri(reverse("confirm-email-link", args=[token])),
        "days": LINK_MAX_AGE // 86_400,
    }
    subject = render_to_string("registration/confirm_email_subject.txt", context).strip()
    body = render_to_string("registration/confirm_email_mail.txt", context)
    try:
        send_mail(subject, body, None, [email])
    except OSError as exc:  # smtplib's errors are OSErrors, as are refused connections
        log.error("could not send the confirmation link of account %s to the mail server: %r", user.pk, exc)
        return False
    return True


class Outcome(enum.Enum):
    CONFIRMED = "confirmed"
    EXPIRED = "expired"
    INVALID = "invalid"
    TAKEN = "taken"  # the mailbox confirms another account


def confirm(token: str) -> tuple[Outcome, str]:
    """Follow a link: the outcome, and the address it was for ("" when unreadable)."""
    try:
        user_id, email = signing.loads(token, salt=_SALT, max_age=LINK_MAX_AGE)
    except signing.SignatureExpired:
        return Outcome.EXPIRED, ""
    except (signing.BadSignature, ValueError, TypeError):
        return Outcome.INVALID, ""
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        return Outcome.INVALID, ""
    mailbox = email_key(email)
    try:
        with transaction.atomic():
            ConfirmedEmail.objects.update_or_create(user=user, defaults={"email": email, "mailbox": mailbox})
            if user.email != email:
                user.email = email
                user.save(update_fields=["email"])
    except IntegrityError:
        # The mailbox's unique index: another account has it. (Or this account's own
        # link followed twice at once, which the other request confirmed.)
        if ConfirmedEmail.objects.filter(user=user, mailbox=mailbox).exists():
            return Outcome.CONFIRMED, email
        return Outcome.TAKEN, email
    return Outcome.CONFIRMED, email
