"""The local stack behind `make run` and `make test`, and the one operator commands reach.

`serve` (`make run`) starts a real Redis and a real Postgres (ticketing/servers.py)
for whichever of REDIS_URL and DATABASE_URL is unset, their data in `var/redis` and
`var/pg`, migrates, creates the default event and runs the Procfile's processes
together (web, worker, beat). While it runs it publishes the addresses it serves
from in `var/stack.json`, and holds `var/stack.lock` for as long as it lives: the
settings of any process started in this checkout with no URL of its own, a
`manage.py` command in another shell among them, read them there, so that command
acts on what is running.

With no stack running, a `manage.py` command that needs Redis or Postgres starts
them itself on the same data, for as long as it runs (so `init_event` before `make
run` works); one that needs neither (makemigrations, collectstatic, ...) starts
nothing. A stack is owned by one process at a time: the lock says which, and a
second owner waits for the first.

`exec -- CMD` runs one command (the test suite) on servers of its own, thrown
away afterwards: never the published stack. `exec --cluster -- CMD` uses a local
Redis Cluster of three primaries instead of one Redis, with a Redis of its own as
Celery's broker and, on the environment's Postgres, a database of its own, so that
it can run beside an `exec` of the same command (testsupport/suites.py).
"""

import argparse
import base64
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ticketing import servers

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
STACK_FILE = VAR_DIR / "stack.json"
LOCK_FILE = VAR_DIR / "stack.lock"
LOG_FILE = VAR_DIR / "log" / "stack.log"
DRAW_KEY_FILE = VAR_DIR / "draw_signing_key"

# manage.py commands that touch neither Redis nor Postgres: they start nothing.
OFFLINE_COMMANDS = frozenset(
    {
        "check",
        "collectstatic",
        "compilemessages",
        "diffsettings",
        "help",
        "makemessages",
        "makemigrations",
        "spectacular",
        "version",
        "--help",
        "-h",
        "--version",
    }
)


def say(line: str) -> None:
    """One line of the stack's progress, for the person who started it."""
    print(line, flush=True)


def read_dotenv() -> None:
    """The same .env the settings read, so that a URL there counts as set here too."""
    if (BASE_DIR / ".env").is_file():
        import environ

        environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def configured() -> dict[str, bool]:
    """Which services the environment names itself (the rest come from a stack)."""
    env = os.environ
    return {
        "redis": bool(env.get("REDIS_URL") or env.get("REDIS_HOST")),
        "database": bool(env.get("DATABASE_URL")),
    }


def draw_signing_key() -> str:
    """This checkout's key for the draw's receipts (DRAW_SIGNING_KEY, in base64), made
    on first use and kept in var/ with the stack's data: production needs one set,
    and the stack runs as production does; a receipt signed yesterday still checks."""
    if not DRAW_KEY_FILE.exists():
        VAR_DIR.mkdir(exist_ok=True)
        partial = DRAW_KEY_FILE.with_name(f".draw_signing_key.{os.getpid()}")
        partial.write_text(base64.b64encode(os.urandom(32)).decode())
        partial.chmod(0o600)
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs
            os.link(partial, DRAW_KEY_FILE)
        partial.unlink()
    return DRAW_KEY_FILE.read_text().strip()


# --- the published stack -----------------------------------------------------------


def _lock_fd() -> int:
    VAR_DIR.mkdir(exist_ok=True)
    return os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)


def _holder() -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(STACK_FILE.read_text())
    return None


def live() -> dict | None:
    """The stack running in this checkout, as it published itself: its `redis_url`,
    `database_url`, `pid`, `kind` (serve or command) and `web` address. None when
    no process holds the stack's lock: a file left by a stack that was killed is
    not believed."""
    if not STACK_FILE.exists():
        return None
    fd = _lock_fd()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder()  # held: its owner lives
        return None
    finally:
        os.close(fd)  # and with it our shared lock, had we got one


def _publish(stack: dict) -> None:
    partial = STACK_FILE.with_suffix(".tmp")
    partial.write_text(json.dumps(stack, indent=1))
    partial.replace(STACK_FILE)


def _take_lock(what: str) -> tuple[int, bool]:
    """The stack's lock, taken for good: (its fd, whether a serving stack holds it
    instead, in which case it was not taken). A command owning a stack is waited for."""
    fd = _lock_fd()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, False
        except BlockingIOError:
            holder = live()
            if holder and holder.get("kind") == "serve":
                os.close(fd)
                return -1, True
            if not told:
                who = holder.get("command", "a starting stack") if holder else "a starting stack"
                say(f"{what}: waiting for {who} (pid {holder['pid'] if holder else '?'}) to finish")
                told = True
            time.sleep(0.1)


@contextlib.contextmanager
def own(kind: str, command: str) -> Iterator[dict]:
    """Start the services the environment does not name, on this checkout's data,
    and publish them while the block runs; stop them afterwards. Yields the stack
    (a serving stack already running is an error for `serve`, a stack to use for a
    command). The environment gets REDIS_URL and DATABASE_URL, for child processes."""
    fd, serving = _take_lock(command)
    if serving:
        holder = live() or {}
        if kind == "serve":
            raise servers.ServerError(
                f"the stack already runs (pid {holder.get('pid')}, {holder.get('web')}): "
                "stop it first (Ctrl-C in its shell)"
            )
        _export(holder)
        yield holder
        return
    redis_proc = postgres = None
    try:
        want = configured()
        stack: dict = {"pid": os.getpid(), "kind": kind, "command": command}
        if not want["redis"]:
            data = VAR_DIR / "redis"
            data.mkdir(parents=True, exist_ok=True)
            _stop_stale_redis(data)
            redis_proc, port = servers.start_redis(data, persistent=True)
            stack["redis_url"], stack["redis_pid"] = f"redis://127.0.0.1:{port}/0", redis_proc.pid
            if kind == "serve":
                say(f"Redis 6.2 on 127.0.0.1:{port} (data in var/redis)")
        if not want["database"]:
            postgres = servers.start_postgres(VAR_DIR / "pg")
            stack["database_url"] = postgres.url
            if kind == "serve":
                say(f"Postgres {servers.postgres_version()} on 127.0.0.1:{postgres.port} (data in var/pg)")
        if kind == "command" and (redis_proc or postgres):
            print(
                f"({command}: no stack is running, so Redis and Postgres run on var/ for this command alone)",
                file=sys.stderr,
                flush=True,
            )
        _export(stack)
        stack["redis_url"] = stack.get("redis_url") or _effective_redis_url()
        stack["database_url"] = os.environ["DATABASE_URL"]
        _publish(stack)
        yield stack
    finally:
        with contextlib.suppress(FileNotFoundError):
            STACK_FILE.unlink()
        if postgres is not None:
            postgres.stop()
        if redis_proc is not None:
            servers.stop_redis(redis_proc)
        os.close(fd)


def _effective_redis_url() -> str:
    """REDIS_URL as the settings build it from the seed's REDIS_HOST / REDIS_PORT."""
    from urllib.parse import quote

    env = os.environ
    if env.get("REDIS_URL"):
        return env["REDIS_URL"]
    password = env.get("REDIS_PASSWORD", "")
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}{env['REDIS_HOST']}:{env.get('REDIS_PORT') or 6379}/0"


def _export(stack: dict) -> None:
    """The stack's addresses and key, for this process's settings and its children."""
    if stack.get("redis_url") and not configured()["redis"]:
        os.environ["REDIS_URL"] = stack["redis_url"]
    if stack.get("database_url") and not configured()["database"]:
        os.environ["DATABASE_URL"] = stack["database_url"]
    if not os.environ.get("DRAW_SIGNING_KEY"):
        os.environ["DRAW_SIGNING_KEY"] = draw_signing_key()
    _test_payments()


def _test_payments() -> None:
    """Priced sales on a developer's machine pay through the built-in test provider
    (no money moves), unless the environment names another."""
    if "PAYMENTS_PROVIDER" not in os.environ:
        os.environ["PAYMENTS_PROVIDER"] = "test"
        os.environ.setdefault("PAYMENTS_ALLOW_TEST", "true")


def _stop_stale_redis(data: Path) -> None:
    """A Redis left running on this data by a stack that was killed: two servers
    must not write one append-only file."""
    stale = _holder() or {}
    pid = stale.get("redis_pid")
    if not pid:
        return
    with contextlib.suppress(OSError):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"redis-server" in cmdline:
            os.kill(pid, 15)
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.05)


@contextlib.contextmanager
def for_command(command: str) -> Iterator[bool]:
    """What a `manage.py <command>` acts on: the services its environment names,
    else the running stack, else a stack of its own for as long as it runs (none
    at all for a command that touches neither Redis nor Postgres). Yields whether
    it started servers of its own (whose database may need its migrations)."""
    read_dotenv()
    offline = command in OFFLINE_COMMANDS
    if offline:  # it reaches no server, so it needs none of a server's keys either
        os.environ["STACK_OFFLINE"] = "true"
    if all(configured().values()):
        yield False
        return
    stack = live()
    if stack and stack.get("kind") == "serve":
        _export(stack)
        yield False
        return
    if offline:
        yield False
        return
    with own("command", f"manage.py {command}") as stack:
        yield stack.get("kind") == "command"


# --- make run ------------------------------------------------------------------------


def _manage(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(BASE_DIR / "manage.py"), *args],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.stderr.write(out.stderr or out.stdout)
        raise SystemExit(out.returncode)
    return out.stdout.strip()


def _serve_env(verbose: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PORT", "8000")
    # The links of the mail sent outside a request (a hold confirmed by the sweep).
    env.setdefault("SITE_URL", f"http://{env.get('HOST', '127.0.0.1')}:{env['PORT']}")
    env["PYTHONUNBUFFERED"] = "1"
    # The terminal gets warnings and errors; everything (the per-second tick, each
    # task) goes to the log file. -v or LOG_LEVEL=INFO shows it all on the terminal.
    env.setdefault("LOG_FILE", str(LOG_FILE))
    if verbose:
        env["LOG_CONSOLE_LEVEL"] = "INFO"
    env.setdefault("LOG_CONSOLE_LEVEL", env.get("LOG_LEVEL") or "WARNING")
    # gunicorn's and uvicorn's own lines (workers booting) follow the terminal's level.
    env.setdefault("GUNICORN_CMD_ARGS", f"--log-level {env['LOG_CONSOLE_LEVEL'].lower()}")
    # honcho stamps each line with the time: the processes then print none of their own.
    env["LOG_CONSOLE_TIME"] = "false"
    return env


def serve(*, verbose: bool = False) -> int:
    from honcho.environ import parse_procfile
    from honcho.manager import Manager

    # One clock: honcho's stamps in the zone the app logs in (settings.TIME_ZONE).
    os.environ.setdefault("TIME_ZONE", "Asia/Seoul")
    os.environ["TZ"] = os.environ["TIME_ZONE"]
    time.tzset()
    with own("serve", "make run") as stack:
        _manage("migrate", "--noinput", "-v", "0")
        say("database migrated")
        _manage("collectstatic", "--noinput", "-v", "0")
        say("static files collected")
        say(_manage("init_event", os.environ.get("EVENT_ID", "ktx-2026-chuseok"), "--if-missing"))
        env = _serve_env(verbose)
        LOG_FILE.parent.mkdir(parents=True, exist_ok=True)
        stack["web"] = f"http://{env.get('HOST', '127.0.0.1')}:{env['PORT']}"
        _publish(stack)
        say(f"web, worker and beat starting; their full log is {LOG_FILE.relative_to(BASE_DIR)}")
        say(f"serving on {stack['web']}  (Ctrl-C stops everything)")
        manager = Manager()
        procfile = parse_procfile((BASE_DIR / "Procfile").read_text())
        for name, cmd in procfile.processes.items():
            manager.add_process(name, cmd, env=env, cwd=str(BASE_DIR))
        manager.loop()
        return manager.returncode or 0


# --- make test -----------------------------------------------------------------------


@contextlib.contextmanager
def _own_redis() -> Iterator[None]:
    if configured()["redis"]:
        yield
        return
    with servers.temporary_redis() as url:
        os.environ["REDIS_URL"] = url
        yield


@contextlib.contextmanager
def _own_broker() -> Iterator[None]:
    """Celery's broker for a cluster run: a plain Redis of its own (a Redis Cluster
    cannot be one), whatever RABBITMQ_URL names, so that a one-Redis run beside it
    on the same RabbitMQ never has its tasks taken by this run's workers."""
    with servers.temporary_redis() as url:
        os.environ["RABBITMQ_URL"] = url
        yield


def _database_of_its_own() -> None:
    """The environment's Postgres, another database: a one-Redis run beside the
    cluster run has its test database on the same server."""
    url = urlsplit(os.environ["DATABASE_URL"])
    os.environ["DATABASE_URL"] = urlunsplit(url._replace(path=url.path.rstrip("/") + "_cluster"))


@contextlib.contextmanager
def _own_postgres() -> Iterator[None]:
    if configured()["database"]:
        yield
        return
    with servers.temporary_postgres() as postgres:
        os.environ["DATABASE_URL"] = postgres.url
        yield


def execute(cmd: list[str], *, cluster: bool = False) -> int:
    """Run `cmd` on servers of its own: the environment's URLs where set, else a
    throw-away Redis (or Redis Cluster) and Postgres, never the running stack; and
    a throw-away draw signing key unless the environment names one."""
    os.environ.pop("STACK_OFFLINE", None)
    if not os.environ.get("DRAW_SIGNING_KEY"):
        os.environ["DRAW_SIGNING_KEY"] = base64.b64encode(os.urandom(32)).decode()
    _test_payments()
    if cluster and configured()["database"]:
        _database_of_its_own()
    with _own_postgres():
        if not cluster:
            with _own_redis():
                return subprocess.call(cmd, cwd=BASE_DIR)
        with servers.redis_cluster() as ports, _own_broker():
            # The cluster replaces whatever Redis the environment names.
            env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{ports[0]}/0", "REDIS_CLUSTER": "true"}
            env.pop("REDIS_HOST", None)
            say(f"local Redis Cluster on ports {', '.join(map(str, ports))}")
            return subprocess.call(cmd, cwd=BASE_DIR, env=env)


def main() -> None:
    read_dotenv()
    parser = argparse.ArgumentParser(prog="python -m ticketing.devstack")
    sub = parser.add_subparsers(dest="what", required=True)
    sv = sub.add_parser("serve", help="web, worker and beat together, on the embedded Redis and Postgres")
    sv.add_argument("-v", "--verbose", action="store_true", help="every log line on the terminal")
    ex = sub.add_parser("exec", help="run a command on throw-away servers of its own")
    ex.add_argument("--cluster", action="store_true", help="a local Redis Cluster of three primaries instead")
    ex.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    try:
        if args.what == "serve":
            sys.exit(serve(verbose=args.verbose))
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        sys.exit(execute(cmd, cluster=args.cluster))
    except servers.ServerError as exc:
        sys.exit(f"error: {exc}")
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
