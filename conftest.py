"""Shared fixtures (helpers the tests import live in testsupport/). Every test
talks to the real Redis named by REDIS_URL (the machine's in CI, an embedded
redis-server under `make test`) and to the database named by DATABASE_URL. Each
test gets its own event id and its keys are removed afterwards, so tests never see
each other's state."""

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from django.conf import settings
from django.test import Client
from django.utils import translation

from testsupport.clients import Api, LaneClient
from testsupport.line import event_state
from testsupport.mail import Mailbox
from testsupport.servers import SERVER_EVENT_ID, collect_static, server_env, start_gunicorn, stop_gunicorn

# The browser the page tests of every app share (fixtures: browser, console, page).
pytest_plugins = ["ticketing.tests.browser"]


def pytest_configure(config: pytest.Config) -> None:
    if settings.STACK_ATTACHED:
        # The suite flushes, crashes and restores Redis servers: never the one of `make run`.
        pytest.exit(
            "the tests run on servers of their own, not on the stack `make run` serves: "
            "run them with `make test` (or set REDIS_URL and DATABASE_URL)",
            returncode=2,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `cluster` need a Redis Cluster: they run in the cluster run
    (`make test-cluster`) and are deselected, not skipped, in any other."""
    if settings.REDIS_CLUSTER:
        return
    drop = [item for item in items if item.get_closest_marker("cluster")]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if not item.get_closest_marker("cluster")]


@pytest.fixture(autouse=True)
def _test_settings(settings) -> Iterator[None]:
    # Every test client is 127.0.0.1; the rate-limit tests turn limits back on.
    settings.RATE_LIMIT_JOIN = 0
    settings.RATE_LIMIT_LEAVE = 0
    settings.RATE_LIMIT_CHALLENGE = 0
    settings.RATE_LIMIT_BOOKING = 0
    settings.RATE_LIMIT_BOOKING_TOKEN = 0
    settings.RATE_LIMIT_SIGN_IN = 0
    settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 0
    settings.RATE_LIMIT_SIGN_UP = 0
    settings.RATE_LIMIT_NOTIFY = 0
    # Each poll refreshes its process's copy of the line first, so that a test sees
    # what it just did; queue_app/tests/test_line.py tests the copy's staleness.
    settings.QUEUE_LINE_REFRESH_MS = 0
    # Each join takes its own number (lua/join.lua), so that a test's joins are in
    # Redis as it makes them; queue_app/tests/test_arrivals.py tests the blocks a
    # web process takes them in (queue_app/arrivals.py).
    settings.QUEUE_BLOCK_MS = 0
    # Pages render without `collectstatic` having run (production keeps the manifest).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    yield
    # A request in another language (the test client's Accept-Language) leaves that
    # language active in this thread: the next test starts in the default again.
    translation.deactivate()


@pytest.fixture
def rc() -> redis_lib.Redis:
    from ticketing import store

    return store.client()


@pytest.fixture
def make_event(db) -> Iterator[Callable[..., "object"]]:
    """Create events with unique ids (and their Redis state); wipe them afterwards."""
    from queue_app import events
    from queue_app.models import Event
    from ticketing import store

    made: list[str] = []

    def make(**fields) -> Event:
        fields.setdefault("event_id", f"t-{uuid.uuid4().hex[:12]}")
        fields.setdefault("total_seats", 100)
        event = Event.objects.create(**fields)
        events.event_publish(event)
        made.append(event.event_id)
        return event

    yield make
    for event_id in made:
        events.event_wipe(event_id)
        store.client().srem(store.EVENTS_KEY, event_id)


@pytest.fixture
def event(make_event):
    return make_event()


@pytest.fixture(params=["django", "fast"], ids=["django-lane", "fast-lane"])
def lane(request, client) -> Client | LaneClient:
    """A test client for each lane: Django's (the DRF views), and the ASGI one
    production serves (the fast lane for the crowd's endpoints)."""
    client.raise_request_exception = False
    return client if request.param == "django" else LaneClient(client)


@pytest.fixture
def api(client) -> Api:
    client.raise_request_exception = False
    return Api(client)


@pytest.fixture
def lanes_api(lane) -> Api:
    """`api` on each lane in turn."""
    return Api(lane)


@pytest.fixture
def snapshot() -> Callable[[str], dict]:
    return event_state


@pytest.fixture
def redis_url() -> str:
    return settings.REDIS_URL


@pytest.fixture(scope="session")
def production_server(django_db_setup) -> Iterator[str]:
    """One app server for the session, as production runs it (start_gunicorn), on
    the test database and the test Redis, serving its static files as production
    does; its base URL. Events are made per test with ids of their own, so every
    test can share it; it sees a test's rows once they are committed. Its log is
    test-artifacts/production-server.log."""
    collect_static()
    log = Path(settings.BASE_DIR) / "test-artifacts" / "production-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stderr:
        base, proc = start_gunicorn(server_env(EVENT_ID=SERVER_EVENT_ID), stderr=stderr)
    yield base
    stop_gunicorn(proc)


@pytest.fixture(scope="module")
def mailbox() -> Iterator[Mailbox]:
    """A real SMTP server (testsupport/mail.py) for a module's tests and its servers."""
    box = Mailbox()
    box.controller.start()
    yield box
    box.controller.stop()


@pytest.fixture
def gunicorn():
    """Start app servers as separate processes; killed afterwards."""
    started: list[subprocess.Popen] = []

    def start(env: dict) -> tuple[str, subprocess.Popen]:
        base, proc = start_gunicorn(env)
        started.append(proc)
        return base, proc

    yield start
    for proc in started:
        stop_gunicorn(proc)
