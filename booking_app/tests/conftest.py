import time

import pytest
from django.db import connection

from conftest import require
from queue_app import services as queue
from ticketing import redis as r


@pytest.fixture
def postgres(db):
    require(connection.vendor == "postgresql", "DATABASE_URL is not PostgreSQL")


def admit_all(event_id: str) -> None:
    """One admission tick in a fresh Redis second."""
    tick = queue.event_admit(event_id)
    if tick.outcome == "ALREADY_TICKED":
        _, micros = r.client().time()
        time.sleep(1 - micros / 1e6 + 0.005)
        tick = queue.event_admit(event_id)
    assert tick.outcome in {"ADMITTED", "EMPTY"}, tick


@pytest.fixture
def active_tokens():
    """`n` people who joined and were admitted: ready to book."""

    def make(event, n: int) -> list[str]:
        if event.admit_per_second < n:
            event.admit_per_second = n
            event.save()
            queue.event_publish(event)
        tokens = [queue.queue_join(event_id=event.event_id)["token"] for _ in range(n)]
        admit_all(event.event_id)
        return tokens

    return make


def book(api, token: str, event_id: str, seats: int = 1, **extra) -> tuple[int, dict]:
    return api.call(
        "post", "/api/booking", {"token": token, "seatCount": seats, "eventId": event_id, **extra}
    )


def seats_left(event_id: str) -> int:
    return int(r.client().get(r.EventKeys(event_id).seats))
