"""The operator's live view of a sale: a sample per event per tick, kept 30 minutes.

The tick already knows, for every event, how many it admitted and how many wait:
it appends "<second>:<waiting>:<admitted>" to the event's `live` list in one
pipelined round trip (`record`), trimmed to SAMPLES. The admin's live page
(queue_app/admin.py) draws them with the bookings Postgres holds (`series`).
"""

import time
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, QuerySet
from django.db.models.functions import Trunc
from django.utils import timezone

from ticketing import store

SAMPLES = 1800  # 30 minutes of one tick a second
BUCKET_SECONDS = 10  # the charts' resolution


@dataclass(frozen=True, slots=True)
class Sample:
    second: int
    waiting: int
    admitted: int


def record(samples: dict[str, tuple[int, int]], second: int | None = None) -> None:
    """Append one sample per event: {event_id: (waiting, admitted)}."""
    if not samples:
        return
    second = int(time.time()) if second is None else second
    pipe = store.client().pipeline(transaction=False)
    for event_id, (waiting, admitted) in samples.items():
        key = store.event_keys(event_id).live
        pipe.lpush(key, f"{second}:{waiting}:{admitted}").ltrim(key, 0, SAMPLES - 1)
    pipe.execute()


def samples(event_id: str) -> list[Sample]:
    """The event's samples of the last 30 minutes, oldest first."""
    raw = store.client().lrange(store.event_keys(event_id).live, 0, SAMPLES - 1)
    since = int(time.time()) - SAMPLES
    parsed = (Sample(*map(int, item.split(b":"))) for item in reversed(raw))
    return [s for s in parsed if s.second > since]


def series(event_id: str, bookings: QuerySet) -> dict:
    """Waiting (the last sample of each bucket), admitted and bookings (sums) per
    BUCKET_SECONDS over the last 30 minutes, as the live page's charts read them:
    {"start": unix s, "step": s, "waiting": [...], "admitted": [...], "bookings": [...]}."""
    now = int(time.time())
    start = now - SAMPLES - (now % BUCKET_SECONDS)
    n = (now - start) // BUCKET_SECONDS + 1
    waiting: list[int | None] = [None] * n
    admitted = [0] * n
    for s in samples(event_id):
        i = (s.second - start) // BUCKET_SECONDS
        if 0 <= i < n:
            waiting[i] = s.waiting
            admitted[i] += s.admitted
    booked = [0] * n
    recent = bookings.filter(created_at__gte=timezone.now() - timedelta(seconds=SAMPLES + BUCKET_SECONDS))
    per_second = recent.annotate(at=Trunc("created_at", "second")).values("at").annotate(n=Count("pk"))
    for row in per_second:
        i = (int(row["at"].timestamp()) - start) // BUCKET_SECONDS
        if 0 <= i < n:
            booked[i] += row["n"]
    return {
        "start": start,
        "step": BUCKET_SECONDS,
        "waiting": waiting,
        "admitted": admitted,
        "bookings": booked,
    }
