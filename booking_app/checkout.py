"""Checkout: a priced event's booking holds its seats while its buyer pays, then is
CONFIRMED (paid in time) or RELEASED (declined, abandoned, or the hold ran out),
each exactly once.

Every step is a compare-and-set on the row's status in Postgres, so that whichever
of the payment and the hold's end gets there first wins and the other sees it:

- paying: the row is marked `paying_since` (only while HELD and not run out), the
  provider takes the money, then HELD -> CONFIRMED with the payment id. A charge
  that finds its hold released meanwhile is refunded (REFUNDED), never confirmed,
  unless its event allows late confirmation and the seats are still free
  (`_confirm_late`: RELEASED -> CONFIRMED, the seats taken back in Redis).
- releasing: HELD -> RELEASED, whose seats go back to Redis by the cancellations'
  exactly-once give-back (lua/cancel.lua), so the next person in line can have them.
- a hold run out (`holds_expire`, every second): one whose buyer had started paying
  is looked up at the provider first, so that a charge whose answer was lost, or
  whose process died before its commit, is confirmed (taken in time) or refunded.
- refunds the provider could not take are tried again (`refunds_retry`) until done.
  What goes back is decided when the booking ends and kept on the row
  (`refunded_amount`): the event's refund rule when its buyer cancels a paid booking
  (`refund_share`: rounded down), all of it for an operator's cancellation and for a
  payment that came too late. The provider is asked only for the difference with
  what it says it returned already, so a retry never gives back more.

A booking confirmed here is mailed by the one caller whose compare-and-set
confirmed it: the buyer's request (its address and language), or the sweep or a
provider's notification (SITE_URL, the default language).
"""

import logging
import uuid

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.db.models.functions import Now
from django.utils import timezone

from booking_app import mail, payments, publish, services
from booking_app.models import Reservation
from queue_app.models import Event
from ticketing import metrics, store
from ticketing.errors import REDIS_ERRORS, DomainError

log = logging.getLogger(__name__)

HELD, CONFIRMED = Reservation.Status.HELD, Reservation.Status.CONFIRMED
RELEASED, REFUNDED = Reservation.Status.RELEASED, Reservation.Status.REFUNDED
CANCELLED = Reservation.Status.CANCELLED

# Holds settled per pass of `holds_expire`: the rest wait a second.
_BATCH = 500


def _provider() -> payments.Provider:
    found = payments.provider()
    if found is None:
        raise DomainError("PAYMENT_UNAVAILABLE", "No payment provider is configured.")
    return found


def hold_pay(
    *, reservation_id: uuid.UUID, reply: dict[str, str], site: str = "", language: str = ""
) -> Reservation:
    """Take the payment of a held booking and confirm it; `reply` is what the
    buyer's checkout sent back (the test provider's outcome, a provider's keys);
    `site` and `language`, the buyer's request's, for the confirmation mail."""
    row = Reservation.objects.filter(reservation_id=reservation_id).exclude(status="VOID").first()
    if row is None:
        raise DomainError("RESERVATION_NOT_FOUND")
    claimed = Reservation.objects.filter(pk=row.pk, status=HELD, hold_expires_at__gt=Now()).update(
        paying_since=Now()
    )
    if not claimed:
        row.refresh_from_db()
        if row.status == HELD:  # run out, not yet released: release it now
            hold_release(row, "expired")
            raise DomainError("HOLD_EXPIRED")
        raise DomainError("HOLD_EXPIRED" if row.status == RELEASED else "NOT_HELD", status=row.status)
    provider = _provider()
    try:
        charge = provider.charge(str(row.reservation_id), row.amount, row.currency, reply=reply)
    except payments.Declined as exc:
        log.info("payment of %s declined: %s", row.reservation_id, exc)
        hold_release(row, "declined")
        raise DomainError("PAYMENT_DECLINED") from None
    except payments.Unavailable as exc:
        log.warning("payment of %s: no answer from the provider: %s", row.reservation_id, exc)
        raise DomainError("PAYMENT_UNAVAILABLE") from None
    return settle_charge(row, charge, site=site, language=language)


def settle_charge(
    row: Reservation, charge: payments.Charge, *, site: str = "", language: str = ""
) -> Reservation:
    """A charge the provider took for this booking: confirm the booking if it is
    still held and was paid before its hold ended (or later, where the event allows
    it and the seats are still free), else refund it. Exactly once whoever calls
    (the payment's request, the sweep that found it, a provider's notification);
    the caller that confirmed it mails the buyer, with links to `site` in `language`
    (a request's), else to SITE_URL in the default language."""
    matches = charge.amount == row.amount and charge.currency == row.currency
    if not matches:
        log.error(
            "payment %s of %s does not match the booking's amount", charge.payment_id, row.reservation_id
        )
    elif charge.charged_at <= row.hold_expires_at:
        with transaction.atomic():
            confirmed = Reservation.objects.filter(pk=row.pk, status=HELD).update(
                status=CONFIRMED, payment_id=charge.payment_id, paid_at=charge.charged_at
            )
            if confirmed:
                row.refresh_from_db()
                transaction.on_commit(lambda: publish.publish_soon(row))
        if confirmed:
            log.info("booking %s paid (%s)", row.reservation_id, charge.payment_id)
            _paid(row, charge, site=site, language=language)
            return row
    row.refresh_from_db()
    if row.status == CONFIRMED and row.payment_id == charge.payment_id:
        return row  # confirmed by this charge already (a second click, or the sweep)
    hold_release(row, "paid too late")
    if matches and _confirm_late(row, charge):
        row.refresh_from_db()
        log.info("booking %s paid late, its seats still free (%s)", row.reservation_id, charge.payment_id)
        _paid(row, charge, site=site, language=language)
        return row
    # Too late, or released meanwhile: the money goes back, recorded on the row first
    # so that a refund the provider cannot take now is tried again (and so that the
    # row can no longer be confirmed late: `_confirm_late` wants no payment on it).
    Reservation.objects.filter(pk=row.pk, payment_id=None).update(payment_id=charge.payment_id)
    row.refresh_from_db()
    if row.payment_id != charge.payment_id:
        log.error(
            "payment %s of %s is not the booking's (%s)",
            charge.payment_id,
            row.reservation_id,
            row.payment_id,
        )
    elif row.status != CONFIRMED:  # (confirmed late meanwhile by another caller's same charge)
        refund(row, charge)
        row.refresh_from_db()
    return row


def _confirm_late(row: Reservation, charge: payments.Charge) -> bool:
    """Confirm a released hold with its late payment, on an open event that allows
    late confirmation, if its seats are still free; False leaves it to be refunded.

    Exactly once with the seats' give-back: the row is locked from before Redis takes
    its seats back (lua/retake.lua) until it commits CONFIRMED, and every give-back
    locks it too and acts only on a row still given back (services.return_seats), so
    nothing gives these seats back again on what it read before. Reconcile's recount
    counts them taken throughout: a released row out of the `returned` hash as being
    returned, a confirmed one as sold. Postgres has the last word: a ledger with no
    room, a seat cap or the token's other booking refuses the row, and the seats go
    back at once (or by reconcile) under the same lock."""
    allowed = Event.objects.filter(event_id=row.event_id, late_confirmation=True, status=Event.Status.OPEN)
    if not allowed.exists():
        return False
    try:
        with transaction.atomic():
            locked = (
                Reservation.objects.select_for_update()
                .filter(pk=row.pk, status=RELEASED, payment_id=None)
                .first()
            )
            if locked is None:  # refunded, or confirmed late by another caller first
                return False
            taken = services.seats_retake(locked)
            if taken not in ("TAKEN", "KEPT"):
                log.info("late payment of %s: its seats are not free (%s)", row.reservation_id, taken)
                return False
            try:
                with transaction.atomic():
                    Reservation.objects.filter(pk=row.pk).update(
                        status=CONFIRMED,
                        payment_id=charge.payment_id,
                        paid_at=charge.charged_at,
                        seats_returned_at=None,
                    )
            except IntegrityError as exc:
                log.info("late payment of %s: Postgres refused its seats: %s", row.reservation_id, exc)
                services.return_seats(locked)  # still locked and released: given back once
                return False
            transaction.on_commit(lambda: publish.publish_soon(locked))
    except REDIS_ERRORS as exc:  # the row stays released: its seats are reconcile's to return
        log.warning("late payment of %s: its seats could not be taken back: %s", row.reservation_id, exc)
        return False
    return True


def _paid(row: Reservation, charge: payments.Charge, *, site: str, language: str) -> None:
    """What the caller that confirmed a booking does once: count it, have its
    buyer mailed, and show its seats sold."""
    services.seats_shown_sold(row)
    metrics.checkout_ended(row.event_id, "PAID", (charge.charged_at - row.created_at).total_seconds())
    mail.confirmation_queue(
        row.reservation_id,
        buyer_email=row.buyer_email,
        site=site or settings.SITE_URL,
        language=language or settings.LANGUAGE_CODE,
    )


def hold_release(row: Reservation, reason: str) -> bool:
    """End a hold unpaid and put its seats back on sale; False when it was no longer
    held (paid, or released by someone else first)."""
    released = Reservation.objects.filter(pk=row.pk, status=HELD).update(
        status=RELEASED, released_at=timezone.now()
    )
    if not released:
        return False
    row.refresh_from_db()
    log.info("hold %s released (%s)", row.reservation_id, reason)
    metrics.checkout_ended(row.event_id, "RELEASED")
    services.return_seats(row)  # or reconcile's, if Redis fails now
    return True


def refund_share(amount: int, percent: int) -> int:
    """What a refund rule of `percent` gives back of `amount` (both in the currency's
    minor unit): rounded down, so that no rounding gives back more than the rule
    says (50 % of 55,555 KRW is 27,777 KRW; of 33.33 USD, 16.66 USD)."""
    return amount * percent // 100


def refund(row: Reservation, charge: payments.Charge | None = None) -> bool:
    """Give back what a released or cancelled booking's end decided of its payment
    (`refunded_amount`; unset: all of it), asking the provider only for what it has
    not returned yet, so that a refund tried again (after a lost answer too) never
    gives back more; False when the provider could not be asked (`refunds_retry`
    tries again). A share of 0 leaves the booking CANCELLED, with nothing given back."""
    provider = _provider()
    given = 0
    try:
        charge = charge or provider.lookup(str(row.reservation_id))
        if charge is not None:
            owed = charge.amount if row.refunded_amount is None else min(row.refunded_amount, charge.amount)
            if charge.refunded < owed:
                provider.refund(charge, owed - charge.refunded, "booking not kept")
            given = max(owed, charge.refunded)
    except payments.Unavailable as exc:
        log.warning("refund of %s not made yet: %s", row.reservation_id, exc)
        return False
    done = {"refunded_at": timezone.now(), "refunded_amount": given}
    if row.refunded_amount != 0:
        done["status"] = REFUNDED
    refunded = Reservation.objects.filter(
        pk=row.pk, status__in=(RELEASED, CANCELLED), refunded_at=None
    ).update(**done)
    if refunded:
        log.info("booking %s refunded", row.reservation_id)
        metrics.checkout_ended(row.event_id, "REFUNDED")
    return True


def holds_expire(event_id: str | None = None) -> int:
    """Release the holds whose time ran out (the beat runs this every second, for
    every event; reconcile for its event, in case the beat was away); how many
    ended. A hold whose buyer had started paying is looked up first."""
    ended = 0
    due = Reservation.objects.filter(status=HELD, hold_expires_at__lte=Now()).order_by("hold_expires_at")
    if event_id is not None:
        due = due.filter(event_id=event_id)
    for row in due[:_BATCH]:
        if row.paying_since is not None:
            try:
                charge = _provider().lookup(str(row.reservation_id))
            except (payments.Unavailable, DomainError) as exc:
                log.warning("hold %s: its payment cannot be looked up yet: %s", row.reservation_id, exc)
                continue
            if charge is not None:
                settle_charge(row, charge)
                ended += 1
                continue
        ended += hold_release(row, "expired")
    return ended


def payment_notified(payment_key: str) -> str:
    """A provider's notification that a payment changed (Toss Payments'
    PAYMENT_STATUS_CHANGED): the payment is read back from the provider, and a
    taken one settles its booking as the payment's own request would have (a
    confirm whose answer was lost is confirmed sooner than the sweep would). Safe
    to repeat and in any order: each step is a compare-and-set. What was done."""
    provider = _provider()
    if not hasattr(provider, "payment"):
        return "IGNORED"
    try:
        charge = provider.payment(payment_key)
    except payments.Unavailable as exc:
        raise DomainError("PAYMENT_UNAVAILABLE") from exc
    if charge is None:
        return "NOT_TAKEN"
    row = Reservation.objects.filter(reservation_id=charge.order_id).exclude(status="VOID").first()
    if row is None:
        log.error("payment %s names order %s, which is no booking", payment_key, charge.order_id)
        return "UNKNOWN_ORDER"
    if row.status == HELD or (row.status in (RELEASED, CANCELLED) and row.payment_id in (None, payment_key)):
        return settle_charge(row, charge).status
    return row.status


_HELD_NOTE = store.Caller("held_note", passes="held")


def holds_note() -> None:
    """Tell each event's polls how many of its seats are held by buyers paying now
    (seats that may come back): Postgres' count, written every second by the
    sweep, so it is never more than a second or so behind and never drifts."""
    held = dict(Reservation.objects.filter(status=HELD).values_list("event_id").annotate(n=Sum("seat_count")))
    for event_id in sorted(e.decode() for e in store.client().smembers(store.EVENTS_KEY)):
        store.run(_HELD_NOTE.call(store.EventKeys(event_id), held=held.get(event_id, 0)))


def refunds_retry() -> int:
    """Refunds owed and not made (the provider was away): tried again."""
    owed = Reservation.objects.filter(status__in=(RELEASED, CANCELLED), refunded_at=None).exclude(
        payment_id=None
    )
    return sum(refund(row) for row in owed[:_BATCH])


def booking_end(
    *, reservation_id: uuid.UUID, token: str | None = None, by_buyer: bool = False
) -> Reservation:
    """A buyer (`by_buyer`: with the token that booked, or the booking page's signed
    link) or an operator ends a booking: a hold is released (abandoned), a confirmed
    booking cancelled, and a paid one refunded: by the event's refund rule when its
    buyer cancels, in full when an operator does. Its seats go back on sale either way."""
    rows = Reservation.objects.filter(reservation_id=reservation_id).exclude(status="VOID")
    if token is not None:
        rows = rows.filter(token=token)
    row = rows.first()
    if row is None:
        raise DomainError("RESERVATION_NOT_FOUND")
    if row.status == HELD:
        if hold_release(row, "abandoned"):
            row.refresh_from_db()
            return row
        row.refresh_from_db()  # paid meanwhile
    share = None
    if by_buyer and row.payment_id is not None:
        percent = Event.objects.values_list("refund_percent", flat=True).get(event_id=row.event_id)
        share = refund_share(row.amount, percent)
    row = services.booking_cancel(reservation_id=reservation_id, token=token, refunded_amount=share)
    if row.payment_id is not None:
        refund(row)
        row.refresh_from_db()
    return row
