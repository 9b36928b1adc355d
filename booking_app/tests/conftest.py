"""The booking tests' fixtures (their helpers: testsupport/booking.py, line.py)."""

import pytest
from django.conf import settings
from django.test import override_settings

from queue_app import events
from queue_app import services as queue
from testsupport.line import admit_all
from testsupport.servers import RedisServer
from testsupport.toss import TossStandIn
from ticketing.celery import app as celery_app


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
def priced(make_event):
    """Makes a priced event: 10 seats at 55,000 KRW each, held 10 minutes, unless
    told otherwise."""

    def make(**fields):
        fields = {"total_seats": 10, "price": 55_000, "currency": "KRW", "hold_seconds": 600, **fields}
        return make_event(**fields)

    return make


@pytest.fixture
def eager():
    """Tasks run where they are queued, as a worker would run them (the server tests
    run a real worker)."""
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def toss(settings):
    """Toss Payments as the provider, answered by a local stand-in of its API."""
    standin = TossStandIn().start()
    settings.PAYMENTS_PROVIDER = "toss"
    settings.TOSS_SECRET_KEY = standin.secret
    settings.TOSS_CLIENT_KEY = "test_ck_standin"
    settings.TOSS_API_URL = standin.url
    settings.PAYMENTS_TIMEOUT_SEC = 1
    yield standin
    standin.stop()


@pytest.fixture
def redis_server(tmp_path):
    """A Redis of this test's own, used by the test process too (so FLUSHALL, a
    crash or a restore harms nobody else). One server, in the cluster run too."""
    server = RedisServer(tmp_path)
    caches = {"default": {**settings.CACHES["default"], "LOCATION": server.url}}
    with override_settings(CACHES=caches, REDIS_URL=server.url, REDIS_CLUSTER=False):
        yield server
    server.stop()
