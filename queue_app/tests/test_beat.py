"""Admission with real Celery processes: worker and beat on the configured broker
(RabbitMQ in CI, Redis by default), against the real Redis."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from testsupport.servers import database_url_of_tests
from ticketing import store


class Stack:
    """Celery worker and beat processes, started and stopped by a test."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {
            **os.environ,
            "REDIS_URL": settings.REDIS_URL,
            "RABBITMQ_URL": settings.BROKER_URL,
            "DATABASE_URL": database_url_of_tests(),
            "PYTHONUNBUFFERED": "1",
        }

    def start(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ticketing", *args, "--loglevel=INFO"],
            cwd=settings.BASE_DIR,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its pool's children are stopped with it
        )

    def worker(self, name: str) -> None:
        self.start(
            name,
            "worker",
            "--concurrency=2",
            "--pool=prefork",
            "--without-gossip",
            "--without-mingle",
            "-n",
            f"{name}@%h",
        )

    def beat(self, name: str) -> None:
        self.start(name, "beat", f"--schedule={self.tmp / name}")

    def stop(self, name: str) -> None:
        """A warm shutdown; a process that does not finish it in 30 s is killed, with
        its pool, so that no beat keeps ticking into the tests that follow."""
        proc = self.procs.pop(name)
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a hung shutdown, or pool children left behind
        except ProcessLookupError:
            pass
        proc.wait()

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)


@pytest.fixture
def stack(tmp_path):
    s = Stack(tmp_path)
    yield s
    s.close()


def _purge_broker() -> None:
    """Drop ticks that older runs left in the broker."""
    from ticketing.celery import app

    with app.connection_for_write() as conn:
        app.amqp.queues["celery"].bind(conn.default_channel).declare()
        conn.default_channel.queue_purge("celery")


def _ticks(event_id: str) -> list[tuple[int, int]]:
    """(second, admitted) of each tick, oldest first, from the script's own log."""
    entries = store.client().lrange(store.EventKeys(event_id).admit_log, 0, -1)
    return sorted(tuple(int(x) for x in e.split(b":")) for e in entries)


def _span(ticks: list[tuple[int, int]]) -> int:
    """Seconds of Redis' clock from the first tick to the last, both counted."""
    return ticks[-1][0] - ticks[0][0] + 1 if ticks else 0


# Beat's line for each admission tick it sends, and the worker's for each it ran.
TICK_SENT = "Sending due task admit-every-second"
TICK_DONE = re.compile(r"Task queue_app\.tasks\.admit_tick\[[^\]]+\] succeeded in")


def _wait_until(predicate, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_two_beats_and_two_workers_admit_the_batch_once_per_second(stack, make_event, api):
    from queue_app import services

    event = make_event(admit_per_second=5, active_window_seconds=600)
    services.queue_join_many(event_id=event.event_id, count=500)
    first = api.token(event.event_id)  # arrival 501: proves the order at the end
    _purge_broker()
    for name in ("worker1", "worker2"):
        stack.worker(name)
    for name in ("beat1", "beat2"):  # redundant beats, as for high availability
        stack.beat(name)
    # Ticks over six seconds of Redis' clock at least (however slowly they come).
    _wait_until(lambda: _span(_ticks(event.event_id)) >= 6, 120)
    while True:  # the ticks and the poll of one moment: no tick between them
        ticks = _ticks(event.event_id)
        rank = api.poll(first, event.event_id)[1]["data"]["rank"]
        if _ticks(event.event_id) == ticks:
            break
    seconds = [s for s, _ in ticks]
    assert len(seconds) == len(set(seconds)), "a second was ticked twice"
    assert all(admitted == 5 for _, admitted in ticks)
    # So never more than the batch per second. (A busy machine may miss a second:
    # its tick expires in the broker rather than doubling the next one.)
    total = sum(a for _, a in ticks)
    assert total == 5 * len(ticks) <= 5 * _span(ticks)
    assert rank == 501 - total


def test_the_window_passes_under_the_real_tick(stack, make_event, api):
    event = make_event(admit_per_second=10, active_window_seconds=2)
    tokens = [api.token(event.event_id) for _ in range(3)]
    _purge_broker()
    stack.worker("worker")
    stack.beat("beat")
    _wait_until(lambda: api.poll(tokens[0], event.event_id)[1]["data"]["status"] == "ACTIVE", 60)
    assert [api.poll(t, event.event_id)[1]["data"]["status"] for t in tokens] == ["ACTIVE"] * 3
    _wait_until(lambda: api.poll(tokens[0], event.event_id)[1]["data"]["status"] == "EXPIRED", 60)
    # The next ticks clean the active set.
    _wait_until(lambda: int(store.client().get(store.EventKeys(event.event_id).active)) == 0, 60)
    assert [api.poll(t, event.event_id)[1]["data"]["status"] for t in tokens] == ["EXPIRED"] * 3


@pytest.mark.parametrize("status", ["PAUSED", "CLOSED", "SOLD_OUT"])
def test_the_real_tick_admits_nobody_when_it_should_not(stack, make_event, api, rc, status):
    from queue_app import events

    event = make_event(total_seats=10)
    token = api.token(event.event_id)
    if status == "SOLD_OUT":
        rc.set(store.EventKeys(event.event_id).seats, 0)
    else:
        event.status = status
        events.event_publish(event)
    _purge_broker()
    stack.worker("worker")
    stack.beat("beat")
    _wait_until(lambda: len(_ticks(event.event_id)) >= 3, 60)
    assert sum(a for _, a in _ticks(event.event_id)) == 0
    assert int(rc.get(store.EventKeys(event.event_id).active) or 0) == 0
    expected = "EXPIRED" if status == "CLOSED" else "WAITING"
    assert api.poll(token, event.event_id)[1]["data"]["status"] == expected


def test_ticks_that_waited_out_an_outage_are_dropped_not_replayed(stack, make_event, api):
    event = make_event(admit_per_second=3, active_window_seconds=600)
    for _ in range(60):
        api.token(event.event_id)
    _purge_broker()
    stack.beat("beat")  # the worker is down: a tick is sent every second regardless
    _wait_until(lambda: stack.log("beat").count(TICK_SENT) >= 6, 120)
    stale = stack.log("beat").count(TICK_SENT)
    stack.worker("worker")
    _wait_until(lambda: len(_ticks(event.event_id)) >= 3, 120)
    executed = len(TICK_DONE.findall(stack.log("worker")))
    sent = stack.log("beat").count(TICK_SENT) - stale  # read last: it only grows
    # The stale ticks expired (RabbitMQ drops them by message TTL; with Redis the
    # worker discards them): only ticks sent since the worker started were executed,
    # and the one sent just before it, still within its second.
    assert executed <= sent + 1, (stale, sent, stack.log("worker"))
    ticks = _ticks(event.event_id)
    assert len({s for s, _ in ticks}) == len(ticks)
    assert all(admitted <= 3 for _, admitted in ticks)
