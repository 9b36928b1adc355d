"""requirements.txt is complete on its own: a fresh virtualenv with nothing else
installed runs web, worker and beat, and the beat's admission tick reaches the
worker on either broker (RabbitMQ, and Redis when RABBITMQ_URL is unset)."""

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings

from testsupport import require
from testsupport.servers import database_url_of_tests, wait_for_health
from ticketing.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A virtualenv with requirements.txt alone (pip's cache makes it quick)."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", "requirements.txt"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    return venv


def _start(venv: Path, args: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.parametrize("broker", [pytest.param("rabbitmq", marks=pytest.mark.rabbitmq), "redis"])
def test_web_worker_and_beat_run_from_requirements_alone(fresh_venv, make_event, tmp_path, broker):
    if broker == "rabbitmq":
        require(bool(os.environ.get("RABBITMQ_URL")), "RABBITMQ_URL is not set")
    event = make_event(admit_per_second=5)
    port = free_port()
    env = {
        "PATH": f"{fresh_venv / 'bin'}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "DATABASE_URL": database_url_of_tests(),
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": "requirements-test",
        "DRAW_SIGNING_KEY": base64.b64encode(bytes(range(32))).decode(),
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
        "RATE_LIMIT_JOIN": "0",
        "BOOKING_QUEUE": f"booking.requirements.{broker}",
    }
    if broker == "rabbitmq":
        env["RABBITMQ_URL"] = os.environ["RABBITMQ_URL"]
    procs = [
        _start(
            fresh_venv,
            ["gunicorn", "ticketing.asgi:application", "--config", "python:ticketing.gunicorn_conf"],
            env,
            tmp_path / "web.log",
        ),
        _start(
            fresh_venv,
            [
                "celery",
                "-A",
                "ticketing",
                "worker",
                "--loglevel=INFO",
                "--concurrency=1",
                "--without-gossip",
                "--without-mingle",
            ],
            env,
            tmp_path / "worker.log",
        ),
        _start(
            fresh_venv,
            [
                "celery",
                "-A",
                "ticketing",
                "beat",
                "--loglevel=INFO",
                f"--schedule={tmp_path / 'beat-schedule'}",
            ],
            env,
            tmp_path / "beat.log",
        ),
    ]
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_health(base, procs[0])
        token = requests.post(f"{base}/api/queue/join", json={"eventId": event.event_id}, timeout=5).json()
        token = token["data"]["token"]
        deadline, status = time.monotonic() + 45, None
        while time.monotonic() < deadline:
            poll = requests.get(
                f"{base}/api/status/poll", params={"token": token, "eventId": event.event_id}, timeout=5
            )
            status = poll.json()["data"]["status"]
            if status == "ACTIVE":
                break
            for proc, name in zip(procs, ("web", "worker", "beat"), strict=True):
                assert proc.poll() is None, (
                    f"{name} exited:\n" + (tmp_path / f"{name}.log").read_text()[-3000:]
                )
            time.sleep(0.5)
        logs = "\n".join((tmp_path / f"{n}.log").read_text()[-1500:] for n in ("worker", "beat"))
        assert status == "ACTIVE", f"beat's tick never reached the worker on {broker}:\n{logs}"
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
