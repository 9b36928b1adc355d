"""The web processes' copy of the line (queue_app/line.py): how stale it may be.

Other processes move the line here by running its scripts directly, as another app
server or the beat would: this process only learns of it by refreshing its copy.
"""

import asyncio
import bisect
import dataclasses
import threading
import time
import uuid

import pytest

from booking_app import services as booking
from queue_app import admission, events, line, services
from testsupport import CheckedThread
from testsupport.line import line_token, next_redis_second
from ticketing import store

REFRESH_MS = 200


@pytest.fixture
def refreshing(settings) -> None:
    settings.QUEUE_LINE_REFRESH_MS = REFRESH_MS
    line.forget()


def _leave_elsewhere(event_id: str, number: int) -> None:
    store.run(services._leave_call(event_id, line_token(event_id, number)))


def test_a_rank_shown_is_never_more_than_one_refresh_behind(make_event, refreshing):
    event = make_event()
    services.queue_join_many(event_id=event.event_id, count=400)
    me = line_token(event.event_id, 400)
    began: list[tuple[float, int]] = [(0.0, 0)]  # (when the n-th leave was sent, n)
    ended: list[tuple[float, int]] = [(0.0, 0)]  # (when it was done, n)
    shown: list[tuple[float, float, int]] = []  # (asked at, answered at, rank)
    polled = threading.Condition()
    done = threading.Event()

    def leavers() -> None:
        try:
            for n in range(1, 301):
                began.append((time.monotonic(), n))
                _leave_elsewhere(event.event_id, n)
                ended.append((time.monotonic(), n))
                with polled:  # a poll answered after each leave, however slow the machine
                    seen = len(shown)
                    polled.wait_for(lambda seen=seen: len(shown) > seen, timeout=60)
        finally:
            done.set()  # the pollers stop even if a leave failed

    def poller() -> None:
        while not done.is_set():
            asked = time.monotonic()
            rank = services.queue_poll(event_id=event.event_id, token=me).rank
            with polled:
                shown.append((asked, time.monotonic(), rank))
                polled.notify_all()

    threads = [CheckedThread(target=leavers), *(CheckedThread(target=poller) for _ in range(3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def by(moment: float, log: list[tuple[float, int]]) -> int:
        return log[bisect.bisect_right(log, (moment, 301)) - 1][1]  # the log is in time order

    assert len(shown) >= 300
    for asked, answered, rank in shown:
        # Never ahead of the truth, and never behind what was true one refresh
        # before the poll was asked: the copy it used had started its refresh since
        # (its age is measured after `asked`, from the refresh's start).
        assert 400 - by(answered, began) <= rank <= 400 - by(asked - REFRESH_MS / 1000, ended)
    assert any(rank > 400 - by(asked, ended) for asked, _, rank in shown)  # the copy was used
    time.sleep(REFRESH_MS / 1000)
    assert services.queue_poll(event_id=event.event_id, token=me).rank == 100


def test_nobody_is_shown_admitted_or_may_book_before_the_tick_admitted_them(make_event, refreshing):
    event = make_event(admit_per_second=5, total_seats=100)
    services.queue_join_many(event_id=event.event_id, count=20)
    people = [line_token(event.event_id, n) for n in range(1, 21)]
    ticks: list[tuple[float, int]] = []  # (the tick began, places admitted up to)
    active_at: dict[int, float] = {}
    booked_at: dict[int, float] = {}
    done = threading.Event()

    def beat() -> None:
        try:
            for _ in range(3):
                next_redis_second(margin=0.01)
                began = time.monotonic()
                admission.event_admit(event.event_id)
                ticks.append((began, int(store.client().get(store.event_keys(event.event_id).popped))))
            # Until everyone admitted has seen it and the admitted bookers booked (a
            # poller or booker not let in by then fails the assertions below).
            deadline = time.monotonic() + 60
            while (len(active_at) < 15 or len(booked_at) < 3) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            done.set()  # the others stop even if a tick failed

    def poller(number: int) -> None:
        async def polls() -> None:
            while not done.is_set() and number not in active_at:
                position = await services.aqueue_poll(event_id=event.event_id, token=people[number - 1])
                if position.status in ("ACTIVE", "BOOKED"):
                    active_at[number] = time.monotonic()
                await asyncio.sleep(0.01)

        asyncio.run(polls())

    def booker(number: int) -> None:
        """The Redis step of a booking (lua/reserve.lua), the gate every booking passes."""
        while not done.is_set() and number not in booked_at:
            b = booking.Booking(uuid.uuid4(), event.event_id, people[number - 1].text, 1)
            outcome = store.run(booking.reserve_call(b))[0]
            if outcome == b"OK":
                booked_at[number] = time.monotonic()
            else:
                assert outcome == b"NOT_ACTIVE"
                time.sleep(0.02)

    threads = [
        CheckedThread(target=beat, name="beat"),
        *(CheckedThread(target=poller, args=(n,), name=f"poller {n}") for n in range(1, 16)),
        *(CheckedThread(target=booker, args=(n,), name=f"booker {n}") for n in (1, 6, 11, 16)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()  # a booker refused for anything but NOT_ACTIVE fails the test here

    def admitted_from(number: int) -> float:
        return next(began for began, upto in ticks if upto >= number)

    assert sorted(active_at) == list(range(1, 16)) and sorted(booked_at) == [1, 6, 11]
    for number, at in [*active_at.items(), *booked_at.items()]:
        assert at >= admitted_from(number)
    assert 16 not in booked_at  # never admitted: never allowed to book
    booking_app_outbox = store.event_keys(event.event_id).outbox
    store.client().delete(booking_app_outbox)  # the three Redis steps, never decided: not this test's


@pytest.mark.parametrize("lane", ["sync", "async"])
def test_the_copy_answers_a_drawn_pre_queue_as_redis_does(make_event, lane):
    """After a scheduled start's draw, the copy answers the drawn pre-queue from the
    positions it reads once per chunk: the same answer as lua/poll.lua, for people
    who left before the draw, during it and after it, for people admitted, and for
    arrivals after the start. Between refreshes, no more reads."""
    from datetime import timedelta

    from django.utils import timezone

    from queue_app import draw
    from queue_app.models import Event

    event = make_event(opens_at=timezone.now() + timedelta(hours=1), admit_per_second=7)
    services.queue_join_many(event_id=event.event_id, count=2 * line.POSITIONS_CHUNK + 50)
    people = [line_token(event.event_id, n) for n in range(1, 2 * line.POSITIONS_CHUNK + 51)]
    for n in (3, 40, line.POSITIONS_CHUNK + 1):
        _leave_elsewhere(event.event_id, n)  # before the start
    Event.objects.filter(pk=event.pk).update(opens_at=timezone.now() - timedelta(milliseconds=5))
    event.refresh_from_db()
    events.event_publish(event)
    admission.event_admit(event.event_id)  # DRAW_DUE: the pre-queue closes
    _leave_elsewhere(event.event_id, 41)  # while drawing
    services.queue_join_many(event_id=event.event_id, count=30)  # after the start
    assert draw.run(event.event_id).outcome == "DONE"
    people += [line_token(event.event_id, n) for n in range(len(people) + 1, len(people) + 31)]
    _leave_elsewhere(event.event_id, 42)  # after the draw
    _leave_elsewhere(event.event_id, len(people))  # a late arrival
    store.client().delete(store.event_keys(event.event_id).tick)
    assert admission.event_admit(event.event_id).admitted == 7

    def copy(number: int) -> list | None:
        if lane == "sync":
            return line.current(event.event_id, number).answer(people[number - 1].raw, number)

        async def ask() -> list | None:
            return (await line.acurrent(event.event_id, number)).answer(people[number - 1].raw, number)

        return asyncio.run(ask())

    line.forget()
    answered = 0
    for number in [
        *range(1, 60),
        *range(line.POSITIONS_CHUNK - 5, line.POSITIONS_CHUNK + 5),
        *range(len(people) - 40, len(people) + 1),
    ]:
        truth = store.run(services._poll_call(event.event_id, people[number - 1]))
        mine = copy(number)
        if mine is not None:
            token = people[number - 1]
            shown = [
                dataclasses.replace(services._position(event.event_id, token, reply), next_poll_ms=0)
                for reply in (mine, truth)
            ]
            assert shown[0] == shown[1], number
            answered += 1
        elif truth[0] == b"WAITING":
            pytest.fail(f"the copy sent a waiting person ({number}) to Redis")
    assert answered > 100
    reads = line._lines[event.event_id].positions
    assert sorted(reads) == [0, 1, 2]  # the chunks these people fell in, once each


def test_the_copy_counts_who_left_before_any_place() -> None:
    """left_upto, against a plain count: within the blocks of leavers, at their
    edges, and past the last of them (a join's place at the back)."""
    copy = line.Line("counted")
    left = sorted({7, 8, 9, 4095, 4096, 4100, 9000, 12_287, 12_288, 20_001})
    for place in left:
        copy._left(place)
    for place in [-1, 0, 6, 7, 8, 9, 10, 4094, 4095, 4096, 4097, 8191, 9000, 12_288, 20_000, 20_001, 20_002,
                  20_007, 20_008, 1_000_000]:  # fmt: skip
        assert copy.left_upto(place) == bisect.bisect_right(left, place), place
