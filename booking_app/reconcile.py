"""Reconcile and recover: make Redis agree with Postgres, whatever failed.

`booking_reconcile` runs every 30 s on beat (and by hand), one at a time per event:

1. Settles the outbox: entries whose row exists leave it (or are released when the
   row is VOID); entries older than the grace period whose request never decided them
   (its process died) are decided now, exactly as the request would have.
2. Recounts seats left from Postgres (`lua/seats_heal.lua`), exactly, while bookings
   go on: a Redis that lost its last second, or came back from an older snapshot,
   sells from Postgres' count again within one run. Until then Postgres' seat ledger
   refuses what Redis would oversell.
3. Returns the seats of cancellations not yet in the `returned` hash, exactly once.

Before those, it ends the event's holds whose time ran out (`checkout.holds_expire`,
which the beat runs every second): a hold run out while nothing ran is settled by
the next reconcile, whoever runs it.

`event_recover` rebuilds an event's Redis state after Redis lost it: settings, the
booking marks, then the same reconcile.
"""

import logging
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Sum
from django.utils import timezone
from redis.exceptions import LockError

from booking_app import checkout
from booking_app.models import GIVEN_BACK, TAKEN, Reservation
from booking_app.services import (
    CONFIRMED,
    Booking,
    booking_decide,
    decision_of,
    outbox_done,
    release,
    return_seats,
)
from queue_app import events, seating
from queue_app.models import Event
from queue_app.seating import HELD, SOLD
from ticketing import metrics, store
from ticketing.errors import REDIS_ERRORS

log = logging.getLogger(__name__)

_SEATS_HEAL = store.Caller("seats_heal", passes="mark free version state section_free confirmed")
_MARK_RESTORE = store.Caller("mark_restore", passes="booked reservation")

# A recount holds back outbox removals and cancellations for as long as it runs
# (milliseconds); if its process dies, they resume after this.
_RECOUNT_TIMEOUT_SEC = 10
# One reconcile per event: a second one finds the event busy and skips it.
_RECONCILE_TIMEOUT_SEC = 300


@dataclass
class Report:
    event_id: str
    total_seats: int = 0
    seats_left: int | None = None
    sold: int = 0  # confirmed seats in Postgres
    pending: int = 0  # seats of outbox entries not yet decided in Postgres
    unreturned: int = 0  # seats of cancellations not yet back on sale
    healed_from: int | None = None  # seats left in Redis before the recount, when it was wrong
    written: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    undecided: int = 0  # outbox entries Postgres could not be asked about
    marks_restored: int = 0  # booking marks Redis had lost
    holds_ended: int = 0  # holds whose time had run out, settled (paid in time) or released
    ledger_fixed_from: int | None = None  # the event's seat ledger, when it disagreed with the rows
    map_healed: list[str] = field(default_factory=list)  # what of the seat map the recount corrected
    busy: bool = False  # another reconcile was working on the event
    recounted: bool = False

    @property
    def healed(self) -> list[str]:
        """What this run found wrong and corrected: Redis' seat count, the seat ledger,
        booking marks Redis had lost. Deciding outbox bookings is not among them: that
        is the outbox's normal end when a request could not finish it."""
        out = []
        if self.healed_from is not None:
            out.append(f"Redis said {self.healed_from} left; Postgres' count now applies")
        if self.ledger_fixed_from is not None:
            out.append(f"the seat ledger said {self.ledger_fixed_from} sold; set to the rows' {self.sold}")
        if self.map_healed:
            wrong = [
                "which seats were taken" if part == "seats" else f"section {part}'s places"
                for part in self.map_healed
            ]
            out.append(f"the seat map had {', '.join(wrong)} wrong; Postgres' now applies")
        if self.marks_restored:
            out.append(f"restored {self.marks_restored} booking mark(s) Redis had lost")
        return out

    @property
    def consistent(self) -> bool:
        """Seats were recounted and everything added up before this run: nothing healed."""
        return self.recounted and not self.healed

    @property
    def verdict(self) -> str:
        """One word: "consistent", "HEALED" (it was not, and is now), "busy" (another
        reconcile had the event) or "not recounted" (Redis or Postgres failed it)."""
        if self.busy:
            return "busy"
        if not self.recounted:
            return "not recounted"
        return "HEALED" if self.healed else "consistent"

    def lines(self) -> list[str]:
        """The verdict line first, then what was done. "consistent" is printed only
        when nothing had to be corrected."""
        if self.busy:
            return [f"{self.event_id}: busy: another reconcile is working on it; skipped"]
        if not self.recounted:
            return [f"{self.event_id}: not recounted: Redis or Postgres unavailable, or a recount running"]
        sums = (
            f"{self.event_id}: {self.seats_left} left + {self.sold} sold + {self.pending} pending"
            f" + {self.unreturned} being returned = {self.total_seats} seats"
        )
        out = [f"{sums}: HEALED: {'; '.join(self.healed)}" if self.healed else f"{sums}: consistent"]
        out += [f"  wrote reservation {rid} from the outbox" for rid in self.written]
        out += [f"  released outbox booking {rid} (refused or not saved in Postgres)" for rid in self.refused]
        if self.holds_ended:
            out.append(f"  ended {self.holds_ended} hold(s) whose time had run out")
        if self.undecided:
            out.append(f"  {self.undecided} outbox booking(s) wait for Postgres")
        return out


def booking_reconcile(event_id: str) -> Report:
    report = Report(event_id)
    k = store.EventKeys(event_id)
    lock = store.client().lock(k.reconciling, timeout=_RECONCILE_TIMEOUT_SEC, blocking=False)
    if not lock.acquire():
        report.busy = True
        return report
    try:
        _settle_outbox(k, report)
        report.holds_ended = checkout.holds_expire(event_id)
        report.ledger_fixed_from = _check_ledger(event_id)
        report.marks_restored = restore_marks(event_id)
        if _recount(k, report):
            _return_cancelled(k, report)
    finally:
        try:
            lock.release()
        except (LockError, *REDIS_ERRORS):
            pass  # expired, or Redis is away: it expires by itself
    if report.healed:
        log.error("%s", report.lines()[0])
    metrics.reconcile_corrected(
        event_id,
        seats=int(report.healed_from is not None),
        ledger=int(report.ledger_fixed_from is not None),
        marks=report.marks_restored,
        outbox=len(report.written) + len(report.refused),
    )
    return report


def _settle_outbox(k: store.EventKeys, report: Report) -> None:
    grace_ms = settings.BOOKING_RECONCILE_GRACE_SEC * 1000
    now = store.now_ms(k.event_id)
    entries = store.client().xrange(k.outbox, "-", "+")
    bookings = [(entry_id, Booking.from_outbox(k.event_id, fields)) for entry_id, fields in entries]
    rows = {
        row.reservation_id: row
        for row in Reservation.objects.filter(reservation_id__in=[b.reservation_id for _, b in bookings])
    }
    for entry_id, b in bookings:
        row = rows.get(b.reservation_id)
        if row is not None:
            decision = decision_of(row)
        else:
            # Younger than the grace period: its request is probably still deciding
            # it. (A negative age is a Redis clock that went back: settle it.)
            age = now - int(entry_id.split(b"-")[0])
            if 0 <= age < grace_ms:
                continue
            decision = booking_decide(b)
            if decision is None:
                report.undecided += 1
                continue
            if decision.outcome == CONFIRMED and decision.reservation.reservation_id == b.reservation_id:
                report.written.append(str(b.reservation_id))
        if decision.outcome == CONFIRMED:
            outbox_done(k, entry_id)
        elif release(k, entry_id, b, decision, unheard=True):
            report.refused.append(str(b.reservation_id))


def _check_ledger(event_id: str) -> int | None:
    """Set the event's seat ledger from its confirmed rows if the two disagree (a
    trigger moves it in the same statement as each row, so only a hand-made change
    can part them). Returns the wrong value, or None.

    Exact under load: the event's row is locked first, and a booking's trigger moves
    the ledger after its row is inserted, so a booking not yet committed waits for
    this transaction and then adds its seats to the corrected value."""
    with transaction.atomic():
        ledger = Event.objects.select_for_update().values_list("seats_sold", flat=True).get(event_id=event_id)
        rows = Reservation.objects.filter(event_id=event_id, status__in=TAKEN)
        sold = rows.aggregate(n=Sum("seat_count"))["n"] or 0
        if ledger == sold:
            return None
        Event.objects.filter(event_id=event_id).update(seats_sold=sold)
    log.error("%s: the seat ledger said %d sold, the rows %d; set from the rows", event_id, ledger, sold)
    return ledger


@dataclass(frozen=True)
class _SeatMapCount:
    """What a recount sets of a seat map (lua/seats_heal.lua); empty without one."""

    version: str = ""
    state: bytes = b""
    section_free: str = ""
    blocked: int = 0


def _seat_map_count(event_id: str, taken: list[tuple], unreturned: list[tuple]) -> _SeatMapCount:
    """The map's seats as Postgres has them (rows: reservation id, status, section,
    seat count, seats): held or sold by a live reservation, still taken for a given-
    back one whose seats Redis has not had back yet, or blocked; and each section's
    places free, as the recount's `free` is for the event."""
    states = {
        seat: HELD if status == Reservation.Status.HELD else SOLD
        for _, status, _, _, seats in taken
        for seat in seats
    }
    states |= {seat: SOLD for *_, seats in unreturned for seat in seats}
    placed = seating.seats_placed(event_id, states)
    if placed is None:
        return _SeatMapCount()
    out = Counter()
    for _, _, section, count, _ in [*taken, *unreturned]:
        out[section] += count
    free = [
        f"{section.code}:{section.places - out[section.code] - blocked}"
        for section, _, blocked in placed.sections
    ]
    return _SeatMapCount(
        version=",".join(str(section.pk) for section, _, _ in placed.sections),
        state=placed.states,
        section_free=",".join(free),
        blocked=sum(blocked for _, _, blocked in placed.sections),
    )


def _recount(k: store.EventKeys, report: Report) -> bool:
    """Set seats left from Postgres (see lua/seats_heal.lua for why it is exact)."""
    recount = store.client().lock(k.recount, timeout=_RECOUNT_TIMEOUT_SEC, blocking=False)
    if not recount.acquire():
        return False
    try:
        returned = {rid.decode() for rid in store.client().hkeys(k.returned)}
        outermost = not connection.in_atomic_block
        with transaction.atomic():
            if outermost:  # one snapshot for every query below
                with connection.cursor() as cur:
                    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            # The snapshot starts with this first query; the outbox is read after it.
            total = Event.objects.values_list("total_seats", flat=True).get(event_id=k.event_id)
            rows = Reservation.objects.filter(event_id=k.event_id)
            fields = ("reservation_id", "status", "section", "seat_count", "seats")
            taken = list(rows.filter(status__in=TAKEN).values_list(*fields))
            unreturned_rows = [
                row
                for row in rows.filter(status__in=GIVEN_BACK).values_list(*fields)
                if str(row[0]) not in returned
            ]
            sold = sum(row[3] for row in taken)
            unreturned = sum(row[3] for row in unreturned_rows)
            seat_map = _seat_map_count(k.event_id, taken, unreturned_rows)
            outbox_ids = [f[b"reservationId"].decode() for _, f in store.client().xrange(k.outbox, "-", "+")]
            durable = [
                str(rid)
                for rid in rows.filter(reservation_id__in=outbox_ids)
                .exclude(status=Reservation.Status.VOID)
                .values_list("reservation_id", flat=True)
            ]
        reply = store.run(
            _SEATS_HEAL.call(
                k,
                mark=recount.local.token,
                free=total - sold - unreturned - seat_map.blocked,
                version=seat_map.version,
                state=seat_map.state,
                section_free=seat_map.section_free,
                confirmed=durable,
            )
        )
    except (DatabaseError, *REDIS_ERRORS) as exc:
        log.error("%s: seats not recounted: %s", k.event_id, exc)
        return False
    finally:
        try:
            recount.release()
        except (LockError, *REDIS_ERRORS):
            pass
    if reply == [b"GONE"]:
        log.info("%s: purged while recounting; nothing to recount", k.event_id)
        return False
    if reply == [b"LOST"]:
        log.error("%s: seat recount took too long; not applied", k.event_id)
        return False
    before, after, pending, wrong = reply
    report.recounted = True
    report.map_healed = [part for part in wrong.decode().split(",") if part]
    report.total_seats, report.sold, report.unreturned = total, sold, unreturned
    report.seats_left, report.pending = after, pending
    if before != after:
        report.healed_from = before
    return True


def _return_cancelled(k: store.EventKeys, report: Report) -> None:
    returned = {rid.decode() for rid in store.client().hkeys(k.returned)}
    for reservation in Reservation.objects.filter(event_id=k.event_id, status__in=GIVEN_BACK):
        rid = str(reservation.reservation_id)
        if rid in returned:
            if reservation.seats_returned_at is None:
                Reservation.objects.filter(pk=reservation.pk, seats_returned_at=None).update(
                    seats_returned_at=timezone.now()
                )
            continue
        if return_seats(reservation, wait=False):
            report.unreturned -= reservation.seat_count
            report.seats_left = (report.seats_left or 0) + reservation.seat_count


def event_recover(event_id: str) -> Report:
    """Rebuild an event's Redis state from Postgres after Redis lost its data.

    Settings and status, a booking mark for every confirmed reservation (those tokens
    poll BOOKED and cannot book again), then reconcile: seats left from Postgres,
    cancellations returned once. The waiting line itself is not in Postgres: people
    rejoin and go to the back.
    """
    event = Event.objects.get(event_id=event_id)
    events.event_publish(event)
    return booking_reconcile(event_id)


def restore_marks(event_id: str, batch: int = 1000) -> int:
    """Every confirmed reservation's token has its booking mark (lua/mark_restore.lua).

    One MGET per thousand reservations finds the marks Redis lost; only those are
    written. Returns how many.
    """
    k = store.EventKeys(event_id)
    confirmed = Reservation.objects.filter(event_id=event_id, status__in=TAKEN)
    rows = list(confirmed.values_list("reservation_id", "token"))
    restored = 0
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        marks = store.client().mget([k.booked(str(token)) for _, token in chunk])
        for (rid, token), mark in zip(chunk, marks, strict=True):
            if mark is None or mark.decode() != str(rid):
                restored += store.run(
                    _MARK_RESTORE.call(k, booked=k.booked(str(token)), reservation=str(rid))
                )
    return restored


def events_reconcile() -> dict[str, bool]:
    """Reconcile every event that Redis knows or that is not closed; rebuild an open
    one Redis lost (a restart without its data) from Postgres."""
    known = {e.decode() for e in store.client().smembers(store.EVENTS_KEY)}
    reports = {}
    for event in Event.objects.all():
        try:
            if event.event_id in known:
                reports[event.event_id] = booking_reconcile(event.event_id).consistent
            elif event.status != Event.Status.CLOSED and not store.client().exists(
                store.EventKeys(event.event_id).meta
            ):
                log.error("%s: Redis had lost the event; rebuilding it from Postgres", event.event_id)
                reports[event.event_id] = event_recover(event.event_id).consistent
        except (DatabaseError, *REDIS_ERRORS) as exc:  # the next run tries again; other events go on
            log.error("%s: not reconciled: %s", event.event_id, exc)
            reports[event.event_id] = False
    return reports
