"""Checkout: a priced event's booking holds its seats while its buyer pays, then is
CONFIRMED (paid in time) or RELEASED (declined, abandoned, or the hold ran out),
each exactly once.

Every step is a compare-and-set on the row's status in Postgres, so that whichever
of the payment and the hold's end gets there first wins and the other sees it:

- paying: the row is marked `paying_since` (only while HELD and not run out), the
  provider takes the money, then HELD -> CONFIRMED with the payment id. A charge
  that finds its hold released meanwhile is refunded (REFUNDED), never confirmed.
- releasing: HELD -> RELEASED, whose seats go back to Redis by the cancellations'
  exactly-once give-back (lua/cancel.lua), so the next person in line can have them.
- a hold run out (`holds_expire`, every second): one whose buyer had started paying
  is looked up at the provider first, so that a charge whose answer was lost, or
  whose process died before its commit, is confirmed (taken in time) or refunded.
- refunds the provider could not take are tried again (`refunds_retry`) until done.
"""

import logging
import uuid

from django.db import transaction
from django.db.models import Sum
from django.db.models.functions import Now
from django.utils import timezone

from booking_app import payments, publish, services
from booking_app.models import Reservation
from ticketing import metrics, store
from ticketing.errors import DomainError

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


def hold_pay(*, reservation_id: uuid.UUID, reply: dict[str, str]) -> Reservation:
    """Take the payment of a held booking and confirm it; `reply` is what the
    buyer's checkout sent back (the test provider's outcome, a provider's keys)."""
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
    return settle_charge(row, charge)


def settle_charge(row: Reservation, charge: payments.Charge) -> Reservation:
    """A charge the provider took for this booking: confirm the booking if it is
    still held and was paid before its hold ended, else refund it. Exactly once
    whoever calls (the payment's request, or the sweep that found it)."""
    if charge.amount != row.amount or charge.currency != row.currency:
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
            metrics.checkout_ended(row.event_id, "PAID", (charge.charged_at - row.created_at).total_seconds())
            return row
    row.refresh_from_db()
    if row.status == CONFIRMED and row.payment_id == charge.payment_id:
        return row  # confirmed by this charge already (a second click, or the sweep)
    # Too late, or released meanwhile: the money goes back, recorded on the row first
    # so that a refund the provider cannot take now is tried again.
    hold_release(row, "paid too late")
    Reservation.objects.filter(pk=row.pk, payment_id=None).update(payment_id=charge.payment_id)
    row.refresh_from_db()
    if row.payment_id == charge.payment_id:
        refund(row, charge)
        row.refresh_from_db()
    else:
        log.error(
            "payment %s of %s is not the booking's (%s)",
            charge.payment_id,
            row.reservation_id,
            row.payment_id,
        )
    return row


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


def refund(row: Reservation, charge: payments.Charge | None = None) -> bool:
    """Return a released or cancelled booking's payment in full; False when the
    provider could not be asked (`refunds_retry` tries again)."""
    provider = _provider()
    try:
        charge = charge or provider.lookup(str(row.reservation_id))
        if charge is not None and charge.refunded < charge.amount:
            provider.refund(charge, charge.amount - charge.refunded, "booking not kept")
    except payments.Unavailable as exc:
        log.warning("refund of %s not made yet: %s", row.reservation_id, exc)
        return False
    refunded = Reservation.objects.filter(pk=row.pk, status__in=(RELEASED, CANCELLED)).update(
        status=REFUNDED, refunded_at=timezone.now()
    )
    if refunded:
        log.info("booking %s refunded", row.reservation_id)
        metrics.checkout_ended(row.event_id, "REFUNDED")
    return True


def holds_expire() -> int:
    """Release the holds whose time ran out (the beat runs this every second);
    how many ended. A hold whose buyer had started paying is looked up first."""
    ended = 0
    due = Reservation.objects.filter(status=HELD, hold_expires_at__lte=Now()).order_by("hold_expires_at")
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


def booking_end(*, reservation_id: uuid.UUID, token: str | None = None) -> Reservation:
    """A buyer (with the token that booked) or an operator ends a booking: a hold is
    released (abandoned), a confirmed booking cancelled, and a paid one refunded.
    Its seats go back on sale either way."""
    rows = Reservation.objects.filter(reservation_id=reservation_id).exclude(status="VOID")
    if token is not None:
        rows = rows.filter(token=token)
    row = rows.first()
    if row is None:
        raise DomainError("RESERVATION_NOT_FOUND")
    if row.status == HELD and hold_release(row, "abandoned"):
        row.refresh_from_db()
        return row
    row = services.booking_cancel(reservation_id=reservation_id, token=token)
    if row.payment_id is not None:
        refund(row)
        row.refresh_from_db()
    return row
