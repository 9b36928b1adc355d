"""Retention: a closed event's Redis data goes; what Postgres holds stays.

Redis holds an event's live state (the line, the token index, active windows,
booking marks, the outbox, counters) for as long as the sale needs it. Once the
event is CLOSED and EVENT_PURGE_AFTER_SECONDS have passed (time for late polls to
read EXPIRED and for reconcile to settle the last bookings), beat removes all of it
(`events_purge`); `manage.py purge_event` does it at once. The reservations and the
event's record stay in Postgres. An outbox still holding a booking Postgres has not
decided is never purged: the booking is settled first, or the purge waits.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from booking_app.reconcile import booking_reconcile
from queue_app import events
from queue_app.models import Event
from ticketing import store

log = logging.getLogger(__name__)


class PurgeRefused(Exception):
    """The event cannot lose its Redis data now; the message says why."""


def event_purge(event_id: str) -> int:
    """Settle the event's outbox, then delete every Redis key of it. Returns how many.

    Refused for an event that is not CLOSED (its line would be thrown away) and while
    a booking in the outbox is undecided (Postgres away, or another reconcile busy).

    The wipe holds the event's row locked: a reopen (any change of the row: the
    admin, `event_status`) waits for it and then publishes the event afresh, and a
    reopen that came first makes the purge refuse. Neither can wipe the other's work.
    """
    _closed(event_id)
    k = store.EventKeys(event_id)
    report = booking_reconcile(event_id)
    if report.busy or store.client().xlen(k.outbox):
        raise PurgeRefused(f"{event_id}: bookings in the outbox are not decided yet; try again later.")
    with transaction.atomic():
        event = _closed(event_id, lock=True)
        # Out of the tick's and reconcile's sight first, so neither recreates a key.
        store.client().srem(store.EVENTS_KEY, event_id)
        deleted = events.event_wipe(event_id)
    log.info("purged %s from Redis: %d keys (closed %s)", event_id, deleted, event.closed_at)
    return deleted


def _closed(event_id: str, *, lock: bool = False) -> Event:
    rows = Event.objects.select_for_update() if lock else Event.objects
    event = rows.filter(event_id=event_id).first()
    if event is None or event.status != Event.Status.CLOSED:
        raise PurgeRefused(f"{event_id}: only a CLOSED event's Redis data can be purged.")
    return event


def events_purge() -> dict[str, int]:
    """Purge every event closed longer ago than EVENT_PURGE_AFTER_SECONDS whose data
    Redis still holds. Returns keys deleted per event purged."""
    cutoff = timezone.now() - timedelta(seconds=settings.EVENT_PURGE_AFTER_SECONDS)
    known = {e.decode() for e in store.client().smembers(store.EVENTS_KEY)}
    purged = {}
    for event_id in Event.objects.filter(status=Event.Status.CLOSED, closed_at__lte=cutoff).values_list(
        "event_id", flat=True
    ):
        if event_id not in known and not store.client().exists(store.EventKeys(event_id).meta):
            continue  # purged before
        try:
            purged[event_id] = event_purge(event_id)
        except PurgeRefused as exc:
            log.warning("%s", exc)
    return purged
