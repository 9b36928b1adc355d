"""Which seats are free, as crowds read it: each web process keeps one copy per
event, refreshed when it is older than QUEUE_LINE_REFRESH_MS (200 ms unless set),
as the line's copy is (queue_app/line.py). One Redis round trip per event per
process per refresh, however many buyers look at the map meanwhile; an answer is
never more than one refresh behind the seats' state in Redis.

A numbered section's seats are its `state`: 2 bits a seat in the order of its
seats in the layout (GET /api/events/<id>/seat-map), the first seat in a byte's
high bits, base64: 0 free, 1 held (a buyer is paying), 2 sold, 3 blocked by the
operator. 50,000 seats are 12.5 KB before base64, served as Redis keeps them
(lua/lib/seats.lua).
"""

import base64
import threading
import time
from dataclasses import dataclass

import orjson
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from queue_app.layout import GENERAL_ADMISSION
from ticketing import store
from ticketing.errors import DomainError, envelope


@dataclass(frozen=True, slots=True)
class Copy:
    read_at: float  # time.monotonic() of the read
    answer: dict
    body: bytes  # the answer in its envelope, as JSON: written once per refresh


_copies: dict[str, Copy] = {}
_reading: dict[str, threading.Lock] = {}
_lock = threading.Lock()


def seats_available(event_id: str) -> dict:
    """The event's sections with their prices and places free, and each numbered
    seat's state; EVENT_NOT_FOUND for an event Redis does not have."""
    return _copy(event_id).answer


def seats_available_json(event_id: str) -> bytes:
    """`seats_available` in the API's envelope, as JSON: what a request is answered."""
    return _copy(event_id).body


def _copy(event_id: str) -> Copy:
    refresh = settings.QUEUE_LINE_REFRESH_MS / 1000
    copy = _copies.get(event_id)
    if copy is not None and time.monotonic() - copy.read_at < refresh:
        return copy
    with _lock:
        reading = _reading.setdefault(event_id, threading.Lock())
    with reading:  # one read per process at a time; the others take its copy
        copy = _copies.get(event_id)
        if copy is None or time.monotonic() - copy.read_at >= refresh:
            read_at, answer = time.monotonic(), _read(event_id)
            copy = Copy(read_at, answer, orjson.dumps(envelope(answer)))
            _copies[event_id] = copy
    return copy


def _read(event_id: str) -> dict:
    k = store.EventKeys(event_id)
    pipe = store.client().pipeline(transaction=False)
    pipe.hmget(k.meta, "status", "price", "currency", "totalSeats")
    pipe.get(k.seats)
    pipe.hgetall(k.sections)
    pipe.hgetall(k.section_left)
    pipe.get(k.seat_state)
    (status, price, currency, total), left, sections, places_left, state = pipe.execute()
    if status is None:
        raise DomainError("EVENT_NOT_FOUND")
    answer = {
        "eventId": event_id,
        "eventStatus": status.decode(),
        "currency": (currency or b"").decode(),
        "seatsLeft": max(int(left or 0), 0),
        "refreshedAt": int(time.time() * 1000),
    }
    if not sections:  # an event without a map: one unnumbered section of all its seats
        answer["sections"] = [
            {
                "id": GENERAL_ADMISSION,
                "price": int(price or 0),
                "places": int(total or 0),
                "free": answer["seatsLeft"],
                "numbered": False,
                "state": None,
            }
        ]
        return answer
    shown = []
    for code, spec in sections.items():
        base, places, numbered, section_price, *_ = spec.decode().split(" ")
        base, places = int(base), int(places)
        seats = None
        if numbered == "1":
            first, last = base // 4, (base + places + 3) // 4
            seats = base64.b64encode((state or b"")[first:last].ljust(last - first, b"\0")).decode()
        shown.append(
            (
                base,
                {
                    "id": code.decode(),
                    "price": int(section_price),
                    "places": places,
                    "free": max(int(places_left.get(code, 0)), 0),
                    "numbered": numbered == "1",
                    "state": seats,
                },
            )
        )
    answer["sections"] = [section for _, section in sorted(shown, key=lambda pair: (pair[0], pair[1]["id"]))]
    return answer


@receiver(setting_changed)
def forget(*, setting: str = "CACHES", **kwargs: object) -> None:
    """Drop every copy: another Redis (CACHES) has other seats."""
    if setting == "CACHES":
        _copies.clear()
