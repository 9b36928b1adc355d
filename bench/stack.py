"""The processes of a benchmark run, kept apart from everything else on the machine.

A private redis-server on a free port (never the machine's 6379), the Postgres
database `ticketing_bench` (never `ticketing` or `test_ticketing`), and gunicorn as
production starts it (the Procfile's `web:` command), each with the command line
and the checks of ticketing/servers.py, as the dev stack and the tests. Every process
started here is stopped by `Stack.close()`, by its own id.
"""

import base64
import contextlib
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from ticketing import servers

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BENCH_DB = "ticketing_bench"
PG = {"host": "127.0.0.1", "port": "5432", "user": "postgres"}
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections there."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5):
        return True
    return False


def ensure_database(name: str = BENCH_DB) -> str:
    """Create the bench database when missing; return its DATABASE_URL."""
    if name in {"ticketing", "test_ticketing"}:
        raise SystemExit(f"refusing to benchmark against the shared database {name!r}")
    base = ["psql", "-h", PG["host"], "-p", PG["port"], "-U", PG["user"], "-v", "ON_ERROR_STOP=1", "-tA"]
    found = subprocess.run(
        [*base, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if found != "1":
        subprocess.run([*base, "-c", f'CREATE DATABASE "{name}"'], check=True, capture_output=True)
    return f"postgres://{PG['user']}@{PG['host']}:{PG['port']}/{name}"


def export(ref: str, into: Path) -> tuple[Path, str]:
    """The app's code at a git revision, unpacked into `into`: a run of a committed
    revision is then immune to edits in progress in the working tree. Without its
    `bench/`: the servers run from `into`, where that revision's would shadow this
    harness's (the references of bench/baseline/ must be the same for every revision)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=BASE_DIR,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    into.mkdir(parents=True)
    archive_cmd = ["git", "archive", commit, "--", ".", ":(exclude)bench"]
    archive = subprocess.Popen(archive_cmd, cwd=BASE_DIR, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {ref} failed")
    return into, commit


def revision() -> dict:
    """Which code a working-tree run measured: HEAD, and the files changed since."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=BASE_DIR, capture_output=True, text=True)
        return done.stdout.rstrip()  # not strip(): porcelain's first line starts with its status

    changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line[3:]]
    return {"head": git("rev-parse", "HEAD"), "uncommitted_changes": changed}


def procfile_web(app_dir: Path) -> list[str]:
    """gunicorn's arguments on the `web:` line of the Procfile of the code under test:
    what production runs, and for --ref what that revision ran (WSGI or ASGI)."""
    procfile = app_dir / "Procfile"
    for line in procfile.read_text().splitlines():
        name, _, command = line.partition(":")
        if name.strip() == "web":
            program, *args = shlex.split(command)
            if program != "gunicorn":
                raise SystemExit(f"{procfile}: the web command is not gunicorn: {command.strip()}")
            return args
    raise SystemExit(f"{procfile} has no web: line")


class Stack:
    """Started processes and temporary files, torn down in reverse order.

    `app_dir` is where the app's code is run from: the repository itself, or an
    export of a revision (bench/run.py --ref). The harness is always this one.
    """

    def __init__(self, workdir: Path, app_dir: Path = BASE_DIR) -> None:
        self.workdir = workdir
        self.app_dir = app_dir
        self.code: dict = {}
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.redis_url = ""
        self.env: dict[str, str] = {}

    # --- Redis -------------------------------------------------------------------

    def start_redis(self) -> str:
        """redis-server 7 on a free port, no persistence, data in a temp dir."""
        port = servers.free_port()
        data = self.workdir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("redis-server") or "redis-server"
        command = servers.redis_command(port, data, binary=binary, extra=("--maxmemory", "0"))
        proc = self._spawn("redis", command, env=os.environ.copy())
        try:
            servers.wait_for_redis(port, proc)
        except servers.ServerError:
            raise SystemExit(f"private redis-server did not start; see {self.log('redis')}") from None
        self.redis_url = f"redis://127.0.0.1:{port}/0"
        return self.redis_url

    # --- Environment ---------------------------------------------------------------

    def app_env(self, *, database_url: str, broker_url: str, booking_queue: str) -> dict[str, str]:
        """The environment of every process of the app: production switches, private
        services, no join rate limit (wrk and Locust come from one address)."""
        env = os.environ.copy()
        for name in ("REDIS_HOST", "REDIS_PORT", "REDIS_PASSWORD", "ACCESS_LOG"):
            env.pop(name, None)
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "ticketing.settings",
                "DEBUG": "false",
                "NODE_ENV": "production",
                "SECRET_KEY": env.get("SECRET_KEY") or secrets.token_urlsafe(50),
                "DRAW_SIGNING_KEY": env.get("DRAW_SIGNING_KEY") or base64.b64encode(os.urandom(32)).decode(),
                "REDIS_URL": self.redis_url,
                "DATABASE_URL": database_url,
                "RABBITMQ_URL": broker_url,
                "BOOKING_QUEUE": booking_queue,
                "RATE_LIMIT_JOIN": "0",
                "RATE_LIMIT_BOOKING": "0",  # wrk books from one address
                # The app's code first; `bench` (this harness) from the repository.
                "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(self.app_dir), str(BASE_DIR)])),
            }
        )
        self.env = env
        return env

    def manage(self, *args: str) -> str:
        """`manage.py <args>` with the bench environment; its output."""
        done = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=self.app_dir, env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout.rstrip()  # not strip(): porcelain's first line starts with its status

    # --- gunicorn ----------------------------------------------------------------

    def start_gunicorn(
        self, name: str, args: list[str], env: dict[str, str], health: str
    ) -> subprocess.Popen:
        """gunicorn with `args`; returns once `health` answers 200. The venv's gunicorn
        (`python -m`), which is the `gunicorn` on a deployment's PATH."""
        proc = self._spawn(name, servers.gunicorn_command(*args), env=env)
        try:
            servers.wait_for_http(health, proc, seconds=30)
        except servers.ServerError:
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited at start; see {self.log(name)}") from None
            raise SystemExit(f"{name} did not answer {health}; see {self.log(name)}") from None
        return proc

    @staticmethod
    def children(pid: int) -> list[int]:
        """Pids whose parent is `pid` (gunicorn's workers)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
        return sorted(found)

    # --- Processes -----------------------------------------------------------------

    def log(self, name: str) -> Path:
        """Where a started process writes its output."""
        return self.workdir / f"{name}.log"

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        """Start another process of the stack (Celery's worker and beat for bench/sale.py),
        logged and stopped like the others."""
        return self._spawn(name, argv, env)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        out = self.log(name).open("ab")
        proc = subprocess.Popen(
            argv, cwd=self.app_dir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        self.procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen, grace: float = 10) -> None:
        """SIGTERM (gunicorn stops its workers), then SIGKILL of its own group."""
        servers.stop_group(proc, grace)
        self.procs = [(n, p) for n, p in self.procs if p is not proc]

    def forget(self, events: list[str], broker_url: str | None) -> None:
        """Stop the servers (no request may still be writing), then remove the run's
        rows from the bench database and its queue from the broker (RabbitMQ's, at
        `broker_url`; a private Redis goes with the run)."""
        for name, proc in list(self.procs):
            if name != "redis":
                self.stop(proc)
        with contextlib.suppress(Exception):
            from booking_app.models import Reservation
            from queue_app.models import Event

            Reservation.objects.filter(event_id__in=events).delete()
            Event.objects.filter(event_id__in=events).delete()
        if broker_url is not None:
            with contextlib.suppress(Exception):
                from kombu import Connection

                with Connection(broker_url) as conn:
                    conn.default_channel.queue_delete(self.env["BOOKING_QUEUE"])

    def close(self) -> None:
        """Stop everything still running, last started first."""
        for _, proc in reversed(list(self.procs)):
            self.stop(proc)
