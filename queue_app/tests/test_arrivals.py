"""Arrival numbers in blocks (queue_app/arrivals.py, lua/block.lua): a web process
takes numbers a block at a time and hands them out itself, in order."""

import os
import signal
import threading
import time
import uuid

import pytest
import requests

from queue_app import arrivals, line, services, tokens
from queue_app.tests.test_admission import admit
from queue_app.tests.test_poll import _polls_commands, _server_of
from testsupport.servers import server_env, start_gunicorn, stop_gunicorn
from ticketing import store


@pytest.fixture
def blocks(settings):
    """Blocks on, as production runs (QUEUE_BLOCK_MS); each test's blocks given back
    after it."""
    settings.QUEUE_BLOCK_MS = 50
    yield settings
    arrivals.give_back()


def _number(event_id: str, token: str) -> int:
    number = tokens.verify(event_id, uuid.UUID(token).bytes)
    assert number is not None
    return number


def _another_process_takes(
    event_id: str, count: int, open_ms: int = 60_000
) -> tuple[int, bytes, bytes, bytes]:
    """A block taken as another web process takes one: its first number, the line's
    generation, the block's member in `blocks` and its random bytes."""
    random = arrivals._random(count)  # as a process makes them
    reply = store.run(
        arrivals._BLOCK.call(
            store.event_keys(event_id), count=count, random=random, open_ms=open_ms, back=b"", used=0
        )
    )
    assert reply[0] == b"BLOCK", reply
    _, first, _, gen, member = reply
    return first, bytes.fromhex(gen.decode()), member, random


def _token_of(event_id: str, block: tuple, n: int) -> str:
    first, gen, _, random = block
    at = (n - first) * 2
    return str(uuid.UUID(bytes=tokens.mint(event_id, n, gen, random[at : at + 2])))


def test_new_places_come_from_a_block_without_a_redis_command_of_their_own(
    blocks, lanes_api, event, redis_url
):
    """Joins in a row are numbered 1, 2, 3... by this process; once its blocks have
    grown, thirty joins cost Redis one block at most, and each answers its place's
    first poll, ranked by its number."""
    blocks.QUEUE_BLOCK_MS = 10_000
    blocks.QUEUE_LINE_REFRESH_MS = 60_000
    redis_url = _server_of(redis_url, event.event_id)
    first = [lanes_api.token(event.event_id) for _ in range(20)]  # blocks of 1, 8, 64
    answers = []
    sent = _polls_commands(
        redis_url, lambda: answers.extend(lanes_api.join(event.event_id) for _ in range(30))
    )
    assert sent == [], sent  # the block of 64 still has numbers
    numbers = [_number(event.event_id, t) for t in first]
    for status, body in answers:
        assert status == 200, body
        numbers.append(_number(event.event_id, body["data"]["token"]))
        position = body["data"]["position"]
        assert position["status"] == "WAITING" and position["rank"] == numbers[-1]
        assert isinstance(body["data"]["joinedAt"], int)
    assert numbers == list(range(1, 51))


def test_a_block_given_back_leaves_no_number_nobody_holds(blocks, lanes_api, event, rc):
    """After the block's time, the process gives back what it did not hand out: with
    nobody's number after it, those numbers are simply not issued, and the tick
    admits the three people, in order. The block's time is long enough for the three
    joins to fall within the first one's on a loaded machine, so the second block grows."""
    blocks.QUEUE_BLOCK_MS = 1_000
    k = store.event_keys(event.event_id)
    people = [lanes_api.token(event.event_id) for _ in range(3)]
    assert int(rc.get(k.seq)) > 3  # a block of 8 was taken after the first
    deadline = time.monotonic() + 10
    while rc.zcard(k.blocks) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rc.zcard(k.blocks) == 0 and int(rc.get(k.seq)) == 3
    tick = admit(event.event_id)
    assert (tick.admitted, tick.waiting) == (3, 0)
    assert [lanes_api.poll(t, event.event_id)[1]["data"]["status"] for t in people] == ["ACTIVE"] * 3


def test_numbers_not_handed_out_become_holes_when_another_process_took_later_ones(blocks, api, event, rc):
    """This process's block is given back after another process took the next one:
    its numbers not handed out are holes, which ranks and the tick pass; the tick
    admits nobody from the other process's block while it is out."""
    k = store.event_keys(event.event_id)
    blocks.QUEUE_BLOCK_MS = 10_000
    mine = [api.token(event.event_id) for _ in range(2)]  # numbers 1 and 2: blocks [1], [2..9]
    assert [_number(event.event_id, t) for t in mine] == [1, 2] and int(rc.get(k.seq)) == 9
    other = _another_process_takes(event.event_id, 5)
    assert other[0] == 10
    theirs = _token_of(event.event_id, other, 10)
    arrivals.give_back()  # this process's blocks, as at its end
    assert int(rc.get(k.seq)) == 14 and int(rc.get(k.holes)) == 7  # 3..9
    data = api.poll(theirs, event.event_id)[1]["data"]
    assert (data["status"], data["rank"]) == ("WAITING", 3)
    tick = admit(event.event_id)
    assert tick.admitted == 2  # 1 and 2; 10 is in a block still out
    # The other process gives its block back, having handed out 10 only.
    assert store.run(arrivals._BLOCK.call(k, count=0, random=b"", open_ms=0, back=other[2], used=1)) == [
        b"BACK"
    ]
    assert int(rc.get(k.seq)) == 10
    tick = admit(event.event_id)
    assert (tick.admitted, tick.waiting) == (1, 0)
    assert api.poll(theirs, event.event_id)[1]["data"]["status"] == "ACTIVE"


def test_a_block_never_given_back_holds_the_tick_until_its_time(blocks, api, make_event, rc, monkeypatch):
    """A process killed with a block out never gives it back: the tick admits nobody
    from it until its time is over, then admits its numbers in their turn, with a
    claim time: its holders come back and keep their turn; the slots of the numbers
    nobody was handed go to the next people once the claim time is over."""
    monkeypatch.setattr(arrivals, "LOST_CLAIM_MS", 1_000)
    event = make_event(admit_per_second=50)
    k = store.event_keys(event.event_id)
    block = _another_process_takes(event.event_id, 5, open_ms=1_500)
    holders = [_token_of(event.event_id, block, n) for n in (1, 2)]
    assert admit(event.event_id).admitted == 0
    time.sleep(1.6)
    behind = api.token(event.event_id)  # number 6, in a block of this process
    arrivals.give_back()
    tick = admit(event.event_id)
    assert tick.admitted == 6 and rc.zcard(k.blocks) == 0 and tick.active == 6
    entries = rc.zrange(k.windows, 0, -1)
    assert [e.split(b":")[:2] for e in entries] == [[b"5", b"1"], [b"6", b"6"]]  # the lost block's own
    assert [api.poll(t, event.event_id)[1]["data"]["status"] for t in holders] == ["ACTIVE"] * 2
    time.sleep(1.1)
    tick = admit(event.event_id)
    assert tick.active == 3  # the two holders and the person behind; 3, 4 and 5 were nobody
    assert [api.poll(t, event.event_id)[1]["data"]["status"] for t in [*holders, behind]] == ["ACTIVE"] * 3


def test_an_event_with_protections_takes_each_join_one_at_a_time(blocks, api, make_event, rc):
    """An address cap (like an account, a proof of work, a presale) is decided per
    join by the join script: no block is taken."""
    event = make_event(max_places_per_address=3)
    k = store.event_keys(event.event_id)
    for _ in range(3):
        api.token(event.event_id)
    assert api.join(event.event_id)[1]["error"]["code"] == "TOO_MANY_PLACES"
    assert int(rc.get(k.seq)) == 3 and not rc.exists(k.blocks)


def test_a_closed_event_is_refused_as_before(blocks, api, make_event):
    event = make_event()
    api.token(event.event_id)
    from queue_app import events

    event.status = "CLOSED"
    event.save()
    events.event_publish(event)
    time.sleep(0.06)  # the block's time
    assert api.join(event.event_id)[1]["error"]["code"] == "EVENT_CLOSED"


def _join_all(base: str, event_id: str, threads: int, each: int) -> list[tuple[float, float, int]]:
    """(sent, answered, number) of every join, from `threads` clients at once."""
    found: list[tuple[float, float, int]] = []
    errors: list[BaseException] = []

    def client() -> None:
        try:
            with requests.Session() as s:
                for _ in range(each):
                    sent = time.monotonic()
                    r = s.post(f"{base}/api/queue/join", json={"eventId": event_id}, timeout=10)
                    answered = time.monotonic()
                    assert r.status_code == 200, r.text
                    found.append((sent, answered, _number(event_id, r.json()["data"]["token"])))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    return found


@pytest.mark.django_db(transaction=True)
def test_joins_answered_more_than_the_block_time_apart_are_in_arrival_order(make_event, rc):
    """Three processes hand out blocks at once: every pair of joins where one was
    sent more than QUEUE_BLOCK_MS after the other was answered is in arrival order;
    within it, processes' people interleave. No number is handed out twice, and once
    every block is given back the line holds exactly the people who joined."""
    event = make_event()
    block_ms = 50
    base, proc = start_gunicorn(server_env(QUEUE_BLOCK_MS=str(block_ms)), workers=3)
    k = store.event_keys(event.event_id)
    try:
        joins = _join_all(base, event.event_id, threads=12, each=80)
        deadline = time.monotonic() + 5  # each worker gives its last block back after its time
        while rc.zcard(k.blocks) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop_gunicorn(proc)
    numbers = [n for _, _, n in joins]
    assert len(set(numbers)) == len(numbers) == 960
    by_answer = sorted(joins, key=lambda j: j[1])
    highest, i, checked = 0, 0, 0
    for sent, _, n in sorted(joins):
        while i < len(by_answer) and by_answer[i][1] < sent - block_ms / 1000:
            highest = max(highest, by_answer[i][2])
            i += 1
        assert n > highest, (n, highest)
        checked += i
    assert checked > 100_000  # most pairs are that far apart
    in_sent_order = [n for _, _, n in sorted(joins)]
    swapped = sum(1 for a, b in zip(in_sent_order, in_sent_order[1:], strict=False) if a > b)
    assert swapped > 0  # within the block time, processes' people do interleave
    assert rc.zcard(k.blocks) == 0
    seq, holes = int(rc.get(k.seq)), int(rc.get(k.holes) or 0)
    assert seq - holes == 960 and max(numbers) <= seq
    line.forget()
    tick = admit(event.event_id)
    assert tick.waiting + tick.admitted == 960


@pytest.mark.django_db(transaction=True)
def test_a_process_killed_holding_a_half_used_block(make_event, rc, monkeypatch):
    """The worker is killed (SIGKILL) with a block of which it handed out some numbers:
    the tick admits nobody from that block until its time is over, then admits it in
    its turn; its holders come back and keep their place, the numbers nobody held give
    their slots back after the claim time, and the server's next worker takes numbers
    behind it."""
    monkeypatch.setattr(arrivals, "LOST_CLAIM_MS", 1_000)
    event = make_event(admit_per_second=50)
    k = store.event_keys(event.event_id)
    base, proc = start_gunicorn(server_env(QUEUE_BLOCK_MS="1000"), workers=1)
    try:
        with requests.Session() as s:
            held: list[str] = []
            while True:  # until the block of the last one has numbers left: half used
                r = s.post(f"{base}/api/queue/join", json={"eventId": event.event_id})
                held.append(r.json()["data"]["token"])
                out = [tuple(map(int, m.split(b":")[:2])) for m in rc.zrange(k.blocks, 0, -1)]
                first, last = next((b for b in out if b[0] <= len(held) <= b[1]), (0, 0))
                if last > len(held):
                    break
                assert len(held) < 40
            assert [_number(event.event_id, t) for t in held] == list(range(1, len(held) + 1))
            worker = int(
                open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()[0]  # noqa: SIM115
            )
            os.kill(worker, signal.SIGKILL)
            assert admit(event.event_id).admitted == first - 1  # nobody from the block out
            deadline = time.monotonic() + 20
            while True:
                try:
                    r = s.post(f"{base}/api/queue/join", json={"eventId": event.event_id}, timeout=5)
                    if r.status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert _number(event.event_id, r.json()["data"]["token"]) == last + 1  # behind the lost block
    finally:
        stop_gunicorn(proc)

    def statuses() -> list[str]:
        return [
            services.queue_poll(event_id=event.event_id, token=tokens.parse_token(t)).status for t in held
        ]

    deadline = time.monotonic() + 10
    admitted = 0
    while rc.zcard(k.blocks):  # the lost blocks' time and grace (the next worker's too: killed)
        assert time.monotonic() < deadline
        time.sleep(0.2)
        admitted += admit(event.event_id).admitted
        statuses()  # the holders' pages poll: those admitted come back (claim)
    assert admitted >= last + 1 - first  # the lost block's numbers, in their turn
    assert statuses() == ["ACTIVE"] * len(held)
    time.sleep(1.1)
    # The numbers nobody held (and the last joiner, who did not come back) free their slots.
    assert admit(event.event_id).active == len(held)
    assert statuses() == ["ACTIVE"] * len(held)


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_shuts_down_gives_its_block_back(make_event, rc):
    """A graceful stop (a restart, a deploy: SIGTERM) gives the worker's block back as
    it ends, so that the tick need not wait out its time: the numbers nobody took are
    not issued."""
    from ticketing import servers

    event = make_event()
    k = store.event_keys(event.event_id)
    base, proc = start_gunicorn(server_env(QUEUE_BLOCK_MS="60000"), workers=1)
    try:
        with requests.Session() as s:
            for _ in range(3):
                assert s.post(f"{base}/api/queue/join", json={"eventId": event.event_id}).status_code == 200
        assert rc.zcard(k.blocks) == 1 and int(rc.get(k.seq)) > 3
    finally:
        servers.stop_group(proc, grace=10)
    assert rc.zcard(k.blocks) == 0 and int(rc.get(k.seq)) == 3


def test_joins_for_unknown_events_do_not_grow_the_process(blocks, api):
    """Any event id a client sends reaches the blocks' bookkeeping: an unknown one is
    refused by the join script as before, and the process keeps no more than a few
    hundred events' entries."""
    for n in range(arrivals._MAX_EVENTS + 50):
        status, body = api.join(f"nobody-{n}")
        assert (status, body["error"]["code"]) == (404, "EVENT_NOT_FOUND")
    assert len(arrivals._events) <= arrivals._MAX_EVENTS
