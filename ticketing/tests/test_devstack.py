"""The run and test commands on a machine with nothing configured, and operator
commands from another shell: a real Redis and a real Postgres are started from
their PyPI packages, and every command of the checkout acts on the same ones.

The stack tests run in a copy of the project (its own `var/`), with the
environment cleared as a newcomer's is: no URL of any service."""

import base64
import contextlib
import datetime
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings

from testsupport.http import join, poll, wait_until
from testsupport.servers import database_url_of_tests, wait_for_health
from ticketing.servers import free_port

BASE = Path(settings.BASE_DIR)
CLEARED = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}


def _no_services_env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"REDIS_URL", "REDIS_HOST", "DATABASE_URL", "RABBITMQ_URL", "STACK_OFFLINE"}
    }
    return {**env, **extra}


def test_exec_runs_a_command_on_an_embedded_redis_and_postgres():
    probe = (
        "import os, redis, psycopg; "
        "print(redis.Redis.from_url(os.environ['REDIS_URL']).info()['redis_version'], "
        "psycopg.connect(os.environ['DATABASE_URL']).execute('SHOW server_version').fetchone()[0])"
    )
    out = subprocess.run(
        [sys.executable, "-m", "ticketing.devstack", "exec", "--", sys.executable, "-c", probe],
        cwd=BASE,
        env=_no_services_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    redis_version, postgres_version = out.stdout.strip().splitlines()[-1].split()
    assert redis_version.startswith("6.2.")
    assert postgres_version.startswith("18.")


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
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    clustered, state, *ports = out.stdout.strip().splitlines()[-1].split()
    assert (clustered, state, len(ports)) == ("true", "ok", 3)
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", int(port))) != 0


# --- the stack and the operator's commands ---------------------------------------------


@pytest.fixture
def project() -> Iterator[Path]:
    """A copy of the project's files, with a `var/` of its own. Not under pytest's
    tmp_path: a Postgres started by root runs as `nobody`, who must enter it."""
    root = Path(tempfile.mkdtemp(prefix="project-"))
    root.chmod(0o755)
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=BASE,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = BASE / name.decode()
        if source.is_file():
            (root / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name.decode())
    yield root
    shutil.rmtree(root, ignore_errors=True)


def manage(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """A command from another shell: the project's directory, no service configured."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=project,
        env={**CLEARED, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


class Stack:
    """`python -m ticketing.devstack serve` (what `make run` runs) in the copy."""

    def __init__(self, project: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.output = project / "serve.out"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ticketing.devstack", "serve"],
            cwd=project,
            env={**CLEARED, "PORT": str(self.port), "WEB_CONCURRENCY": "1"},
            stdout=self.output.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.project = project
        wait_for_health(self.base, self.proc, seconds=120)

    def console(self) -> list[str]:
        return self.output.read_text().splitlines()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C
            self.proc.wait(60)


@contextlib.contextmanager
def stack(project: Path) -> Iterator[Stack]:
    running = Stack(project)
    try:
        yield running
    finally:
        running.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running.proc.pid, signal.SIGKILL)


def admin_session(base: str, project: Path) -> requests.Session:
    password = uuid.uuid4().hex
    made = manage(
        project,
        *("createsuperuser", "--noinput", "--username", "op", "--email", "op@example.com"),
        DJANGO_SUPERUSER_PASSWORD=password,
    )
    assert made.returncode == 0, made.stderr
    session = requests.Session()
    session.get(f"{base}/admin/login/", timeout=10)
    signed_in = session.post(
        f"{base}/admin/login/?next=/admin/",
        data={"username": "op", "password": password, "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        timeout=10,
    )
    assert signed_in.url.endswith("/admin/"), signed_in.text[:300]
    return session


def admin_says(session: requests.Session, base: str, event_id: str) -> tuple[str, str]:
    """The event's status in the admin's list (the database) and on its live page (Redis)."""
    page = session.get(f"{base}/admin/queue_app/event/", params={"q": event_id}, timeout=10).text
    row = next(line for line in page.split("<tr") if f">{event_id}<" in line)
    listed = re.search(r'<option value="(OPEN|PAUSED|CLOSED)" selected>', row)
    listed = listed.group(1) if listed else re.search(r"\b(Open|Paused|Closed)\b", row).group(1).upper()
    pk = re.search(r"/admin/queue_app/event/(\d+)/live/", row).group(1)
    live = session.get(f"{base}/admin/queue_app/event/{pk}/live.json", timeout=10).json()
    return listed, live["numbers"]["status"]


def test_commands_from_another_shell_act_on_the_running_stack(project):
    """The issue a newcomer met: with `make run` up, `init_event` in a second shell
    made its sale in another Redis, and `event_status PAUSED` paused nothing."""
    with stack(project) as running:
        made = manage(project, "init_event", "second-sale", "--seats", "50")
        assert made.returncode == 0, made.stderr
        assert made.stdout.startswith("Created event second-sale")
        first = join(running.base, "second-sale")  # the service knows it at once
        wait_until(
            "the first person is admitted",
            lambda: poll(running.base, first, "second-sale")["status"] == "ACTIVE",
        )

        paused = manage(project, "event_status", "second-sale", "PAUSED")
        assert paused.returncode == 0 and "PAUSED" in paused.stdout, paused.stderr
        second = join(running.base, "second-sale")
        # A tick by hand counts the stack's line; the beat usually ran this second's.
        by_hand = manage(project, "admit", "second-sale")
        assert by_hand.returncode == 0, by_hand.stderr
        assert re.fullmatch(
            r"Admitted 0 \((the event is not OPEN|this second's tick already ran; try again in a second)\); "
            r"1 waiting, 1 active\.\n",
            by_hand.stdout,
        ), by_hand.stdout
        session = admin_session(running.base, project)
        assert admin_says(session, running.base, "second-sale") == ("PAUSED", "PAUSED")
        ticks = _ticks(project)
        wait_until("three more ticks of the beat", lambda: _ticks(project) >= ticks + 3)
        assert poll(running.base, second, "second-sale")["status"] == "WAITING"  # the pause holds

        assert manage(project, "event_status", "second-sale", "OPEN").returncode == 0
        wait_until(
            "admitted once open", lambda: poll(running.base, second, "second-sale")["status"] == "ACTIVE"
        )
        assert admin_says(session, running.base, "second-sale") == ("OPEN", "OPEN")

        # A scheduled start, drawn by the stack's worker, checked from the other shell
        # against the line the service serves (nobody admitted: --batch 0).
        opens = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=6)).isoformat()
        made = manage(project, "init_event", "drawn-sale", "--opens-at", opens, "--batch", "0")
        assert made.returncode == 0, made.stderr
        tokens = [join(running.base, "drawn-sale") for _ in range(3)]
        assert {poll(running.base, t, "drawn-sale")["status"] for t in tokens} == {"PRE_QUEUE"}
        wait_until(
            "the draw", lambda: {poll(running.base, t, "drawn-sale")["status"] for t in tokens} == {"WAITING"}
        )
        verified = manage(project, "verify_draw", "drawn-sale")
        assert verified.returncode == 0, verified.stderr
        assert "CONFIRMED: 3 places" in verified.stdout and "3 places still in the line" in verified.stdout
        # Its receipts are signed with the key the stack made once in var/, which the draw publishes.
        key = project / "var" / "draw_signing_key"
        assert key.stat().st_mode & 0o777 == 0o600
        public = Ed25519PrivateKey.from_private_bytes(base64.b64decode(key.read_text())).public_key()
        sale = {"eventId": "drawn-sale"}
        mine = {**sale, "token": tokens[0]}
        signed = requests.get(f"{running.base}/api/queue/draw/signed-receipt", params=mine, timeout=10).json()
        shown = requests.get(f"{running.base}/api/queue/draw", params=sale, timeout=10).json()
        assert signed["data"]["publicKey"] == shown["data"]["publicKey"] == public.public_bytes_raw().hex()

        console = running.console()
    # The terminal: one line per start-up step and the address; the tick's and the
    # tasks' lines went to the log file, and each line has one clock (honcho's).
    assert any(line == f"serving on {running.base}  (Ctrl-C stops everything)" for line in console)
    assert not [line for line in console if " INFO " in line or re.search(r"\d{4}-\d\d-\d\d \d\d:", line)]
    log = (project / "var" / "log" / "stack.log").read_text()
    assert "admission tick" in log and "drawn-sale" in log
    assert not (project / "var" / "stack.json").exists()  # stopped, and unpublished


def _admit(project: Path, event_id: str) -> str | None:
    """`manage.py admit`'s answer, None when the beat had already ticked that second."""
    out = manage(project, "admit", event_id)
    assert out.returncode == 0, out.stderr
    return None if "already ran" in out.stdout else out.stdout


def _ticks(project: Path) -> int:
    log = project / "var" / "log" / "stack.log"
    return log.read_text().count("admission tick event=second-sale") if log.exists() else 0


def test_commands_with_no_stack_running_start_one_on_the_same_data(project):
    """`init_event` before `make run`: the command starts Redis and Postgres on the
    project's data for as long as it runs; the stack started later serves what it made."""
    made = manage(project, "init_event", "early-sale", "--seats", "5")
    assert made.returncode == 0, made.stderr
    assert "no stack is running" in made.stderr
    assert manage(project, "event_status", "early-sale", "PAUSED").returncode == 0
    assert "Admitted 0 (the event is not OPEN)" in wait_until("a tick", lambda: _admit(project, "early-sale"))
    assert not (project / "var" / "stack.json").exists()
    assert not [p for p in _processes() if str(project) in p]  # nothing left running
    with stack(project) as running:
        token = join(running.base, "early-sale")
        assert poll(running.base, token, "early-sale")["status"] == "WAITING"
        session = admin_session(running.base, project)
        assert admin_says(session, running.base, "early-sale") == ("PAUSED", "PAUSED")


def _processes() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            found.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return found


def test_a_second_stack_in_the_same_checkout_is_refused(project):
    with stack(project) as running:
        second = subprocess.run(
            [sys.executable, "-m", "ticketing.devstack", "serve"],
            cwd=project,
            env={**CLEARED, "PORT": str(free_port())},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr.strip() == (
            f"error: the stack already runs (pid {running.proc.pid}, {running.base}): "
            "stop it first (Ctrl-C in its shell)"
        )


@pytest.mark.parametrize(
    ("variable", "command", "shown"),
    [
        ("REDIS_URL", ("admit", "some-sale"), "cannot reach Redis at redis://127.0.0.1:{port}/0"),
        (
            "DATABASE_URL",
            ("event_status", "some-sale", "PAUSED"),
            "cannot reach Postgres at postgres://postgres@127.0.0.1:{port}/nowhere",
        ),
    ],
    ids=["redis", "postgres"],
)
def test_a_command_that_cannot_reach_a_service_says_where_in_one_line(project, variable, command, shown):
    port = free_port()
    env = {
        "REDIS_URL": settings.REDIS_URL,
        "DATABASE_URL": database_url_of_tests(),
        "DRAW_SIGNING_KEY": os.environ["DRAW_SIGNING_KEY"],  # as production's environment has one
    }
    env[variable] = {
        "REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/nowhere",
    }[variable]
    out = manage(project, *command, **env)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + shown.format(port=port)), out.stderr
    assert variable in lines[0]
    traced = manage(project, *command, "--traceback", **env)
    assert "Traceback" in traced.stderr  # asked for


def test_the_settings_never_guess_an_address(project):
    """With no URL and no stack, a process that needs the services (here the
    settings of a server started by hand) stops, saying what to do."""
    out = subprocess.run(
        [sys.executable, "-c", "import ticketing.settings"],
        cwd=project,
        env=CLEARED,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "REDIS_URL is unset and no stack is running" in out.stderr
    assert "make run" in out.stderr
