"""Shared fixtures. Every test talks to the real Redis named by REDIS_URL (the
machine's in CI, an embedded redis-server under `make test`) and to the database
named by DATABASE_URL. Each test gets its own event id and its keys are removed
afterwards, so tests never see each other's state."""

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import typing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from django.conf import settings
from django.http import HttpResponse
from django.test import Client

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# The browser the page tests of every app share (fixtures: browser, console, page).
pytest_plugins = ["ticketing.tests.browser"]


def require(condition: bool, reason: str) -> None:
    """Skip when a service is missing on a developer's machine; fail in CI."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    if settings.STACK_ATTACHED:
        # The suite flushes, crashes and restores Redis servers: never the one of `make run`.
        pytest.exit(
            "the tests run on servers of their own, not on the stack `make run` serves: "
            "run them with `make test` (or set REDIS_URL and DATABASE_URL)",
            returncode=2,
        )


class CheckedThread(threading.Thread):
    """A test's thread whose exception reaches the test: `join()` raises it again in
    the test's thread, naming the thread, so the failure says what went wrong there."""

    error: BaseException | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:  # noqa: B036 - raised again by join(), whatever it is
            self.error = exc

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.is_alive():
            raise AssertionError(f"thread {self.name} still runs after {timeout} s")
        if self.error is not None:
            raise AssertionError(f"thread {self.name} failed: {self.error!r}") from self.error


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
def _test_settings(settings) -> None:
    # Every test client is 127.0.0.1; the rate-limit tests turn limits back on.
    settings.RATE_LIMIT_JOIN = 0
    settings.RATE_LIMIT_LEAVE = 0
    settings.RATE_LIMIT_CHALLENGE = 0
    settings.RATE_LIMIT_BOOKING = 0
    settings.RATE_LIMIT_BOOKING_TOKEN = 0
    settings.RATE_LIMIT_SIGN_IN = 0
    settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 0
    settings.RATE_LIMIT_SIGN_UP = 0
    # Each poll refreshes its process's copy of the line first, so that a test sees
    # what it just did; queue_app/tests/test_line.py tests the copy's staleness.
    settings.QUEUE_LINE_REFRESH_MS = 0
    # Pages render without `collectstatic` having run (production keeps the manifest).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def rc() -> redis_lib.Redis:
    from ticketing import redis as r

    return r.client()


@pytest.fixture
def make_event(db) -> Iterator[Callable[..., "object"]]:
    """Create events with unique ids (and their Redis state); wipe them afterwards."""
    from queue_app import services
    from queue_app.models import Event
    from ticketing import redis as r

    made: list[str] = []

    def make(**fields) -> Event:
        fields.setdefault("event_id", f"t-{uuid.uuid4().hex[:12]}")
        fields.setdefault("total_seats", 100)
        event = Event.objects.create(**fields)
        services.event_publish(event)
        made.append(event.event_id)
        return event

    yield make
    for event_id in made:
        services.event_wipe(event_id)
        r.client().srem(r.EVENTS_KEY, event_id)


@pytest.fixture
def event(make_event):
    return make_event()


def unknown_token(event_id: str) -> str:
    """A token this service could have issued for the event (signed) but never did:
    the way to ask about a stranger now that made-up tokens are refused."""
    from queue_app import tokens

    return str(uuid.UUID(bytes=tokens.mint(event_id, tokens.MAX_NUMBER)))


def line_token(event_id: str, number: int) -> "object":
    """The token the join script issued for this arrival number in the event's
    line as it is now (a Token of queue_app.services): tokens are (generation,
    number), so a test can name a place without keeping every token."""
    from queue_app import services, tokens
    from ticketing import redis as r

    k = r.event_keys(event_id)
    gen = bytes.fromhex(r.client().hget(k.meta, "gen").decode())
    nonce = r.client().getrange(k.nonces, number * 2 - 2, number * 2 - 1)
    return services.Token.of(tokens.mint(event_id, number, gen, nonce))


def end_windows(event_id: str) -> None:
    """End the active window of everyone admitted so far, as time would: each entry
    of the admission log (lua/lib/line.lua) gets an end in the past."""
    from ticketing import redis as r

    c, k = r.client(), r.event_keys(event_id)
    ended = r.now_ms(event_id) - 1
    for entry, score in c.zrange(k.windows, 0, -1, withscores=True):
        to, first, _, admitted = entry.split(b":")
        c.zrem(k.windows, entry)
        c.zadd(k.windows, {b":".join([to, first, str(ended).encode(), admitted]): score})


class Api:
    """The JSON API through Django's test client: returns (status, parsed body)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.last = None

    def call(self, method: str, path: str, body=None, **extra) -> tuple[int, dict]:
        kwargs = {}
        if body is not None:
            kwargs = {
                "data": body if isinstance(body, (bytes, str)) else json.dumps(body),
                "content_type": extra.pop("content_type", "application/json"),
            }
        resp = getattr(self.client, method)(path, **kwargs, **extra)
        self.last = resp
        return resp.status_code, json.loads(resp.content)

    def join(self, event_id: str | None = None, **extra) -> tuple[int, dict]:
        return self.call(
            "post", "/api/queue/join", {} if event_id is None else {"eventId": event_id}, **extra
        )

    def rejoin(self, token: str, event_id: str | None = None, **extra) -> tuple[int, dict]:
        body = {"token": token} | ({"eventId": event_id} if event_id else {})
        return self.call("post", "/api/queue/rejoin", body, **extra)

    def leave(self, token: str, event_id: str, **extra) -> tuple[int, dict]:
        return self.call("delete", f"/api/queue/leave?token={token}&eventId={event_id}", **extra)

    def poll(self, token: str, event_id: str, **extra) -> tuple[int, dict]:
        return self.call("get", f"/api/status/poll?token={token}&eventId={event_id}", **extra)

    def token(self, event_id: str) -> str:
        status, body = self.join(event_id)
        assert status == 200, body
        return body["data"]["token"]


class LaneClient:
    """Django's test Client, except that the fast lane's routes go through the ASGI
    application production serves (ticketing/asgi.py: the fast lane, and Django's
    ASGI application behind it), in-process on one event loop."""

    _loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, django_client: Client) -> None:
        self.django = django_client

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        if cls._loop is None:
            cls._loop = asyncio.new_event_loop()
            threading.Thread(target=cls._loop.run_forever, name="lane-client", daemon=True).start()
        return cls._loop

    def generic(
        self, method: str, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        from ticketing.asgi import application

        route_path, _, query = path.partition("?")
        route = application.routes.get(route_path)
        if route is None or route.method != method.upper():
            return self.django.generic(
                method, path, data, content_type or "application/octet-stream", **extra
            )
        body = data.encode() if isinstance(data, str) else data
        headers = [(b"host", b"testserver"), (b"content-length", str(len(body)).encode())]
        if content_type:
            headers.append((b"content-type", content_type.encode()))
        for name, value in extra.items():
            if name.startswith("HTTP_"):
                headers.append((name[5:].lower().replace("_", "-").encode(), value.encode()))
        if self.django.cookies:
            cookies = "; ".join(f"{name}={morsel.value}" for name, morsel in self.django.cookies.items())
            headers.append((b"cookie", cookies.encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method.upper(),
            "scheme": "http",
            "path": route_path,
            "raw_path": route_path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": (extra.get("REMOTE_ADDR", "127.0.0.1"), 50000),
            "server": ("testserver", 80),
        }
        return asyncio.run_coroutine_threadsafe(_asgi_call(application, scope, body), self.loop()).result(60)

    def get(self, path: str, data: dict | None = None, **extra) -> HttpResponse:
        assert not data, "put the query in the path"
        return self.generic("GET", path, **extra)

    def delete(
        self, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        return self.generic("DELETE", path, data, content_type, **extra)

    def put(
        self, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        return self.generic("PUT", path, data, content_type, **extra)

    def post(
        self, path: str, data: bytes | str | None = None, content_type: str | None = None, **extra
    ) -> HttpResponse:
        if data is not None and not isinstance(data, (bytes, str)):
            return self.django.post(path, data, **extra)  # a form: not the fast lane's
        return self.generic("POST", path, data or b"", content_type, **extra)


async def _asgi_call(app, scope: dict, body: bytes) -> HttpResponse:
    sent = False
    started: dict = {}
    chunks: list[bytes] = []

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # no disconnect while the app answers
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    response = HttpResponse(b"".join(chunks), status=started["status"])
    for name, value in started.get("headers", []):
        response.headers[name.decode("latin-1")] = value.decode("latin-1")
    response.json = lambda: json.loads(response.content)
    return response


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


def event_state(event_id: str) -> dict:
    """Every Redis key of an event with its type and value: to prove nothing changed.
    But the operator's counts, which a refusal is meant to move: refused joins
    (test_refused_joins_are_counted_per_event_and_reason) and the metrics' counters
    (bookings by outcome, ticketing/tests/test_metrics.py)."""
    from ticketing import metrics
    from ticketing import redis as r

    c = r.client()
    state = {}
    counts = {r.EventKeys(event_id).refused.encode(), metrics.event_key(event_id).encode()}
    for name in sorted(r.scan(r.EventKeys(event_id).pattern())):
        if name in counts:
            continue
        kind = c.type(name).decode()
        value = {
            "string": c.get,
            "list": lambda n: c.lrange(n, 0, -1),
            "hash": c.hgetall,
            "zset": lambda n: c.zrange(n, 0, -1, withscores=True),
            "set": c.smembers,
            "stream": lambda n: c.xrange(n),
        }[kind](name)
        state[name] = (kind, value)
    return state


@pytest.fixture
def snapshot() -> Callable[[str], dict]:
    return event_state


@pytest.fixture
def redis_url() -> str:
    return settings.REDIS_URL


def wait_for_health(base: str, proc=None, seconds: float = 60) -> None:
    """Until `base`/health answers (gunicorn accepts before its workers are up)."""
    import time

    import requests

    deadline = time.monotonic() + seconds
    while True:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}")
        try:
            if requests.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{base} did not come up")
        time.sleep(0.1)


def database_url_of_tests() -> str:
    """The test database as a DATABASE_URL, for the processes a test starts."""
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(
    env: dict, *, workers: int = 1, stderr: typing.IO | int = subprocess.DEVNULL
) -> tuple[str, subprocess.Popen]:
    """An app server as production runs it (the Procfile's `web`: gunicorn, uvicorn
    workers, ticketing/asgi.py), in its own process group so a test may kill it
    whole or one worker at a time. `stderr` takes the server's log. A server that
    never becomes healthy is killed."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "ticketing.asgi:application",
            "--config",
            "python:ticketing.gunicorn_conf",
            "--graceful-timeout",
            "1",
        ],
        cwd=settings.BASE_DIR,
        env={
            **os.environ,
            "REDIS_URL": settings.REDIS_URL,
            "REDIS_CLUSTER": str(settings.REDIS_CLUSTER).lower(),
            "DATABASE_URL": database_url_of_tests(),
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "WEB_CONCURRENCY": str(workers),
            # Every test client is 127.0.0.1: a test that wants a limit names it.
            "RATE_LIMIT_BOOKING": "0",
            "RATE_LIMIT_BOOKING_TOKEN": "0",
            "RATE_LIMIT_CHALLENGE": "0",
            **env,
        },
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, proc)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):  # (gone already: it refused to start)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return base, proc


def server_env(**overrides: str) -> dict[str, str]:
    """What an app server needs to serve the tests' own state (start_gunicorn adds
    the test Redis): the test database; this process's keys, so that a session or a
    token made here is good there; and the settings every test runs with
    (`_test_settings`), which the server reads from its environment. `overrides`
    last."""
    return {
        "DATABASE_URL": database_url_of_tests(),
        "SECRET_KEY": settings.SECRET_KEY,
        "QUEUE_TOKEN_KEY": settings.QUEUE_TOKEN_KEY,
        "DRAW_SIGNING_KEY": base64.b64encode(settings.DRAW_SIGNING_KEY).decode(),
        "RATE_LIMIT_JOIN": "0",
        "RATE_LIMIT_LEAVE": "0",
        "RATE_LIMIT_CHALLENGE": "0",
        "RATE_LIMIT_SIGN_IN": "0",
        "RATE_LIMIT_SIGN_IN_ACCOUNT": "0",
        "RATE_LIMIT_SIGN_UP": "0",
        "QUEUE_LINE_REFRESH_MS": "0",
        **overrides,
    }


def collect_static() -> None:
    """`collectstatic` into the server's STATIC_ROOT, as `make run` does before it
    serves (whitenoise serves the collected, hashed and compressed files, and lists
    them once, at start). Skipped when the collected manifest is newer than every
    file it would collect: collecting takes seconds."""
    from django.contrib.staticfiles import finders

    manifest = Path(settings.STATIC_ROOT) / "staticfiles.json"
    if manifest.exists():
        newest = max(
            os.path.getmtime(storage.path(path))
            for finder in finders.get_finders()
            for path, storage in finder.list(["CVS", ".*", "*~"])
        )
        if newest < manifest.stat().st_mtime:
            return
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=settings.BASE_DIR,
        check=True,
    )


def stop_gunicorn(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# The production server's default event (EVENT_ID): a request without an eventId
# is for it. Ids of tests' events are unique, and so is this one.
SERVER_EVENT_ID = f"t-default-{uuid.uuid4().hex[:8]}"


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


class ServerClient:
    """An app server spoken to over HTTP, called as Django's test Client is
    (`generic`), answering an HttpResponse as the test Client does. REMOTE_ADDR
    is sent as X-Forwarded-For (which the server believes from TRUSTED_PROXIES
    only); other HTTP_* names as their headers."""

    def __init__(self, base: str) -> None:
        import requests

        self.base = base
        self.session = requests.Session()
        self.session.headers.clear()  # nothing the test Client would not send

    def generic(
        self, method: str, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        headers = {"Content-Type": content_type} if content_type else {}
        for name, value in extra.items():
            if name == "REMOTE_ADDR":
                headers["X-Forwarded-For"] = value
            elif name.startswith("HTTP_"):
                headers[name[5:].replace("_", "-")] = value
            else:
                raise TypeError(f"{name}: not a header")
        answer = self.session.request(
            method.upper(),
            self.base + path,
            data=data.encode() if isinstance(data, str) else data,
            headers=headers,
            timeout=60,
            allow_redirects=False,
        )
        response = HttpResponse(answer.content, status=answer.status_code)
        del response.headers["Content-Type"]  # only what the server sent
        for name, value in answer.headers.items():
            response.headers[name] = value
        response.json = answer.json
        return response


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
