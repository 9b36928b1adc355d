"""Reservations: the durable record. Redis decides who gets a seat; Postgres keeps it."""

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils.translation import gettext_lazy as _

from queue_app.models import Event

# The longest buyer's name and email address: the model, the API's fields, their
# schema and the booking form all read these (254: an address's most, RFC 5321).
BUYER_NAME_MAX = 200
BUYER_EMAIL_MAX = 254


# The statuses whose seats are taken: the seat ledger (seats_sold), the seat caps
# and the one-booking-per-token rule count these.
TAKEN = ("HELD", "CONFIRMED")
# The statuses whose seats went back on sale (exactly once, lua/cancel.lua).
GIVEN_BACK = ("CANCELLED", "RELEASED", "REFUNDED")


class Reservation(models.Model):
    class Status(models.TextChoices):
        # A priced event's booking while its buyer pays (booking_app/checkout.py):
        # its seats are taken, as a confirmed booking's are.
        HELD = "HELD", _("Held (awaiting payment)")
        CONFIRMED = "CONFIRMED", _("Confirmed")
        CANCELLED = "CANCELLED", _("Cancelled")
        # A hold that ended unpaid (declined, abandoned, or run out): seats back on sale.
        RELEASED = "RELEASED", _("Released (not paid)")
        # Its payment was returned: a paid booking cancelled, or a payment that came
        # after its hold was released. Its seats are back on sale.
        REFUNDED = "REFUNDED", _("Refunded")
        # Decided against: Postgres refused it or could not save it, and its client was
        # told so. The row stays so that nothing (a retry, reconcile, a Redis restored
        # from an older snapshot) can confirm the same reservation id later.
        VOID = "VOID", _("void (never confirmed)")

    reservation_id = models.UUIDField(_("reservation id"), unique=True, default=uuid.uuid4, editable=False)
    event = models.ForeignKey(
        Event,
        verbose_name=_("event"),
        on_delete=models.PROTECT,
        to_field="event_id",
        db_column="event_id",
        related_name="reservations",
    )
    token = models.UUIDField(_("token"))
    seat_count = models.PositiveSmallIntegerField(_("seat count"))
    # Where the seats are (queue_app.models.Section): the section's code ('' on an
    # event without a seat map), and the numbered seats' ids (empty for unnumbered
    # places). While the row holds seats, TakenSeat has a row per seat id.
    section = models.CharField(_("section"), max_length=8, blank=True, default="")
    seats = ArrayField(models.CharField(max_length=26), verbose_name=_("seats"), default=list, blank=True)
    status = models.CharField(_("status"), max_length=9, choices=Status.choices, default=Status.CONFIRMED)
    buyer_name = models.CharField(_("buyer name"), max_length=BUYER_NAME_MAX, blank=True)
    buyer_email = models.EmailField(_("buyer email"), max_length=BUYER_EMAIL_MAX, blank=True)
    # Who the seat caps count against (docs/fairness.md): the signed-in account that
    # booked, and the buyer's email normalised (booking_app.buyers.email_key).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("user"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    buyer_key = models.CharField(_("buyer key"), max_length=BUYER_EMAIL_MAX, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True, db_index=True)
    cancelled_at = models.DateTimeField(_("cancelled at"), null=True, blank=True)
    # Set once booking.completed reached the broker; unset rows are retried.
    published_at = models.DateTimeField(_("published at"), null=True, blank=True)
    # Set once a cancellation's seats are back in Redis; unset rows are retried.
    seats_returned_at = models.DateTimeField(_("seats returned at"), null=True, blank=True)

    # Checkout: what the buyer owes (price x seats, in the currency's minor unit, as
    # the event said when the seats were taken), until when the seats are held, and
    # the provider's payment once paid.
    amount = models.PositiveBigIntegerField(_("amount"), default=0)
    currency = models.CharField(_("currency"), max_length=3, blank=True)
    hold_expires_at = models.DateTimeField(_("hold expires at"), null=True, blank=True)
    payment_id = models.CharField(_("payment id"), max_length=200, null=True, blank=True, unique=True)
    # Set before the provider is asked to take the money: a hold whose time runs out
    # with this set is looked up at the provider before it is released.
    paying_since = models.DateTimeField(_("paying since"), null=True, blank=True)
    paid_at = models.DateTimeField(_("paid at"), null=True, blank=True)
    released_at = models.DateTimeField(_("released at"), null=True, blank=True)
    refunded_at = models.DateTimeField(_("refunded at"), null=True, blank=True)
    # What of the payment goes back (minor units): decided when the booking ends (the
    # event's refund rule for its buyer's cancellation; None, all of it, otherwise)
    # and given back once refunded_at is set, so that a refund tried again gives back
    # the same amount, never more.
    refunded_amount = models.PositiveBigIntegerField(_("refunded amount"), null=True, blank=True)

    class MailStatus(models.TextChoices):
        QUEUED = "", _("queued (or no email given)")
        SENT = "SENT", _("Sent")
        FAILED = "FAILED", _("failed (the mail server or the broker was away)")

    # The confirmation email (booking_app/mail.py): the pages say what became of it.
    mail_status = models.CharField(
        _("mail status"), max_length=6, choices=MailStatus.choices, default="", blank=True
    )

    class Meta:
        verbose_name = _("reservation")
        verbose_name_plural = _("reservations")
        ordering = ["-created_at"]
        constraints = [
            # One booking per token: a cancelled or released one no longer counts, so
            # the person may queue and book again.
            models.UniqueConstraint(
                fields=["event", "token"],
                condition=models.Q(status__in=TAKEN),
                name="one_live_reservation_per_token",
            ),
            models.CheckConstraint(
                condition=~models.Q(status="HELD") | models.Q(hold_expires_at__isnull=False),
                name="a_hold_has_an_expiry",
            ),
            models.CheckConstraint(condition=models.Q(seat_count__gte=1), name="at_least_one_seat"),
            models.CheckConstraint(
                condition=models.Q(seats__len=0) | models.Q(seats__len=models.F("seat_count")),
                name="a_seat_id_per_seat",
            ),
        ]
        indexes = [
            models.Index(
                fields=["event", "user"],
                condition=models.Q(status__in=TAKEN, user__isnull=False),
                name="reservation_by_user",
            ),
            models.Index(
                fields=["event", "buyer_key"],
                condition=models.Q(status__in=TAKEN) & ~models.Q(buyer_key=""),
                name="reservation_by_buyer",
            ),
            models.Index(
                fields=["hold_expires_at"],
                condition=models.Q(status="HELD"),
                name="reservation_holds",
            ),
            models.Index(
                fields=["published_at"],
                condition=models.Q(published_at__isnull=True),
                name="reservation_unpublished",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reservation_id} ({self.seat_count} x {self.event_id})"


class TakenSeat(models.Model):
    """A numbered seat that is not for sale: held or confirmed by a reservation, or
    blocked by the operator (no reservation). Its unique constraint is what makes a
    seat sold once in Postgres, whatever Redis let through: the reservations' trigger
    (migrations/0011_seats.py) inserts a row per seat when a reservation takes its
    seats and deletes them when it gives them back, in the same statement."""

    event = models.ForeignKey(
        Event, on_delete=models.CASCADE, to_field="event_id", db_column="event_id", related_name="+"
    )
    seat_id = models.CharField(_("seat"), max_length=26)
    reservation = models.ForeignKey(
        Reservation, null=True, blank=True, on_delete=models.CASCADE, related_name="taken_seats"
    )

    class Meta:
        verbose_name = _("taken seat")
        verbose_name_plural = _("taken seats")
        constraints = [models.UniqueConstraint(fields=["event", "seat_id"], name="one_booking_per_seat")]

    def __str__(self) -> str:
        return f"{self.seat_id} ({self.reservation_id or 'blocked'})"
