"""The booking tests' fixtures (their helpers: testsupport/booking.py, line.py)."""

import pytest
from django.conf import settings
from django.test import override_settings

from queue_app import events
from queue_app import services as queue
from testsupport.line import admit_all
from testsupport.servers import RedisServer


@pytest.fixture
def postgres(db):
    """The test database (PostgreSQL, as everywhere)."""


@pytest.fixture
def active_tokens():
    """`n` people who joined and were admitted: ready to book."""

    def make(event, n: int) -> list[str]:
        if event.admit_per_second < n:
            event.admit_per_second = n
            event.save()
            events.event_publish(event)
        tokens = [queue.queue_join(event_id=event.event_id).token for _ in range(n)]
        admit_all(event.event_id)
        return tokens

    return make


@pytest.fixture
def redis_server(tmp_path):
    """A Redis of this test's own, used by the test process too (so FLUSHALL, a
    crash or a restore harms nobody else). One server, in the cluster run too."""
    server = RedisServer(tmp_path)
    caches = {"default": {**settings.CACHES["default"], "LOCATION": server.url}}
    with override_settings(CACHES=caches, REDIS_URL=server.url, REDIS_CLUSTER=False):
        yield server
    server.stop()
