"""The servers a benchmark run measures and the stack under them: the private
services (bench/stack.py), Django in this process, the two references and the app
under gunicorn, and the 1/s tick of `--serve`."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.report import say
from bench.stack import (
    BASE_DIR,
    PYTHON,
    RABBITMQ_URL,
    Stack,
    ensure_database,
    export,
    port_open,
    procfile_web,
    revision,
)
from ticketing import servers


class Servers:
    """The servers a run measures, each a gunicorn of the stack's: the baseline, a
    bare Django view doing one Redis GET under one sync worker; the ceiling, the
    poll in a raw ASGI app under one uvicorn worker; and the app."""

    def __init__(self, stack: Stack, broker: str) -> None:
        self.stack = stack
        self.broker = broker
        self.app_url = ""
        self.baseline_url = ""
        self.ceiling_url = ""
        self.app_proc: subprocess.Popen | None = None
        # The app as the Procfile starts it; its wall profile needs to know which kind.
        self.app_args = procfile_web(stack.app_dir)
        self.app_is_wsgi = ".wsgi:" in self.app_args[0]

    def start(self) -> dict:
        """The two references (one worker each) and the app (the Procfile's command);
        what each one is, for the results."""
        from ticketing import store

        described: dict = {}

        store.client().set("bench:baseline", "x" * 32)
        port = servers.free_port()
        env = {**self.stack.env, "DJANGO_SETTINGS_MODULE": "bench.baseline.settings"}
        self.baseline_url = f"http://127.0.0.1:{port}"
        args = ["bench.baseline.wsgi:application", "--workers", "1", "--worker-class", "sync"]
        baseline = self.stack.start_gunicorn(
            "baseline", [*args, "--bind", f"127.0.0.1:{port}"], env, f"{self.baseline_url}/baseline"
        )
        described["baseline_server"] = {
            "command": " ".join(["gunicorn", *args]),
            "workers": len(Stack.children(baseline.pid)),
            "worker_class": "sync",
        }

        port = servers.free_port()
        # The script of the code under test, so that both polls run the same Lua.
        env = {**self.stack.env, "POLL_SCRIPT": str(self.stack.app_dir / "lua" / "poll.lua")}
        self.ceiling_url = f"http://127.0.0.1:{port}"
        args = ["bench.baseline.ceiling:app", "--workers", "1", "-k", "bench.baseline.ceiling.Worker"]
        args += ["--keep-alive", "5"]  # as ticketing/gunicorn_conf.py
        ceiling = self.stack.start_gunicorn(
            "ceiling", [*args, "--bind", f"127.0.0.1:{port}"], env, f"{self.ceiling_url}/health"
        )
        batched = env.get("RAW_BATCH", "1") != "0"  # as bench/baseline/ceiling.py reads it
        described["ceiling_server"] = {
            "command": " ".join(["gunicorn", *args]),
            "workers": len(Stack.children(ceiling.pid)),
            "worker_class": "uvicorn (uvloop, httptools), redis.asyncio with hiredis, orjson",
            "redis_calls": (
                "the EVALSHAs of one event-loop turn in one pipeline, as the app's fast lane"
                if batched
                else "one `await client.evalsha()` per request (RAW_BATCH=0)"
            ),
        }

        port = servers.free_port()
        env = {**self.stack.env, "HOST": "127.0.0.1", "PORT": str(port)}
        self.app_url = f"http://127.0.0.1:{port}"
        self.app_proc = self.stack.start_gunicorn("app", self.app_args, env, f"{self.app_url}/health")
        described["app_server"] = {
            "command": " ".join(["gunicorn", *self.app_args]),
            **gunicorn_conf(env, self.stack.app_dir),
            "env": {k: env[k] for k in ("WEB_CONCURRENCY",) if k in env},
            "rate_limit_join": env["RATE_LIMIT_JOIN"],
            "broker": self.broker,
        }
        say(
            f"baseline on {self.baseline_url}, ceiling on {self.ceiling_url}, "
            f"app on {self.app_url}: {described['app_server']}"
        )
        return described

    def check_ceiling(self, tokens_file: Path, event_id: str) -> None:
        """The ceiling must do the app's poll, or the ratio to it means nothing: both
        answer the same for a token (but nextPollMs, which is jittered)."""
        token = tokens_file.read_text().split()[0]
        query = f"/api/status/poll?token={token}&eventId={event_id}"
        answers = []
        for url in (self.app_url, self.ceiling_url):
            with urllib.request.urlopen(url + query, timeout=5) as answer:
                body = json.loads(answer.read())
            body["data"].pop("nextPollMs")
            answers.append(body)
        if answers[0] != answers[1]:
            raise SystemExit(
                f"the ceiling's poll is not the app's:\n  app     {answers[0]}\n  ceiling {answers[1]}"
            )

    def pid(self, name: str) -> int:
        """The pid of a started process (gunicorn's master for a server)."""
        return next(p.pid for n, p in self.stack.procs if n == name)


def setup_django(stack: Stack) -> None:
    """Django in this process (filling lines, admitting, reading Redis), with the code
    and the environment of the server under test."""
    os.environ.update(stack.env)
    sys.path.insert(0, str(stack.app_dir))
    if stack.app_dir != BASE_DIR:
        # The harness imported the working tree's `ticketing` (its servers module
        # starts the processes): the code under test, Django's, is the export's.
        for name in [name for name in sys.modules if name.split(".")[0] == "ticketing"]:
            del sys.modules[name]
    # Celery (imported with the app) puts the current directory first on sys.path.
    os.chdir(stack.app_dir)
    import django

    django.setup()


def gunicorn_conf(env: dict[str, str], app_dir: Path) -> dict:
    """The settings ticketing/gunicorn_conf.py gives in this environment."""
    # `threads`: gthread's, for a --ref of a WSGI revision; the uvicorn worker's options.
    code = (
        "import json, ticketing.gunicorn_conf as c; print(json.dumps({k: getattr(c, k) "
        "for k in ('bind', 'workers', 'worker_class', 'threads', 'keepalive', 'accesslog') if hasattr(c, k)}"
        " | {'worker_options': getattr(getattr(c, 'Worker', None), 'CONFIG_KWARGS', None)},"
        " default=lambda o: f'{o.__module__}.{o.__qualname__}'))"  # (a class: the protocol)
    )
    done = subprocess.run([PYTHON, "-c", code], cwd=app_dir, env=env, capture_output=True, text=True)
    return json.loads(done.stdout)


def observed_workers(master: int) -> dict:
    """What is actually running: worker processes and each one's OS threads."""
    workers = Stack.children(master)
    threads = [len(list(Path(f"/proc/{w}/task").iterdir())) for w in workers]
    return {"observed_workers": len(workers), "observed_os_threads_per_worker": threads}


@contextlib.contextmanager
def running_stack(keep: bool, ref: str | None) -> Iterator[Stack]:
    """The private services; torn down (and the temp dir removed) however the run ends.

    With `ref`, the app runs from an export of that revision instead of the
    working tree (which someone may be editing while the run goes on).
    """
    workdir = Path(tempfile.mkdtemp(prefix="ticketing-bench-"))
    if ref:
        app_dir, commit = export(ref, workdir / "app")
        stack = Stack(workdir, app_dir)
        stack.code = {"ref": ref, "commit": commit}
    else:
        stack = Stack(workdir)
        stack.code = {"working_tree": str(BASE_DIR), **revision()}

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # Also when started in the background, where SIGINT would be ignored.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed = True
    try:
        yield stack
        failed = False
    finally:
        stack.close()
        if failed or keep:
            say(f"logs and token files kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def prepare(stack: Stack, broker: str) -> None:
    """Private Redis, the bench database (migrated), the environment."""
    run_queue = f"bench.booking.completed.{uuid.uuid4().hex[:8]}"
    redis_url = stack.start_redis()
    database_url = ensure_database()
    # The Redis broker, when chosen, is db 1 of the private Redis.
    broker_url = RABBITMQ_URL if broker == "rabbitmq" else redis_url.rsplit("/", 1)[0] + "/1"
    stack.app_env(database_url=database_url, broker_url=broker_url, booking_queue=run_queue)
    say(f"private Redis {redis_url}, database {database_url}, broker {broker} (queue {run_queue})")
    stack.manage("migrate", "--noinput")


def pick_broker(choice: str) -> str:
    """RabbitMQ as in production when it is there, else the private Redis."""
    if choice == "auto":
        return "rabbitmq" if port_open("127.0.0.1", 5672) else "redis"
    return choice


def tick_forever(admit: Callable[[], list], proc: subprocess.Popen) -> None:
    """What Celery beat's admit_tick does, once a second, in this process."""
    try:
        while proc.poll() is None:
            for tick in admit():
                if tick.admitted:
                    say(f"admitted {tick.admitted} ({tick.waiting} waiting, {tick.active} active)")
            time.sleep(1 - time.time() % 1 + 0.01)
    except KeyboardInterrupt:
        pass
