"""`make test` and `make test-cluster`: the suite on one Redis, and the Redis tests
again on a local Redis Cluster.

`make test` runs the two side by side. Each is one pytest process that keeps one core
busy while the servers it starts mostly wait, so on a machine of two cores the pair
takes little longer than the one-Redis run alone, not the sum of both. They share
nothing: the cluster run has its own Redis servers, its own Redis as Celery's broker
(a worker of one run never takes the other's tasks, and the tests that need RabbitMQ
itself run in the one-Redis run) and, on a Postgres the environment names, a database
of its own (`ticketing.devstack exec --cluster`). Its output, kept in
var/log/test-cluster.log while it runs, follows the one-Redis run's.

    python -m testsupport.suites [PYTEST_ARGS...]            # both (make test)
    python -m testsupport.suites --cluster [PYTEST_ARGS...]  # the cluster run alone
"""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
CLUSTER_LOG = BASE_DIR / "var" / "log" / "test-cluster.log"

# The queue's, booking's and the scripts' tests: what a Redis Cluster can change.
CLUSTER_PATHS = [
    "queue_app",
    "booking_app",
    "ticketing/tests/test_lua.py",
    "ticketing/tests/test_lua_writes.py",
    "ticketing/tests/test_batcher.py",
    "ticketing/tests/test_server.py",
    "ticketing/tests/test_metrics.py",
]
# Tests that restart, proxy or flush one redis-server of their own, the slow ones, and
# those about RabbitMQ itself (the cluster run's broker is a Redis of its own).
CLUSTER_MARKERS = "not single_redis and not slow and not rabbitmq"


def _pytest(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *args]


def one_redis(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "ticketing.devstack", "exec", "--", *_pytest(*args)]


def cluster(args: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "ticketing.devstack", "exec", "--cluster", "--",
        *_pytest("-m", CLUSTER_MARKERS, *CLUSTER_PATHS, *args),
    ]  # fmt: skip


def _stop(*runs: subprocess.Popen) -> None:
    """Interrupt the runs and what they started, as Ctrl-C does, and wait for them to
    finish: each test's teardown stops its servers and workers (a Celery worker's warm
    shutdown may take its 30 s), then the run's own servers stop. Interrupted again,
    they are killed there and then."""
    live = [run for run in runs if run.poll() is None]
    for run in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGINT)
    try:
        for run in live:
            run.wait()
    except (KeyboardInterrupt, SystemExit):
        for run in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
        raise


def _run(command: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=BASE_DIR, start_new_session=True, **kwargs)


def side_by_side(args: list[str]) -> int:
    # Both runs' servers serve the collected static files: collect them once, first,
    # rather than in both runs at once into the same directory.
    collect = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"]
    subprocess.run(collect, cwd=BASE_DIR, check=True)
    CLUSTER_LOG.parent.mkdir(parents=True, exist_ok=True)
    # Ctrl-C or a stop from outside (CI's time limit) stops both runs, and their servers:
    # the handler is in place before either starts, as neither hears the terminal's signals.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with CLUSTER_LOG.open("w") as log:
        beside = _run(cluster(args), stdout=log, stderr=subprocess.STDOUT)
    first = _run(one_redis(args))
    try:
        first_rc = first.wait()
        if beside.poll() is None:
            log_name = CLUSTER_LOG.relative_to(BASE_DIR)
            print(f"\nThe Redis Cluster run beside it is still going ({log_name})", flush=True)
        beside_rc = beside.wait()
    except (KeyboardInterrupt, SystemExit):
        _stop(first, beside)
        raise
    print("\n--- the same tests on a local Redis Cluster ---", flush=True)
    sys.stdout.write(CLUSTER_LOG.read_text())
    sys.stdout.flush()
    return first_rc or beside_rc


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--cluster"]:
        return subprocess.call(cluster(args[1:]), cwd=BASE_DIR)
    return side_by_side(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
