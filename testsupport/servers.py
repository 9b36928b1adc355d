"""The processes a test starts, on the tests' own state: app servers as production
runs them (gunicorn, through ticketing/servers.py, which the dev stack and the
benchmarks start theirs with too) and redis-servers of a test's own."""

import base64
import os
import shutil
import subprocess
import sys
import typing
import uuid
from pathlib import Path

import pytest
import redis as redis_lib
from django.conf import settings

from ticketing import servers

# The production server's default event (EVENT_ID): a request without an eventId
# is for it. Ids of tests' events are unique, and so is this one.
SERVER_EVENT_ID = f"t-default-{uuid.uuid4().hex[:8]}"


def database_url_of_tests() -> str:
    """The test database as a DATABASE_URL, for the processes a test starts."""
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def wait_for_health(base: str, proc: subprocess.Popen | None = None, seconds: float = 60) -> None:
    """Until `base`/health answers (gunicorn accepts before its workers are up); the
    test fails when the server exits first or never answers."""
    try:
        servers.wait_for_http(f"{base}/health", proc, seconds)
    except servers.ServerError as exc:
        pytest.fail(str(exc))


def start_gunicorn(
    env: dict, *, workers: int = 1, stderr: typing.IO | int = subprocess.DEVNULL
) -> tuple[str, subprocess.Popen]:
    """An app server as production runs it (the Procfile's `web`: gunicorn, uvicorn
    workers, ticketing/asgi.py), in its own process group so a test may kill it
    whole or one worker at a time, on the test Redis and the test database; `env`
    last. `stderr` takes the server's log. A server that never becomes healthy is
    killed and the test fails."""
    port = servers.free_port()
    base = f"http://127.0.0.1:{port}"
    try:
        proc = servers.start_gunicorn(
            ["ticketing.asgi:application", "--config", "python:ticketing.gunicorn_conf"]
            + ["--graceful-timeout", "1"],
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
                # A number per join, as every test's own process (conftest.py); a test
                # of the blocks (queue_app/tests/test_arrivals.py) names its block time.
                "QUEUE_BLOCK_MS": "0",
                **env,
            },
            cwd=settings.BASE_DIR,
            health=f"{base}/health",
            stderr=stderr,
        )
    except servers.ServerError as exc:
        pytest.fail(str(exc))
    return base, proc


def stop_gunicorn(proc: subprocess.Popen) -> None:
    """Kill the server and its workers at once: a test's server has nothing to finish."""
    servers.stop_group(proc)


def server_env(**overrides: str) -> dict[str, str]:
    """What an app server needs to serve the tests' own state (start_gunicorn adds
    the test Redis): the test database; this process's keys, so that a session or a
    token made here is good there; and the settings every test runs with
    (`_test_settings` in conftest.py), which the server reads from its environment.
    `overrides` last."""
    return {
        "DATABASE_URL": database_url_of_tests(),
        "SECRET_KEY": settings.SECRET_KEY,
        "QUEUE_TOKEN_KEY": settings.QUEUE_TOKEN_KEY,
        "DRAW_SIGNING_KEY": base64.b64encode(settings.DRAW_SIGNING_KEY).decode(),
        "PAYMENTS_PROVIDER": settings.PAYMENTS_PROVIDER,
        "PAYMENTS_ALLOW_TEST": str(settings.PAYMENTS_ALLOW_TEST).lower(),
        "RATE_LIMIT_JOIN": "0",
        "RATE_LIMIT_LEAVE": "0",
        "RATE_LIMIT_CHALLENGE": "0",
        "RATE_LIMIT_SIGN_IN": "0",
        "RATE_LIMIT_SIGN_IN_ACCOUNT": "0",
        "RATE_LIMIT_SIGN_UP": "0",
        "RATE_LIMIT_NOTIFY": "0",
        "QUEUE_LINE_REFRESH_MS": "0",
        "QUEUE_BLOCK_MS": "0",
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
