import shutil
import time
from pathlib import Path

import pytest
import redis as redis_lib
from django.conf import settings
from django.test import override_settings

from conftest import database_url_of_tests  # noqa: F401 (the booking tests' import of it)
from queue_app import services as queue
from ticketing import redis as r
from ticketing import servers


@pytest.fixture
def postgres(db):
    """The test database (PostgreSQL, as everywhere)."""


def fresh_tick(event_id: str) -> queue.Tick:
    """One admission tick, in a second of Redis' clock that had none yet: a second
    that had its tick admits nobody (ALREADY_TICKED), so this one waits for the next
    second and tries again, until Redis says it came."""
    tick = queue.event_admit(event_id)
    while tick.outcome == "ALREADY_TICKED":
        time.sleep(1 - r.now_ms(event_id) % 1000 / 1000)
        tick = queue.event_admit(event_id)
    return tick


def admit_all(event_id: str) -> None:
    """One admission tick in a fresh Redis second."""
    tick = fresh_tick(event_id)
    assert tick.outcome in {"ADMITTED", "EMPTY"}, tick


@pytest.fixture
def active_tokens():
    """`n` people who joined and were admitted: ready to book."""

    def make(event, n: int) -> list[str]:
        if event.admit_per_second < n:
            event.admit_per_second = n
            event.save()
            queue.event_publish(event)
        tokens = [queue.queue_join(event_id=event.event_id).token for _ in range(n)]
        admit_all(event.event_id)
        return tokens

    return make


def book(api, token: str, event_id: str, seats: int = 1, **extra) -> tuple[int, dict]:
    return api.call(
        "post", "/api/booking", {"token": token, "seatCount": seats, "eventId": event_id, **extra}
    )


def seats_left(event_id: str) -> int:
    return int(r.client().get(r.EventKeys(event_id).seats))


class RedisServer:
    """A redis-server process of the test's own: it may be flushed, crashed, and
    brought back from an older snapshot, as a real Redis is in production."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.proc, self.port = servers.start_redis(data_dir, persistent=False)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.snapshots = 0

    def client(self) -> redis_lib.Redis:
        return redis_lib.Redis(port=self.port)

    def snapshot(self) -> Path:
        """An RDB file of the data as it is now."""
        self.client().save()
        self.snapshots += 1
        kept = self.dir / f"snapshot-{self.snapshots}.rdb"
        shutil.copy(self.dir / "dump.rdb", kept)
        return kept

    def crash(self) -> None:
        self.proc.kill()  # SIGKILL: nothing is written on the way out
        self.proc.wait()

    def restart(self, snapshot: Path | None = None) -> None:
        """Start again on the same port, from `snapshot`, or empty."""
        (self.dir / "dump.rdb").unlink(missing_ok=True)
        if snapshot is not None:
            shutil.copy(snapshot, self.dir / "dump.rdb")
        self.proc, _ = servers.start_redis(self.dir, persistent=False, port=self.port)

    def stop(self) -> None:
        if self.proc.poll() is None:
            servers.stop_redis(self.proc)


@pytest.fixture
def redis_server(tmp_path):
    """A Redis of this test's own, used by the test process too (so FLUSHALL, a
    crash or a restore harms nobody else). One server, in the cluster run too."""
    server = RedisServer(tmp_path)
    caches = {"default": {**settings.CACHES["default"], "LOCATION": server.url}}
    with override_settings(CACHES=caches, REDIS_URL=server.url, REDIS_CLUSTER=False):
        yield server
    server.stop()
