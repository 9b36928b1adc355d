"""Booking: an atomic check-and-decrement in Redis, then the decision in Postgres.

1. `lua/reserve.lua` takes the seats in Redis and appends the booking, with every
   field its row needs, to the event's outbox stream.
2. Postgres decides, once: the row is written CONFIRMED (a trigger moves the event's
   seat ledger in the same statement, and refuses what it has no room for), or VOID
   when it cannot be. The reservation id is
   unique, so whoever writes it first (the request, its own retry after an unknown
   commit, or reconcile) decides, and everyone after reads that decision.
3. Redis follows the decision: a confirmed booking leaves the outbox
   (`lua/outbox_done.lua`); a refused one gives back what it took in one step
   (`lua/release.lua`).

A client hears CONFIRMED only after the commit, BOOKING_NOT_SAVED only after a VOID
row made sure it can never be confirmed, and BOOKING_PENDING when Postgres could not
be asked: then the outbox entry waits for reconcile (booking_app/reconcile.py).
"""

import contextlib
import dataclasses
import datetime
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.conf import settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Sum
from django.utils import timezone

from booking_app import publish
from booking_app.buyers import email_key
from booking_app.models import GIVEN_BACK, TAKEN, Reservation, TakenSeat
from queue_app.models import Event, Section
from queue_app.tokens import Token, issued, line_keys
from ticketing import metrics, store
from ticketing.celery import app
from ticketing.errors import REDIS_ERRORS, DomainError

log = logging.getLogger(__name__)


# What each script call passes besides the event's own keys (checked against the
# scripts' headers when this module is imported).
class Reserved(NamedTuple):
    """lua/reserve.lua's answer (its header names these fields in this order)."""

    outcome: bytes
    detail: Any = None
    entry: bytes = b""
    window_end: int = 0
    amount: int = 0
    currency: bytes = b""
    hold_until: int = 0
    section: bytes = b""
    seat_list: bytes = b""


_RESERVE = store.Caller(
    "reserve",
    passes="booked token token_text wanted reservation name email account section together seat_ids",
    reply=Reserved,
)
_RELEASE = store.Caller(
    "release", passes="booked entry reservation seats_back token reopen confirmed unheard section seat_ids"
)
_NOTE_NOT_SAVED = store.Caller("note_not_saved", passes="booked reservation")
_OUTBOX_DONE = store.Caller("outbox_done", passes="entry")
_CANCEL = store.Caller("cancel", passes="booked reservation count section seat_ids")
_RETAKE = store.Caller("retake", passes="booked reservation count section seat_ids")
_SEATS_SOLD = store.Caller("seats_sold", passes="seat_ids")

CONFIRMED, ALREADY_BOOKED, NO_ROOM, NOT_SAVED = "CONFIRMED", "ALREADY_BOOKED", "NO_ROOM", "NOT_SAVED"
SEAT_CAP, BUYER_REQUIRED, SEAT_TAKEN = "SEAT_CAP", "BUYER_REQUIRED", "SEAT_TAKEN"

# What lua/reserve.lua refuses with, answered with its code's message (ticketing/errors.py).
_REFUSALS = {"EVENT_NOT_FOUND", "EVENT_CLOSED", "ACCOUNT_REQUIRED", "BUYER_REQUIRED", "NOT_ACTIVE",
             "SOLD_OUT", "INSUFFICIENT_SEATS", "SECTION_SOLD_OUT"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Booking:
    """One booking as the outbox carries it: everything its row needs."""

    reservation_id: uuid.UUID
    event_id: str
    token: str
    seat_count: int
    buyer_name: str = ""
    buyer_email: str = ""
    window_end: int = 0  # the active window it used (ms), given back if it is refused
    user_id: int | None = None  # the signed-in account that booked
    # A priced event's: what the buyer owes (minor units) and until when its seats
    # are held (ms, Redis' clock). 0: free, confirmed at once.
    amount: int = 0
    currency: str = ""
    hold_until: int = 0
    # Where: the section's code ('' on an event without a map) and the numbered seats
    # (none for unnumbered places). Asked for, or picked by lua/reserve.lua.
    section: str = ""
    seat_ids: tuple[str, ...] = ()

    @classmethod
    def from_outbox(cls, event_id: str, fields: dict[bytes, bytes]) -> "Booking":
        return cls(
            uuid.UUID(fields[b"reservationId"].decode()),
            event_id,
            fields[b"token"].decode(),
            int(fields[b"seats"]),
            fields.get(b"buyerName", b"").decode(),
            fields.get(b"buyerEmail", b"").decode(),
            int(fields.get(b"windowEnd", 0)),
            int(fields[b"userId"]) if fields.get(b"userId") else None,
            int(fields.get(b"amount", 0)),
            fields.get(b"currency", b"").decode(),
            int(fields.get(b"holdUntil", 0)),
            fields.get(b"section", b"").decode(),
            tuple(fields.get(b"seatIds", b"").decode().split(",")) if fields.get(b"seatIds") else (),
        )

    @property
    def token_raw(self) -> bytes:
        return uuid.UUID(self.token).bytes


@dataclass(frozen=True, slots=True)
class Decision:
    """How Postgres decided a booking."""

    # CONFIRMED (the row took its seats: CONFIRMED, or HELD on a priced event, as
    # its status says), ALREADY_BOOKED, NO_ROOM, SEAT_CAP, BUYER_REQUIRED or NOT_SAVED
    outcome: str
    reservation: Reservation | None = None  # the row holding seats: this booking's or the token's earlier one
    seats_free: int = 0  # NO_ROOM: seats Postgres still has; SEAT_CAP: seats the buyer may still book
    taken: tuple[str, ...] = ()  # SEAT_TAKEN: the seats asked for that another holds, or the operator blocked


def from_ms(ms: int) -> datetime.datetime:
    """A time of Redis' clock (ms since the epoch), as Postgres keeps times."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def _one_statement() -> contextlib.AbstractContextManager:
    """A savepoint inside a caller's transaction; otherwise nothing, so the statement
    commits on its own. The seat ledger's trigger locks the event's row inside that
    statement: with no round trip to Python before the COMMIT, concurrent bookings
    of one event wait on that lock only for Postgres' own work (docs/benchmarks.md)."""
    return transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()


def _record(b: Booking) -> Decision:
    """Write the booking CONFIRMED, or learn how it was decided before.

    One INSERT: a trigger moves the event's seat ledger in the same statement, and
    the ledger's CHECK (never_oversold) refuses the row when Postgres has no room;
    the same trigger refuses a buyer past the event's seat cap (seat_cap), and a
    booking that names no buyer on an event that caps them (buyer_required).
    """
    try:
        with _one_statement():
            row = Reservation.objects.create(
                reservation_id=b.reservation_id,
                event_id=b.event_id,
                token=b.token,
                seat_count=b.seat_count,
                status=Reservation.Status.HELD if b.hold_until else Reservation.Status.CONFIRMED,
                buyer_name=b.buyer_name,
                buyer_email=b.buyer_email,
                user_id=b.user_id,
                buyer_key=email_key(b.buyer_email),
                amount=b.amount,
                currency=b.currency,
                hold_expires_at=from_ms(b.hold_until) if b.hold_until else None,
                section=b.section,
                seats=list(b.seat_ids),
            )
            if row.status == Reservation.Status.CONFIRMED:  # a hold is published once paid
                transaction.on_commit(lambda: publish.publish_soon(row))
        return Decision(CONFIRMED, row)
    except IntegrityError as exc:
        refused = exc
    if "section_never_oversold" in str(refused):
        free = Section.objects.filter(event__event_id=b.event_id, code=b.section).values_list(
            "places", "sold"
        )
        places, sold = free.first() or (0, 0)
        return _void(b, Decision(NO_ROOM, seats_free=places - sold))
    if "never_oversold" in str(refused):
        total, sold = Event.objects.values_list("total_seats", "seats_sold").get(event_id=b.event_id)
        return _void(b, Decision(NO_ROOM, seats_free=total - sold))
    if "one_booking_per_seat" in str(refused) or "no_such_seat" in str(refused):
        taken = TakenSeat.objects.filter(event_id=b.event_id, seat_id__in=b.seat_ids).values_list(
            "seat_id", flat=True
        )
        return _void(b, Decision(SEAT_TAKEN, taken=tuple(sorted(taken)) or b.seat_ids))
    if "buyer_required" in str(refused):
        return _void(b, Decision(BUYER_REQUIRED))
    if "seat_cap" in str(refused):
        return _void(b, Decision(SEAT_CAP, seats_free=seats_allowed(b.event_id, b.user_id, b.buyer_email)))
    # This id was decided before, or the token already holds a confirmed reservation
    # (Redis had lost its booking mark).
    decided = Reservation.objects.filter(reservation_id=b.reservation_id).first()
    if decided is not None:
        return decision_of(decided)
    existing = Reservation.objects.filter(event_id=b.event_id, token=b.token, status__in=TAKEN).first()
    if existing is None:
        raise refused
    return _void(b, Decision(ALREADY_BOOKED, existing))


def seats_allowed(event_id: str, user_id: int | None, buyer_email: str) -> int:
    """Seats this buyer may still book: the tighter of the account's cap (the event's
    most per buyer, else its most per booking) and the email's (most per buyer, when
    set). The trigger of booking_app/migrations/0005_seat_caps.py enforces the same."""
    per_buyer, per_booking = Event.objects.values_list("max_seats_per_buyer", "max_seats_per_booking").get(
        event_id=event_id
    )
    confirmed = Reservation.objects.filter(event_id=event_id, status__in=TAKEN)
    allowed = []
    if user_id is not None:
        held = confirmed.filter(user_id=user_id).aggregate(n=Sum("seat_count"))["n"] or 0
        allowed.append((per_buyer or per_booking) - held)
    key = email_key(buyer_email)
    if per_buyer and key:
        allowed.append(per_buyer - (confirmed.filter(buyer_key=key).aggregate(n=Sum("seat_count"))["n"] or 0))
    return max(0, min(allowed, default=per_booking))


def _void(b: Booking, decision: Decision) -> Decision:
    """Settle the id as never confirmed before anyone is told so; if it was decided
    meanwhile (a commit that did apply after all), that decision stands."""
    try:
        with transaction.atomic():
            Reservation.objects.create(
                reservation_id=b.reservation_id,
                event_id=b.event_id,
                token=b.token,
                seat_count=b.seat_count,
                status=Reservation.Status.VOID,
            )
    except IntegrityError:
        decided = Reservation.objects.filter(reservation_id=b.reservation_id).first()
        if decided is None:
            raise
        return decision_of(decided)
    return decision


def settle_later(b: Booking) -> None:
    """Have a booking its client is told is pending decided even if Redis loses it.

    Reconcile decides what the outbox holds. A Redis restarted from an older snapshot
    may lose the entry and the token's mark before that: nobody would decide the
    booking, and its person would poll ACTIVE again, never told. So a task goes to
    the broker, which keeps it whatever Redis and Postgres do, and runs once the
    grace period is over (`settle_unheard`)."""
    try:
        app.send_task(
            "booking_app.tasks.settle_pending",
            args=[b.event_id, str(b.reservation_id), b.token, b.seat_count],
            countdown=settings.BOOKING_RECONCILE_GRACE_SEC,
            retry=True,
            retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2},
        )
    except Exception as exc:  # (the broker's errors are many kinds) the outbox is still there
        log.error("booking %s: its follow-up could not be sent: %s", b.reservation_id, exc)


def settle_unheard(b: Booking) -> str | None:
    """Decide a booking its client was told is pending: CONFIRMED, ALREADY_BOOKED or
    NOT_SAVED, or None while it is in the outbox (reconcile decides it; ask again).

    Not in Postgres and not in Redis (the token's mark does not name it: a mark and
    its entry are written and removed together) means Redis lost it: nobody can
    confirm it any more, so it is settled VOID, and the token's polls answer
    NOT_SAVED (lua/note_not_saved.lua) and it may book again."""
    k = store.EventKeys(b.event_id)
    row = Reservation.objects.filter(reservation_id=b.reservation_id).first()
    if row is not None:
        decision = decision_of(row)
    elif store.client().get(k.booked(b.token)) == str(b.reservation_id).encode():
        return None
    else:
        decision = _void(b, Decision(NOT_SAVED))
        log.warning("booking %s: Redis had lost it before Postgres decided it; not saved", b.reservation_id)
    if decision.outcome == NOT_SAVED:
        store.run(_NOTE_NOT_SAVED.call(k, booked=k.booked(b.token), reservation=str(b.reservation_id)))
    return decision.outcome


def decision_of(row: Reservation) -> Decision:
    """The decision an existing row records."""
    if row.status != Reservation.Status.VOID:
        return Decision(CONFIRMED, row)
    confirmed = Reservation.objects.filter(event_id=row.event_id, token=row.token, status__in=TAKEN).first()
    return Decision(ALREADY_BOOKED, confirmed) if confirmed else Decision(NOT_SAVED)


def booking_decide(b: Booking) -> Decision | None:
    """Decide the booking in Postgres; None when Postgres cannot be asked.

    A lost connection leaves the outcome unknown (a COMMIT may have applied without
    its acknowledgement): never guess, ask again on a fresh connection, where the
    unique reservation id settles it. An error Postgres answered means the row will
    not be written: it is settled as VOID.
    """
    for attempt in (1, 2):
        try:
            return _record(b)
        except (OperationalError, InterfaceError) as exc:
            log.warning("booking %s: no answer from Postgres (try %d): %s", b.reservation_id, attempt, exc)
            if not connection.in_atomic_block:
                connection.close()  # the next query opens a fresh one
        except DatabaseError as exc:
            log.error("booking %s refused by Postgres: %s", b.reservation_id, exc)
            break
    else:
        return None
    try:
        return _void(b, Decision(NOT_SAVED))
    except DatabaseError as exc:
        log.error("booking %s could not be voided: %s", b.reservation_id, exc)
        return None


def release(
    k: store.EventKeys, entry_id: bytes | str, b: Booking, decision: Decision, *, unheard: bool = False
) -> bool:
    """Give back what the Redis step of a refused booking took, exactly once.

    NO_ROOM and SEAT_TAKEN keep the seats taken: Postgres had none (or not those),
    so Redis counted too many free; reconcile's recount sets them right.
    ALREADY_BOOKED points the token's mark at its confirmed reservation and gives
    no window back, so it cannot try again. `unheard`: the client was never
    told the outcome (reconcile decides): the token's polls then answer NOT_SAVED.
    """
    existing = decision.reservation if decision.outcome == ALREADY_BOOKED else None
    give = 0 if decision.outcome in (NO_ROOM, SEAT_TAKEN) else b.seat_count
    return bool(
        store.run(
            _RELEASE.call(
                line_keys(k.event_id, b.token_raw),
                booked=k.booked(b.token),
                entry=entry_id,
                reservation=str(b.reservation_id),
                seats_back=give,
                token=b.token_raw,
                reopen=1 if existing is None and b.window_end else 0,
                confirmed=str(existing.reservation_id) if existing else "",
                unheard=int(unheard),
                section=b.section,
                seat_ids=list(b.seat_ids),
            )
        )
    )


def outbox_done(k: store.EventKeys, entry_id: bytes | str) -> bool:
    """Take a confirmed booking's entry out of the outbox; False leaves it to reconcile."""
    return store.run(_OUTBOX_DONE.call(k, entry=entry_id)) == 1


@dataclass(frozen=True, slots=True)
class Booked:
    reservation_id: uuid.UUID
    seat_count: int
    remaining_seats: int
    event_id: str
    status: str = Reservation.Status.CONFIRMED  # or HELD: a priced event's, until paid
    amount: int = 0
    currency: str = ""
    hold_expires_at: int | None = None  # ms
    section: str = ""
    seat_ids: tuple[str, ...] = ()


def reserve_call(b: Booking, *, together: bool = False) -> store.Call:
    """The Redis step of a booking (lua/reserve.lua), for `store.run`."""
    k = line_keys(b.event_id, b.token_raw)
    return _RESERVE.call(
        k,
        booked=k.booked(b.token),
        token=b.token_raw,
        token_text=b.token,
        wanted=b.seat_count,
        reservation=str(b.reservation_id),
        name=b.buyer_name,
        email=b.buyer_email,
        account=b.user_id or "",
        section=b.section,
        together=int(together),
        seat_ids=list(b.seat_ids),
    )


@metrics.observe_booking  # counts and logs each decision
def booking_reserve(
    *,
    event_id: str,
    token: Token,
    seat_count: int,
    buyer_name: str = "",
    buyer_email: str = "",
    user_id: int | None = None,
    section: str = "",
    seats: tuple[str, ...] = (),
    together: bool = False,
) -> Booked:
    """Hold (or, on a free event, confirm) `seat_count` seats for an active token:
    unnumbered places, in `section` on an event with a seat map; those `seats`
    (numbered, all or none; `seat_count` is their number); or, in a numbered
    `section`, the best free ones, adjacent when `together`."""
    issued(event_id, token)
    k = store.EventKeys(event_id)
    b = Booking(
        uuid.uuid4(),
        event_id,
        token.text,
        len(seats) or seat_count,
        buyer_name,
        buyer_email,
        user_id=user_id,
        section=section,
        seat_ids=tuple(seats),
    )
    reply = store.run(reserve_call(b, together=together))
    outcome = reply.outcome.decode()
    if outcome == "ALREADY_BOOKED":
        raise DomainError("ALREADY_BOOKED", reservationId=reply.detail.decode())
    if outcome == "VALIDATION_ERROR":
        raise DomainError("VALIDATION_ERROR", f"seatCount must be between 1 and {reply.detail}.")
    if outcome == "SEATS_INVALID":
        raise DomainError("VALIDATION_ERROR", f"{reply.detail.decode()}.")
    if outcome in ("SEAT_TAKEN", "SEAT_NOT_FOUND"):
        raise DomainError(outcome, seats=reply.detail.decode().split(","))
    if outcome == "SECTION_NOT_FOUND":
        raise DomainError(outcome, section=reply.detail.decode())
    if outcome == "NO_ADJACENT_SEATS":
        raise DomainError(outcome, remainingSeats=reply.detail)
    if outcome in _REFUSALS:
        extra = {"remainingSeats": reply.detail} if outcome == "INSUFFICIENT_SEATS" else {}
        raise DomainError(outcome, **extra)
    entry_id = reply.entry
    b = dataclasses.replace(
        b,
        window_end=int(reply.window_end),
        amount=int(reply.amount),
        currency=reply.currency.decode(),
        hold_until=int(reply.hold_until),
        section=reply.section.decode(),
        seat_ids=tuple(reply.seat_list.decode().split(",")) if reply.seat_list else (),
    )

    decision = booking_decide(b)
    if decision is None:
        settle_later(b)
        raise DomainError("BOOKING_PENDING", reservationId=str(b.reservation_id))
    if decision.outcome == CONFIRMED:
        try:
            outbox_done(k, entry_id)
        except REDIS_ERRORS as exc:  # committed: the leftover entry is reconcile's to remove
            log.warning("booking %s confirmed; its outbox entry stays: %s", b.reservation_id, exc)
        return Booked(
            b.reservation_id,
            b.seat_count,
            reply.detail,
            event_id,
            decision.reservation.status,
            b.amount,
            b.currency,
            b.hold_until or None,
            b.section,
            b.seat_ids,
        )
    try:
        release(k, entry_id, b, decision)
    except REDIS_ERRORS as exc:  # the row is VOID: reconcile releases the entry
        log.warning("booking %s refused; its outbox entry stays: %s", b.reservation_id, exc)
    if decision.outcome == ALREADY_BOOKED:
        raise DomainError("ALREADY_BOOKED", reservationId=str(decision.reservation.reservation_id))
    if decision.outcome == BUYER_REQUIRED:
        raise DomainError(BUYER_REQUIRED)
    if decision.outcome == SEAT_CAP:
        raise DomainError(
            "SEAT_CAP",
            f"This buyer may book {decision.seats_free} more seat(s) for this event.",
            seatsAllowed=decision.seats_free,
        )
    if decision.outcome == SEAT_TAKEN:
        raise DomainError(SEAT_TAKEN, seats=list(decision.taken))
    if decision.outcome == NO_ROOM:
        if decision.seats_free <= 0:
            raise DomainError("SOLD_OUT")
        raise DomainError("INSUFFICIENT_SEATS", remainingSeats=decision.seats_free)
    raise DomainError(
        "BOOKING_NOT_SAVED",
        "The booking could not be saved; nothing was booked. Try again.",
        reservationId=str(b.reservation_id),
    )


# --- Cancellation ----------------------------------------------------------------

# A seat recount holds returns back for a few milliseconds: wait that out before
# leaving the return to reconcile.
_RECOUNT_RETRIES = 20
_RECOUNT_WAIT_SEC = 0.025


def booking_cancel(
    *, reservation_id: uuid.UUID, token: str | None = None, refunded_amount: int | None = None
) -> Reservation:
    """Cancel a confirmed reservation and give its seats back.

    Postgres first (a compare-and-set on the status), then Redis: if Redis fails in
    between, the seats are missing (never oversold) until reconcile returns them,
    exactly once. `refunded_amount`: what of a paid booking's payment goes back
    (checkout.py), recorded in the same UPDATE, so that the refund, however often it
    is tried, gives back what this cancellation decided.
    """
    rows = Reservation.objects.filter(reservation_id=reservation_id).exclude(status=Reservation.Status.VOID)
    if token is not None:
        rows = rows.filter(token=token)
    reservation = rows.first()
    if reservation is None:
        raise DomainError("RESERVATION_NOT_FOUND")
    # One UPDATE; the seat ledger's trigger gives the seats back in Postgres with it.
    updated = rows.filter(status=Reservation.Status.CONFIRMED).update(
        status=Reservation.Status.CANCELLED, cancelled_at=timezone.now(), refunded_amount=refunded_amount
    )
    if not updated:
        raise DomainError("ALREADY_CANCELLED")
    reservation.refresh_from_db()
    return_seats(reservation)
    return reservation


def return_seats(reservation: Reservation, *, wait: bool = True) -> bool:
    """Put a cancellation's seats back on sale (exactly once, see lua/cancel.lua).
    False when left to reconcile: Redis failed, a recount held it back, or Redis holds
    no live state of the event (a purged event's are returned if it is reopened);
    and when the row no longer gives its seats back (a late payment confirmed it).

    Each try locks the row and gives back only while it is still cancelled, released
    or refunded: a late confirmation (`seats_retake`) holds the same lock from
    taking the seats until its commit, so that a caller that read the row before
    (reconcile's list of cancellations) never gives back a confirmed booking's seats."""
    try:
        for _ in range(_RECOUNT_RETRIES if wait else 1):
            with transaction.atomic():
                rows = Reservation.objects.select_for_update().filter(
                    pk=reservation.pk, status__in=GIVEN_BACK
                )
                if rows.values_list("pk", flat=True).first() is None:
                    return False
                given = give_back_cancelled(reservation)
            if given != -2:
                break
            time.sleep(_RECOUNT_WAIT_SEC)
        else:
            return False
        if given == -3:
            return False
    except REDIS_ERRORS as exc:
        log.error("seats of cancelled %s not returned yet: %s", reservation.reservation_id, exc)
        return False
    Reservation.objects.filter(pk=reservation.pk).update(seats_returned_at=timezone.now())
    return True


def seats_retake(reservation: Reservation) -> str:
    """Take a released hold's seats back for its late payment (lua/retake.lua):
    TAKEN or KEPT (they were never given back) when they are the booking's again,
    else NO_ROOM, RECOUNT (a recount ran all along) or GONE. The caller holds the
    row locked (select_for_update) until it is confirmed or given back."""
    k = store.EventKeys(reservation.event_id)
    for _ in range(_RECOUNT_RETRIES):
        taken = store.run(
            _RETAKE.call(
                k,
                booked=k.booked(str(reservation.token)),
                reservation=str(reservation.reservation_id),
                count=reservation.seat_count,
                section=reservation.section,
                seat_ids=list(reservation.seats),
            )
        ).decode()
        if taken != "RECOUNT":
            break
        time.sleep(_RECOUNT_WAIT_SEC)
    return taken


def seats_shown_sold(reservation: Reservation) -> None:
    """A paid hold's seats, shown sold on the map from now on (lua/seats_sold.lua);
    a Redis error is only logged: the next recount shows them so."""
    if not reservation.seats:
        return
    try:
        store.run(_SEATS_SOLD.call(store.EventKeys(reservation.event_id), seat_ids=list(reservation.seats)))
    except REDIS_ERRORS as exc:
        log.warning("seats of %s still shown held: %s", reservation.reservation_id, exc)


def give_back_cancelled(reservation: Reservation) -> int:
    """One try of lua/cancel.lua: seats left, -1 if returned before, -2 during a
    recount, -3 when Redis holds no live state of the event.

    A numbered seat that Postgres has another reservation of (or the operator's
    block) is counted back but not shown free: that happens only after Redis lost
    data (restored from an older snapshot, where the seat's give-back and its sale
    since were both lost), and freeing it would show another buyer's seat free."""
    k = store.EventKeys(reservation.event_id)
    seats = list(reservation.seats)
    if seats:
        others = TakenSeat.objects.filter(event_id=reservation.event_id, seat_id__in=seats).exclude(
            reservation_id=reservation.pk
        )
        taken = set(others.values_list("seat_id", flat=True))
        seats = [seat for seat in seats if seat not in taken]
    return store.run(
        _CANCEL.call(
            k,
            booked=k.booked(str(reservation.token)),
            reservation=str(reservation.reservation_id),
            count=reservation.seat_count,
            section=reservation.section,
            seat_ids=seats,
        )
    )
