"""Booking: an atomic check-and-decrement in Redis, then the durable row in Postgres.

A booking is confirmed to the client only after the Postgres commit. Between the two
steps the booking waits in the event's outbox stream; if the process dies there,
`booking_reconcile` writes it later. If the write fails, `reserve_undo.lua` gives the
seats and the active window back.
"""

import logging
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from booking_app import publish
from booking_app.models import Reservation
from booking_app.selectors import seats_sold
from queue_app.models import Event
from queue_app.services import Token
from ticketing import redis as r
from ticketing.errors import REDIS_ERRORS, ApiError

log = logging.getLogger(__name__)

_REFUSALS = {
    "EVENT_NOT_FOUND": (404, "No such event."),
    "EVENT_CLOSED": (403, "Booking for this event is not open."),
    "NOT_ACTIVE": (403, "This token is not in its booking window (wait in line, or rejoin)."),
    "SOLD_OUT": (409, "Sold out."),
    "INSUFFICIENT_SEATS": (409, "Not enough seats left for this booking."),
}


def _grace_ms() -> int:
    return settings.BOOKING_RECONCILE_GRACE_SEC * 1000


def booking_reserve(
    *, event_id: str, token: Token, seat_count: int, buyer_name: str = "", buyer_email: str = ""
) -> dict:
    k = r.EventKeys(event_id)
    reservation_id = uuid.uuid4()
    reply = r.run(
        "reserve",
        [k.meta, k.active, k.booked(token.text), k.seats, k.outbox],
        [token.raw, token.text, seat_count, str(reservation_id)],
    )
    outcome = reply[0].decode()
    if outcome == "ALREADY_BOOKED":
        raise ApiError(
            409, "ALREADY_BOOKED", "This token has already booked.", reservationId=reply[1].decode()
        )
    if outcome == "VALIDATION_ERROR":
        raise ApiError(400, "VALIDATION_ERROR", f"seatCount must be between 1 and {reply[1]}.")
    if outcome in _REFUSALS:
        status, message = _REFUSALS[outcome]
        extra = {"remainingSeats": reply[1]} if outcome == "INSUFFICIENT_SEATS" else {}
        raise ApiError(status, outcome, message, **extra)
    _, seats_left, entry_id, window_end = reply

    try:
        with transaction.atomic():
            reservation = Reservation.objects.create(
                reservation_id=reservation_id,
                event_id=event_id,
                token=token.text,
                seat_count=seat_count,
                buyer_name=buyer_name,
                buyer_email=buyer_email,
            )
            transaction.on_commit(lambda: publish.publish_soon(reservation))
    except IntegrityError:
        # Either reconcile already wrote this very row (a slow request), or the
        # token holds a confirmed reservation Redis no longer knew about.
        if not Reservation.objects.filter(reservation_id=reservation_id).exists():
            existing = Reservation.objects.filter(
                event_id=event_id, token=token.text, status=Reservation.Status.CONFIRMED
            ).first()
            _undo(k, token, reservation_id, seat_count, entry_id, window_end)
            raise ApiError(
                409,
                "ALREADY_BOOKED",
                "This token has already booked.",
                reservationId=str(existing.reservation_id) if existing else None,
            ) from None
    except DatabaseError as exc:
        log.error("booking %s not saved: %s", reservation_id, exc)
        if _undo(k, token, reservation_id, seat_count, entry_id, window_end):
            raise ApiError(
                503, "BOOKING_NOT_SAVED", "The booking could not be saved; nothing was booked. Try again."
            ) from None
        raise ApiError(503, "BOOKING_PENDING", "The booking is being confirmed; poll to see it.") from None
    r.client().xdel(k.outbox, entry_id)  # durable now: the outbox need not carry it
    return {
        "reservationId": str(reservation_id),
        "seatCount": seat_count,
        "remainingSeats": seats_left,
        "eventId": event_id,
        "status": Reservation.Status.CONFIRMED,
    }


def _undo(
    k: r.EventKeys, token: Token, reservation_id: uuid.UUID, seats: int, entry_id: bytes, window_end: bytes
) -> bool:
    outcome = r.run(
        "reserve_undo",
        [k.seats, k.booked(token.text), k.active, k.outbox],
        [token.raw, str(reservation_id), seats, entry_id, window_end, _grace_ms() // 2],
    )
    return outcome == b"UNDONE"


# --- Cancellation ----------------------------------------------------------------


def booking_cancel(*, reservation_id: uuid.UUID, token: str | None = None) -> Reservation:
    """Cancel a confirmed reservation and give its seats back.

    Postgres first (compare-and-set on the status), then Redis: if Redis is down in
    between, the seats are missing (never oversold) until `booking_reconcile` returns
    them, and cancel.lua makes that return happen exactly once.
    """
    rows = Reservation.objects.filter(reservation_id=reservation_id)
    if token is not None:
        rows = rows.filter(token=token)
    updated = rows.filter(status=Reservation.Status.CONFIRMED).update(
        status=Reservation.Status.CANCELLED, cancelled_at=timezone.now()
    )
    reservation = rows.first()
    if reservation is None:
        raise ApiError(404, "RESERVATION_NOT_FOUND", "No such reservation for this token.")
    if not updated:
        raise ApiError(409, "ALREADY_CANCELLED", "This reservation was already cancelled.")
    _return_seats(reservation)
    return reservation


def _return_seats(reservation: Reservation) -> None:
    k = r.EventKeys(reservation.event_id)
    rid = str(reservation.reservation_id)
    try:
        r.run(
            "cancel",
            [k.seats, k.booked(str(reservation.token)), r.key(k.event_id, "booking", "returned", rid)],
            [rid, reservation.seat_count],
        )
    except REDIS_ERRORS as exc:  # the periodic reconcile retries
        log.error("seats of cancelled %s not returned yet: %s", rid, exc)
        return
    Reservation.objects.filter(pk=reservation.pk).update(seats_returned_at=timezone.now())


# --- Reconcile and recover -----------------------------------------------------------


@dataclass
class Report:
    event_id: str
    total_seats: int
    seats_left: int | None
    sold: int  # confirmed seats in Postgres
    pending: int  # seats of bookings still in the outbox
    unreturned: int  # seats of cancellations not yet back in Redis
    written: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        return (self.seats_left or 0) + self.sold + self.pending + self.unreturned == self.total_seats

    def lines(self) -> list[str]:
        out = [
            f"{self.event_id}: {self.seats_left} left + {self.sold} sold + {self.pending} pending"
            f" + {self.unreturned} being returned = {self.total_seats} seats:"
            f" {'consistent' if self.consistent else 'MISMATCH'}"
        ]
        out += [f"  wrote missing reservation {rid}" for rid in self.written]
        out += [
            f"  refused outbox booking {rid} (token already booked); seats returned" for rid in self.refused
        ]
        return out


def _outbox(k: r.EventKeys, upto: str = "+") -> list[tuple[bytes, dict]]:
    return r.client().xrange(k.outbox, "-", upto)


def booking_reconcile(event_id: str) -> Report:
    """Make Postgres whole from the outbox, retry unreturned cancellations, report.

    Only outbox entries older than the grace period are touched: younger ones belong
    to requests still in flight (which may yet undo them).
    """
    event = Event.objects.get(event_id=event_id)
    k = r.EventKeys(event_id)
    seconds, micros = r.client().time()
    cutoff = seconds * 1000 + micros // 1000 - _grace_ms()
    report = Report(event_id, event.total_seats, None, 0, 0, 0)
    for entry_id, fields in _outbox(k, str(cutoff)):
        rid, token, seats = (
            fields[b"reservationId"].decode(),
            fields[b"token"].decode(),
            int(fields[b"seats"]),
        )
        try:
            with transaction.atomic():
                _, created = Reservation.objects.get_or_create(
                    reservation_id=rid, defaults={"event": event, "token": token, "seat_count": seats}
                )
            if created:
                report.written.append(rid)
        except IntegrityError:
            # The token already holds another confirmed reservation: this one was
            # never confirmed to anyone, so its seats go back.
            r.client().incrby(k.seats, seats)
            report.refused.append(rid)
        r.client().xdel(k.outbox, entry_id)

    unreturned = Reservation.objects.filter(
        event_id=event_id, status=Reservation.Status.CANCELLED, seats_returned_at__isnull=True
    )
    for reservation in unreturned:
        _return_seats(reservation)

    seats_left = r.client().get(k.seats)
    report.seats_left = int(seats_left) if seats_left is not None else None
    report.sold = seats_sold(event_id)
    report.pending = sum(int(f[b"seats"]) for _, f in _outbox(k))
    report.unreturned = unreturned.aggregate(n=Sum("seat_count"))["n"] or 0  # a fresh query
    if not report.consistent:
        log.error("%s", report.lines()[0])
    return report


def event_recover(event_id: str) -> Report:
    """Rebuild an event's Redis state from Postgres after Redis lost its data.

    Seats left = total - sold - pending, booking marks for every confirmed
    reservation (so those tokens poll BOOKED and cannot book again). The waiting line
    itself is not in Postgres: people rejoin and go to the back.
    """
    from queue_app import services as queue

    event = Event.objects.get(event_id=event_id)
    k = r.EventKeys(event_id)
    queue.event_publish(event, sold=seats_sold(event_id))
    confirmed = Reservation.objects.filter(event_id=event_id, status=Reservation.Status.CONFIRMED)
    pipe = r.client().pipeline(transaction=False)
    for rid, token in confirmed.values_list("reservation_id", "token").iterator():
        pipe.set(k.booked(str(token)), str(rid), ex=86400)
        pipe.hsetnx(k.bucket(token.bytes), token.bytes, 0)  # admitted once: EXPIRED, never a new place
    pipe.execute()
    for _ in range(100):
        entries = _outbox(k)
        pending = sum(int(f[b"seats"]) for _, f in entries)
        seats_left = event.total_seats - seats_sold(event_id) - pending
        ids = ",".join(e.decode() for e, _ in entries)
        if r.run("seats_restore", [k.seats, k.outbox], [max(seats_left, 0), ids]):
            break
    else:
        raise RuntimeError(f"{event_id}: bookings kept arriving; seats left not restored")
    return booking_reconcile(event_id)
