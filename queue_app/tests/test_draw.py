"""A scheduled start: the pre-queue, its draw, and the check anyone can run
(docs/draw.md). Real Redis and the real database, both lanes."""

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from queue_app import admission, draw, events, services, tokens
from queue_app.models import Draw, Event
from testsupport import CheckedThread
from testsupport.line import unknown_token
from ticketing import store

VERIFY = Path(settings.BASE_DIR) / "docs" / "verify_draw.py"


@pytest.fixture
def scheduled(make_event):
    """An event whose start is an hour away."""

    def make(**fields) -> Event:
        fields.setdefault("admit_per_second", 1000)
        return make_event(opens_at=timezone.now() + timedelta(hours=1), **fields)

    return make


@pytest.fixture
def one_lane(client):
    """Production's lane only, for what does not depend on the lane (the draw, its
    processes)."""
    from testsupport.clients import Api, LaneClient

    return Api(LaneClient(client))


def start_now(event: Event) -> None:
    """The start comes: the operator moves it to now (the way the admin publishes it)."""
    Event.objects.filter(pk=event.pk).update(opens_at=timezone.now() - timedelta(milliseconds=5))
    event.refresh_from_db()
    events.event_publish(event)


def published_list(event_id: str) -> list[str]:
    """The published receipts, in drawn order."""
    listed = draw.drawn_list(Draw.objects.get(event__event_id=event_id))
    return [receipt.hex() for receipt, _ in sorted(listed.entries(), key=lambda entry: entry[1])]


def test_before_the_start_a_join_enters_the_pre_queue(scheduled, api):
    event = scheduled()
    status, body = api.join(event.event_id)
    assert status == 200
    receipt = body["data"]["receipt"]
    assert len(receipt) == 16 and int(receipt, 16) >= 0
    token = body["data"]["token"]
    data = api.poll(token, event.event_id)[1]["data"]
    assert data["status"] == "PRE_QUEUE"
    assert (data["rank"], data["ahead"], data["behind"], data["drawPosition"]) == (None, None, None, None)
    assert data["receipt"] == receipt
    assert data["opensAt"] == int(event.opens_at.timestamp() * 1000)
    assert data["totalWaiting"] == 1
    assert 8_000 <= data["nextPollMs"] <= 12_000  # the start is far: the slowest step
    # F5 keeps the pre-queue place and its receipt.
    status, body = api.rejoin(token, event.event_id)
    assert (body["data"]["rejoined"], body["data"]["token"], body["data"]["receipt"]) == (
        True,
        token,
        receipt,
    )
    assert admission.event_admit(event.event_id).outcome == "NOT_OPEN"  # nobody is admitted before


def test_polls_are_told_to_come_back_just_after_the_start(make_event, api):
    event = make_event(opens_at=timezone.now() + timedelta(seconds=5))
    token = api.token(event.event_id)
    wait = api.poll(token, event.event_id)[1]["data"]["nextPollMs"]
    assert 4_000 < wait <= 5_000 + 3_000


def test_the_draw_orders_the_pre_queue_and_later_arrivals_follow(scheduled, api):
    event = scheduled()
    early = [api.join(event.event_id)[1]["data"] for _ in range(12)]
    start_now(event)
    tick = admission.event_admit(event.event_id)
    assert (tick.outcome, tick.admitted) == ("DRAW_DUE", 0)
    # The start passed: the pre-queue polls DRAWING; a new arrival is behind all of it.
    assert api.poll(early[0]["token"], event.event_id)[1]["data"]["status"] == "DRAWING"
    status, late = api.join(event.event_id)
    assert late["data"]["receipt"] is None
    late_poll = api.poll(late["data"]["token"], event.event_id)[1]["data"]
    assert (late_poll["status"], late_poll["rank"], late_poll["receipt"]) == ("WAITING", 13, None)

    outcome = draw.run(event.event_id)
    assert (outcome.outcome, outcome.size) == ("DONE", 12)
    listed = published_list(event.event_id)
    positions = {}
    for person in early:
        data = api.poll(person["token"], event.event_id)[1]["data"]
        assert data["status"] == "WAITING"
        assert data["receipt"] == person["receipt"]
        # Each person finds their own position in the published list.
        assert listed.index(person["receipt"]) + 1 == data["drawPosition"] == data["rank"]
        _, found = api.call("get", f"/api/queue/draw?eventId={event.event_id}&receipt={person['receipt']}")
        assert found["data"]["position"] == data["drawPosition"]
        positions[person["token"]] = data["drawPosition"]
    assert sorted(positions.values()) == list(range(1, 13))
    assert list(positions.values()) != list(range(1, 13)), "the draw kept arrival order"
    assert api.poll(late["data"]["token"], event.event_id)[1]["data"]["rank"] == 13
    status, later = api.join(event.event_id)
    assert api.poll(later["data"]["token"], event.event_id)[1]["data"]["rank"] == 14

    # Admission follows the drawn order, then arrival order.
    Event.objects.filter(pk=event.pk).update(admit_per_second=5)
    event.refresh_from_db()
    events.event_publish(event)
    store.client().delete(store.event_keys(event.event_id).tick)
    assert admission.event_admit(event.event_id).admitted == 5
    active = {t for t, p in positions.items() if api.poll(t, event.event_id)[1]["data"]["status"] == "ACTIVE"}
    assert active == {t for t, p in positions.items() if p <= 5}
    call_command("verify_draw", event.event_id)


def test_a_pre_queue_leaver_is_a_hole_at_their_drawn_position(scheduled, one_lane):
    event = scheduled()
    early = [one_lane.join(event.event_id)[1]["data"] for _ in range(8)]
    one_lane.leave(early[3]["token"], event.event_id)
    start_now(event)
    admission.event_admit(event.event_id)
    one_lane.leave(early[5]["token"], event.event_id)  # while drawing
    late = one_lane.token(event.event_id)
    assert draw.run(event.event_id).outcome == "DONE"
    listed = published_list(event.event_id)
    assert len(listed) == 8  # everyone who joined before the start is drawn
    gone = {listed.index(early[i]["receipt"]) + 1 for i in (3, 5)}
    for i, person in enumerate(early):
        data = one_lane.poll(person["token"], event.event_id)[1]["data"]
        if i in (3, 5):
            assert data["status"] == "NOT_FOUND"
            continue
        position = data["drawPosition"]
        assert data["rank"] == position - sum(1 for g in gone if g < position)
        assert data["totalWaiting"] == 7
    assert one_lane.poll(late, event.event_id)[1]["data"]["rank"] == 7
    # Admission skips the holes.
    store.client().delete(store.event_keys(event.event_id).tick)
    tick = admission.event_admit(event.event_id)
    assert (tick.admitted, tick.waiting) == (7, 0)
    assert one_lane.poll(late, event.event_id)[1]["data"]["status"] == "ACTIVE"


def test_joins_racing_the_start_are_each_drawn_or_behind_never_both(scheduled, lane):
    """Threads join while the start passes: every join before the pre-queue closed is
    drawn, every join after it is behind all of them, and none is lost."""
    from testsupport.clients import Api

    event = scheduled()
    answers: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()

    def joiner() -> None:
        client = Api(lane)
        while not stop.is_set():
            status, body = client.join(event.event_id)
            assert status == 200, body
            with lock:
                answers.append(body["data"])

    threads = [CheckedThread(target=joiner, name=f"joiner {i}") for i in range(6)]
    for t in threads:
        t.start()

    def joining() -> bool:  # a joiner that failed stops; the waits below must too
        return all(t.is_alive() for t in threads)

    try:
        while len(answers) < 60 and joining():
            pass
        start_now(event)
        while sum(1 for a in answers if a["receipt"] is None) < 60 and joining():
            pass
    finally:
        stop.set()
        for t in threads:
            t.join()  # a refused join fails the test here, with its answer
    assert draw.run(event.event_id).outcome == "DONE"
    drawn = [a for a in answers if a["receipt"]]
    later = [a for a in answers if not a["receipt"]]
    assert sorted(published_list(event.event_id)) == sorted(a["receipt"] for a in drawn)
    api = Api(lane)
    ranks = [api.poll(a["token"], event.event_id)[1]["data"]["rank"] for a in later]
    later_ranks = sorted(ranks)
    assert later_ranks == list(range(len(drawn) + 1, len(answers) + 1))
    by_arrival = sorted(later, key=lambda a: tokens.issued(event.event_id, tokens.parse_token(a["token"])))
    assert [api.poll(a["token"], event.event_id)[1]["data"]["rank"] for a in by_arrival] == later_ranks


def test_the_check_confirms_the_draw_and_refutes_a_tampered_one(scheduled, api, tmp_path, capsys):
    event = scheduled()
    early = [api.join(event.event_id)[1]["data"] for _ in range(30)]
    commitment = Draw.objects.get(event=event).commitment
    _, shown = api.call("get", f"/api/queue/draw?eventId={event.event_id}")
    assert shown["data"] == {
        "eventId": event.event_id,
        "opensAt": int(event.opens_at.timestamp() * 1000),
        "status": "SCHEDULED",
        "commitment": commitment,
        "seed": None,
        "size": None,
        "listDigest": None,
        "finalSeed": None,
        "receipt": None,
        "position": None,
        "publicKey": draw.public_key(),  # of the key that signs receipts, shown with the commitment
    }
    start_now(event)
    draw.run(event.event_id)
    _, shown = api.call("get", f"/api/queue/draw?eventId={event.event_id}")
    data = shown["data"]
    assert (data["status"], data["size"], data["commitment"]) == ("DRAWN", 30, commitment)
    resp = api.client.get(f"/api/queue/draw/receipts?eventId={event.event_id}")
    assert resp["Content-Type"].startswith("text/plain")
    text = b"".join(resp.streaming_content).decode()
    lines = text.splitlines()
    # One line per place, in the order they joined, with its drawn position.
    assert [line.split()[0] for line in lines] == [p["receipt"] for p in early]
    assert sorted(int(line.split()[1]) for line in lines) == list(range(1, 31))
    for person, line in zip(early, lines, strict=True):
        assert int(line.split()[1]) == api.poll(person["token"], event.event_id)[1]["data"]["drawPosition"]

    good = tmp_path / "list.txt"
    good.write_text(text)
    (a, pa), (b, pb) = lines[0].split(), lines[1].split()
    swapped = tmp_path / "swapped.txt"  # two people's positions exchanged
    swapped.write_text("\n".join([f"{a} {pb}", f"{b} {pa}", *lines[2:]]) + "\n")
    reordered = tmp_path / "reordered.txt"  # the same list in another order: the same draw
    reordered.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")
    dropped = tmp_path / "dropped.txt"  # someone left out
    dropped.write_text("\n".join(lines[1:]) + "\n")
    other_seed = "00" * 32

    call_command("verify_draw", event.event_id, commitment=commitment)
    assert "CONFIRMED: 30 places" in capsys.readouterr().out
    call_command("verify_draw", event.event_id, receipts=str(good))
    call_command("verify_draw", event.event_id, receipts=str(reordered))
    for bad in (
        {"receipts": str(swapped)},
        {"receipts": str(dropped)},
        {"seed": other_seed},
        {"commitment": "ab" * 32},
    ):
        with pytest.raises(CommandError, match="does not check out"):
            call_command("verify_draw", event.event_id, **bad)
        assert "REFUTED" in capsys.readouterr().err

    # The standalone script: only the published data, only Python's standard library.
    def script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(VERIFY), *args], capture_output=True, text=True, timeout=60
        )

    seed = data["seed"]
    ok = script(
        "--seed", seed, "--receipts", str(good), "--commitment", commitment, "--receipt", early[7]["receipt"]
    )
    assert ok.returncode == 0, ok.stdout
    mine = api.poll(early[7]["token"], event.event_id)[1]["data"]["drawPosition"]
    assert f"position {mine} of 30" in ok.stdout
    assert script("--seed", seed, "--receipts", str(reordered), "--commitment", commitment).returncode == 0
    for args in (
        ("--seed", seed, "--receipts", str(swapped), "--commitment", commitment),
        ("--seed", seed, "--receipts", str(dropped), "--commitment", commitment),
        ("--seed", other_seed, "--receipts", str(good), "--commitment", commitment),
        ("--seed", seed, "--receipts", str(good), "--commitment", "ab" * 32),
    ):
        refuted = script(*args)
        assert refuted.returncode == 1 and "REFUTED" in refuted.stdout, refuted.stdout


def test_the_order_of_the_list_cannot_change_the_draw(scheduled, one_lane):
    """The list is drawn sorted, so nobody can reorder it to move a place: the
    published lines in any order, their positions recomputed, are the same draw.
    (Drawn in the order people joined, which only the service knows, about 6 tries
    of 24 places' orders put any one chosen receipt first, and the check confirmed
    it.)"""
    event = scheduled()
    early = [one_lane.join(event.event_id)[1]["data"]["receipt"] for _ in range(24)]
    start_now(event)
    draw.run(event.event_id)
    listed = dict(draw.drawn_list(Draw.objects.get(event=event)).entries())
    seed = bytes(Draw.objects.get(event=event).seed)
    assert sorted(listed) == sorted(bytes.fromhex(receipt) for receipt in early)
    shuffler = random.Random(23)
    for _ in range(50):
        order = list(listed)
        shuffler.shuffle(order)
        assert dict(zip(order, draw.positions(seed, order), strict=True)) == listed
        digest = draw.published(event_id=event.event_id).list_digest
        assert draw.list_digest(order).hex() == digest


@pytest.mark.django_db(transaction=True)
def test_the_script_checks_a_running_server(make_event, gunicorn):
    """docs/verify_draw.py against the production server, over HTTP."""
    base, _ = gunicorn({"DATABASE_URL": _database_url()})
    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    for _ in range(5):
        services.queue_join(event_id=event.event_id)
    start_now(event)
    draw.run(event.event_id)
    commitment = Draw.objects.get(event=event).commitment
    done = subprocess.run(
        [sys.executable, str(VERIFY), "--url", base, "--event", event.event_id, "--commitment", commitment],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "CONFIRMED: 5 places" in done.stdout, done.stdout + done.stderr


@pytest.mark.django_db(transaction=True)
def test_a_draw_killed_before_it_switched_is_run_again_to_the_same_order(scheduled, one_lane):
    """A real process dies at the worst moment: the order published in the database,
    its list and positions written to Redis, the switch not yet made. The line keeps
    answering DRAWING; the next run finishes with the same order; nothing is left over."""
    event = scheduled()
    early = [one_lane.join(event.event_id)[1]["data"] for _ in range(20)]
    start_now(event)
    code = (
        "import os, signal\n"
        "from queue_app import draw\n"
        "from ticketing import store\n"
        "real = store.run\n"
        "def dying(call, **k):\n"
        "    if call.script.name == 'draw_done':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(call, **k)\n"
        "store.run = dying\n"
        f"draw.run({event.event_id!r})\n"
    )
    env = {**os.environ, "DATABASE_URL": _database_url()}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    first = published_list(event.event_id)
    assert len(first) == 20
    assert one_lane.poll(early[0]["token"], event.event_id)[1]["data"]["status"] == "DRAWING"
    client = store.client()
    left_over = [k for k in store.scan(store.key(event.event_id, "queue", "draw", "*"))]
    assert left_over and all(0 < client.pttl(k) <= 10 * draw.CLAIM_MS for k in left_over)

    assert draw.run(event.event_id).outcome == "DONE"
    assert published_list(event.event_id) == first
    for person in early:
        data = one_lane.poll(person["token"], event.event_id)[1]["data"]
        assert data["drawPosition"] == first.index(person["receipt"]) + 1
    call_command("verify_draw", event.event_id)


@pytest.mark.django_db(transaction=True)
def test_two_runs_at_once_put_one_order_in_place(scheduled, one_lane):
    event = scheduled()
    early = [one_lane.join(event.event_id)[1]["data"] for _ in range(300)]
    start_now(event)
    outcomes: list[str] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(draw.run(event.event_id).outcome)) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) in (["ALREADY", "DONE"], ["DONE", "DONE"])
    client = store.client()
    k = store.event_keys(event.event_id)
    assert client.strlen(k.drawpos) == 4 * 300 and not client.exists(k.pre)  # the tokens are let go
    listed = published_list(event.event_id)
    ranks = sorted(one_lane.poll(p["token"], event.event_id)[1]["data"]["rank"] for p in early[:50])
    assert len(set(ranks)) == 50
    assert not [key for key in store.scan(store.key(event.event_id, "queue", "draw", "*"))]
    assert draw.run(event.event_id).outcome == "DONE"  # a third run changes nothing
    assert published_list(event.event_id) == listed


@pytest.mark.django_db(transaction=True)
def test_the_draw_runs_under_the_real_beat_and_worker(make_event, one_lane, tmp_path):
    """Beat's tick reports DRAW_DUE; it hands the draw to a Celery worker; admission
    begins with the first tick after it."""
    from queue_app.tests.test_beat import Stack, _purge_broker, _wait_until

    event = make_event(opens_at=timezone.now() + timedelta(seconds=3), admit_per_second=2)
    early = [one_lane.join(event.event_id)[1]["data"] for _ in range(6)]
    stack = Stack(tmp_path)
    stack.env["DATABASE_URL"] = _database_url()
    _purge_broker()
    try:
        stack.worker("worker")
        stack.beat("beat")

        def drawn() -> bool:
            return one_lane.poll(early[0]["token"], event.event_id)[1]["data"]["drawPosition"] is not None

        _wait_until(drawn, 60)
        _wait_until(lambda: events.event_live_numbers(event.event_id)["active"] >= 2, 30)
    finally:
        stack.close()
    positions = {p["token"]: one_lane.poll(p["token"], event.event_id)[1]["data"] for p in early}
    active = sorted(d["drawPosition"] for d in positions.values() if d["status"] == "ACTIVE")
    assert active == list(range(1, len(active) + 1))
    call_command("verify_draw", event.event_id)


def _database_url() -> str:
    """The test database, for another process to share."""
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def test_the_schedule_moves_before_the_start_and_stays_after_it(scheduled, one_lane):
    event = scheduled()
    meta = store.event_keys(event.event_id).meta
    later = timezone.now() + timedelta(hours=2)
    event.opens_at = later
    event.full_clean()
    event.save()
    events.event_publish(event)
    assert int(store.client().hget(meta, "opensAt")) == int(later.timestamp() * 1000)
    token = one_lane.token(event.event_id)
    start_now(event)
    assert admission.event_admit(event.event_id).outcome == "DRAW_DUE"
    draw.run(event.event_id)
    # After the start the time is history: the model refuses a change.
    event.refresh_from_db()
    event.opens_at = timezone.now() + timedelta(hours=3)
    with pytest.raises(Exception, match="start has passed"):
        event.full_clean()
    assert one_lane.poll(token, event.event_id)[1]["data"]["drawPosition"] == 1
    # A Redis that lost the event after its draw rebuilds a first-come line.
    events.event_wipe(event.event_id)
    events.event_publish(Event.objects.get(pk=event.pk))
    assert store.client().hget(meta, "draw") is None


def test_a_line_that_admitted_people_gets_no_start(make_event, one_lane):
    event = make_event(admit_per_second=1)
    one_lane.token(event.event_id)
    admission.event_admit(event.event_id)
    event.opens_at = timezone.now() + timedelta(hours=1)
    with pytest.raises(events.LineStarted):
        events.event_publish(event)
    assert store.client().hget(store.event_keys(event.event_id).meta, "draw") is None
    with pytest.raises(CommandError, match="joined the line"):
        call_command("init_event", event.event_id, "--opens-at", "+3600")


def test_init_event_schedules_a_start_and_shows_the_commitment(db, capsys):
    event_id = "t-init-draw"
    try:
        call_command("init_event", event_id, "--opens-at", "+600")
        out = capsys.readouterr().out
        found = Draw.objects.get(event__event_id=event_id)
        assert found.commitment in out
        assert store.client().hget(store.event_keys(event_id).meta, "draw") == b"PENDING"
        with pytest.raises(CommandError, match="not a time"):
            call_command("init_event", event_id, "--opens-at", "tomorrow")
        with pytest.raises(CommandError, match="future"):
            call_command("init_event", event_id, "--opens-at", "2020-01-01T07:00:00+09:00")
        call_command("init_event", event_id, "--opens-at", "none")
        assert store.client().hget(store.event_keys(event_id).meta, "draw") is None
    finally:
        events.event_wipe(event_id)
        store.client().srem(store.EVENTS_KEY, event_id)


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("eventId=nope-404", 404, "EVENT_NOT_FOUND"),
        ("eventId=%s&receipt=xyz", 400, "VALIDATION_ERROR"),
        ("eventId=%s&receipt=0123456789abcdeg", 400, "VALIDATION_ERROR"),
        ("eventId=%s&receipt=0123456789abcdef", 409, "NOT_DRAWN"),
        ("eventId=bad id", 400, "VALIDATION_ERROR"),
    ],
)
def test_bad_draw_questions_get_clear_errors(scheduled, api, query, status, code):
    event = scheduled()
    got, body = api.call("get", "/api/queue/draw?" + (query % event.event_id if "%s" in query else query))
    assert (got, body["success"], body["error"]["code"]) == (status, False, code)


def test_draw_errors_of_events_without_or_after_a_draw(make_event, scheduled, api):
    plain = make_event()
    got, body = api.call("get", f"/api/queue/draw?eventId={plain.event_id}")
    assert (got, body["error"]["code"]) == (404, "NO_DRAW")
    got, body = api.call("get", f"/api/queue/draw/receipts?eventId={plain.event_id}")
    assert (got, body["error"]["code"]) == (404, "NO_DRAW")
    event = scheduled()
    got, body = api.call("get", f"/api/queue/draw/receipts?eventId={event.event_id}")
    assert (got, body["error"]["code"]) == (409, "NOT_DRAWN")
    api.token(event.event_id)
    start_now(event)
    draw.run(event.event_id)
    got, body = api.call("get", f"/api/queue/draw?eventId={event.event_id}&receipt={'0' * 16}")
    assert (got, body["error"]["code"]) == (404, "RECEIPT_NOT_FOUND")


def test_an_empty_pre_queue_draws_nothing_and_the_line_works(scheduled, api):
    event = scheduled()
    start_now(event)
    late = api.token(event.event_id)
    assert draw.run(event.event_id).outcome == "DONE"
    assert api.poll(late, event.event_id)[1]["data"]["rank"] == 1
    assert admission.event_admit(event.event_id).admitted == 1


@pytest.mark.django_db(transaction=True)
def test_a_run_begun_before_the_start_reads_ahead_and_draws_at_it(make_event, one_lane):
    """As the tick dispatches it: the run starts draw.LEAD_MS before the start, keeps
    up with the pre-queue while joins go on, and draws everyone who came before the
    start and nobody after."""
    event = make_event(opens_at=timezone.now() + timedelta(seconds=2))
    early = [one_lane.join(event.event_id)[1]["data"] for _ in range(20)]
    assert admission.event_admit(event.event_id).outcome == "DRAW_DUE"  # within the lead
    outcome: list[draw.Outcome] = []
    runner = threading.Thread(target=lambda: outcome.append(draw.run(event.event_id)))
    runner.start()
    joined = []
    while runner.is_alive():
        joined.append(one_lane.join(event.event_id)[1]["data"])
    runner.join()
    drawn = early + [j for j in joined if j["receipt"]]
    later = [j for j in joined if not j["receipt"]]
    assert outcome[0].outcome == "DONE" and outcome[0].size == len(drawn) > 20
    assert sorted(published_list(event.event_id)) == sorted(j["receipt"] for j in drawn)
    ranks = sorted(one_lane.poll(j["token"], event.event_id)[1]["data"]["rank"] for j in later)
    assert ranks == list(range(len(drawn) + 1, len(drawn) + len(later) + 1))
    # The list it sorted in steps as it read is drawn as the whole list sorted at once.
    call_command("verify_draw", event.event_id)


def test_a_run_for_a_start_moved_later_gives_way(make_event):
    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    services.queue_join(event_id=event.event_id)
    assert draw.dispatch(event.event_id)
    assert draw.run(event.event_id).outcome == "NOT_DUE"
    assert draw.dispatch(event.event_id)  # the claim was let go: a later tick dispatches again


def _tick(event: Event) -> admission.Tick:
    store.client().delete(store.event_keys(event.event_id).tick)  # no wait for the next second
    return admission.event_admit(event.event_id)


def test_admission_crosses_from_the_drawn_pre_queue_to_the_later_arrivals(scheduled, one_lane):
    event = scheduled()
    early = [one_lane.join(event.event_id)[1]["data"]["token"] for _ in range(10)]
    start_now(event)
    late = [one_lane.token(event.event_id) for _ in range(5)]
    assert draw.run(event.event_id).outcome == "DONE"
    drawn = sorted(early, key=lambda t: one_lane.poll(t, event.event_id)[1]["data"]["drawPosition"])
    for token in drawn[:4]:  # a run of holes at the head of the drawn order
        assert one_lane.leave(token, event.event_id)[1]["data"]["removed"] is True
    Event.objects.filter(pk=event.pk).update(admit_per_second=3)
    event.refresh_from_db()
    events.event_publish(event)
    k, client = store.event_keys(event.event_id), store.client()

    def active() -> list[str]:
        order = drawn + late
        return [t for t in order if one_lane.poll(t, event.event_id)[1]["data"]["status"] == "ACTIVE"]

    assert _tick(event).admitted == 3  # the holes are passed, then 3 admitted
    assert active() == drawn[4:7]
    assert _tick(event).admitted == 3  # the last 3 drawn: past the pre-queue
    assert active() == drawn[4:10]
    assert client.exists(k.drawpos) == 1  # the drawn places still poll by it
    assert one_lane.poll(late[0], event.event_id)[1]["data"]["rank"] == 1
    assert _tick(event).admitted == 3  # then the later arrivals, in arrival order
    assert active() == drawn[4:10] + late[:3]
    assert one_lane.poll(drawn[0], event.event_id)[1]["data"]["status"] == "NOT_FOUND"  # left


def test_the_start_of_a_line_people_joined_stays(scheduled, make_event, one_lane):
    plain = make_event()
    one_lane.token(plain.event_id)
    plain.opens_at = timezone.now() + timedelta(hours=1)
    with pytest.raises(events.LineStarted, match="joined the line"):
        events.event_publish(plain)  # they joined first come, first served
    event = scheduled()
    one_lane.token(event.event_id)
    event.opens_at = None
    with pytest.raises(events.LineStarted, match="start can move, not go"):
        events.event_publish(event)  # they were promised a draw
    event.opens_at = timezone.now() + timedelta(hours=2)
    events.event_publish(event)  # moving it is fine
    assert int(store.client().hget(store.event_keys(event.event_id).meta, "opensAt")) == int(
        event.opens_at.timestamp() * 1000
    )


@pytest.mark.django_db(transaction=True)
def test_a_run_waiting_for_the_start_keeps_its_claim(make_event):
    """No second run is dispatched while the first waits for a quiet start."""
    event = make_event(opens_at=timezone.now() + timedelta(seconds=30))  # the run waits for it
    services.queue_join(event_id=event.event_id)
    assert draw.dispatch(event.event_id)
    claim = store.event_keys(event.event_id).draw_claim
    runner = threading.Thread(target=draw.run, args=(event.event_id,))
    runner.start()
    store.client().pexpire(claim, 10_000)  # as if its last read were long ago
    deadline = time.monotonic() + 25
    while store.client().pttl(claim) <= 10_000:  # until renewed while it waits
        assert runner.is_alive() and time.monotonic() < deadline, "the claim was not renewed"
        time.sleep(0.01)
    assert not draw.dispatch(event.event_id)
    Event.objects.filter(pk=event.pk).update(opens_at=timezone.now() - timedelta(milliseconds=5))
    event.refresh_from_db()
    events.event_publish(event)  # the start comes: the run draws and ends
    runner.join(60)
    assert not runner.is_alive()
    assert not store.client().exists(claim)  # let go once done


# --- Signed receipts --------------------------------------------------------------


def _script(*args: str) -> subprocess.CompletedProcess:
    """docs/verify_draw.py as anyone runs it: its own process, the standard library."""
    return subprocess.run([sys.executable, str(VERIFY), *args], capture_output=True, text=True, timeout=120)


def _listing(entries: dict[bytes, int]) -> str:
    return "".join(f"{receipt.hex()} {position}\n" for receipt, position in entries.items())


def _redrawn(seed: bytes, receipts: list[bytes]) -> dict[bytes, int]:
    """A list as a service would publish it after changing it: its positions
    recomputed by the published rule, so that the list checks out on its own."""
    return dict(zip(receipts, draw.positions(seed, receipts), strict=True))


@pytest.mark.django_db(transaction=True)
def test_a_signed_receipt_refutes_a_list_that_drops_adds_or_moves_it(scheduled, production_server, tmp_path):
    """Through the production server: people of the pre-queue save their signed
    receipts, before the draw and after it; lists changed after the fact, each
    consistent with the seed on its own, are refuted by the receipt they wrong."""
    base = production_server
    event = scheduled()
    people = []
    for _ in range(24):
        joined = requests.post(f"{base}/api/queue/join", json={"eventId": event.event_id}, timeout=10)
        people.append(joined.json()["data"])

    def get(path: str, **query: str) -> requests.Response:
        answer = requests.get(f"{base}{path}", params={"eventId": event.event_id, **query}, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer

    def saved(person: dict, name: str) -> Path:
        path = tmp_path / f"{name}.json"
        signed = get("/api/queue/draw/signed-receipt", token=person["token"]).json()["data"]
        path.write_text(json.dumps(signed))
        return path

    shown = get("/api/queue/draw").json()["data"]
    public_key, commitment = shown["publicKey"], shown["commitment"]
    before = {person["receipt"]: saved(person, f"before-{i}") for i, person in enumerate(people)}
    held = json.loads(before[people[0]["receipt"]].read_text())
    assert (held["receipt"], held["commitment"]) == (people[0]["receipt"], commitment)
    assert held["publicKey"] == public_key
    assert (held["size"], held["listDigest"], held["position"]) == (None, None, None)  # not drawn yet

    start_now(event)
    assert draw.run(event.event_id).outcome == "DONE"
    after = saved(people[0], "after")
    signed = json.loads(after.read_text())
    published = get("/api/queue/draw").json()["data"]
    assert published["publicKey"] == public_key  # the key shown with the commitment signs
    assert (signed["size"], signed["listDigest"]) == (24, published["listDigest"])
    lines = get("/api/queue/draw/receipts").text.splitlines()
    honest = {bytes.fromhex(r): int(p) for r, p in (line.split() for line in lines)}
    assert signed["position"] == honest[bytes.fromhex(people[0]["receipt"])]
    seed = bytes.fromhex(published["seed"])

    def check(entries: dict[bytes, int], receipt_file: Path | None) -> subprocess.CompletedProcess:
        listing = tmp_path / "list.txt"
        listing.write_text(_listing(entries))
        args = ["--seed", seed.hex(), "--receipts", str(listing), "--commitment", commitment]
        if receipt_file is not None:
            args += ["--public-key", public_key, "--receipt-file", str(receipt_file)]
        return _script(*args)

    for receipt_file in (before[people[0]["receipt"]], before[people[1]["receipt"]], after):
        ok = check(honest, receipt_file)
        assert ok.returncode == 0 and "CONFIRMED: 24 places" in ok.stdout, ok.stdout
        mine = json.loads(receipt_file.read_text())["receipt"]
        assert f"your receipt {mine}: position {honest[bytes.fromhex(mine)]} of 24" in ok.stdout
    # Against the server itself, the key read from what the draw publishes.
    ok = _script("--url", base, "--event", event.event_id, "--receipt-file", str(after))
    assert ok.returncode == 0 and "is signed by the service's key" in ok.stdout, ok.stdout

    # Dropped: the first to join left out, the rest redrawn. The list checks out on its
    # own; the receipt its owner saved before the draw refutes it.
    first = bytes.fromhex(people[0]["receipt"])
    dropped = _redrawn(seed, [r for r in honest if r != first])
    assert check(dropped, None).returncode == 0
    refuted = check(dropped, before[first.hex()])
    assert refuted.returncode == 1, refuted.stdout
    left_out = f"the service signed receipt {first.hex()} as a place of this draw; the list leaves it out"
    assert f"REFUTED: {left_out}" in refuted.stdout
    # Added: one more place, the whole list redrawn. The receipt signed after the draw
    # names the list and the position it was drawn at.
    added = _redrawn(seed, [*honest, os.urandom(8)])
    assert check(added, None).returncode == 0
    refuted = check(added, after)
    assert refuted.returncode == 1, refuted.stdout
    assert "REFUTED: the service signed a draw of 24 places; the list has 25" in refuted.stdout
    assert "REFUTED: the list is not the one the service signed in your receipt" in refuted.stdout
    if added[first] != signed["position"]:
        assert f"REFUTED: the service signed position {signed['position']}" in refuted.stdout
    # Moved: a chosen place put first (the reshuffle of the finding); the place it
    # displaced holds a receipt from before the draw.
    displaced = next(receipt for receipt, position in honest.items() if position == 1)
    chosen = next(receipt for receipt, position in honest.items() if position == 24)
    moved = {**honest, chosen: 1, displaced: 24}
    refuted = check(moved, before[displaced.hex()])
    assert refuted.returncode == 1, refuted.stdout
    misplaced = f"the list puts receipt {displaced.hex()} at position 24; the seed draws 1"
    assert f"REFUTED: {misplaced}" in refuted.stdout

    # A receipt file that was changed proves nothing: the script says so, and refutes nothing.
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**held, "receipt": os.urandom(8).hex()}))
    unusable = check(dropped, forged)
    assert unusable.returncode == 2 and "signature is not the service's" in unusable.stdout, unusable.stdout
    listing = tmp_path / "list.txt"
    no_key = _script("--seed", seed.hex(), "--receipts", str(listing), "--receipt-file", str(after))
    assert no_key.returncode == 2 and "public key is needed" in no_key.stdout, no_key.stdout


def test_a_signed_receipt_is_for_a_place_of_the_draw_alone(make_event, scheduled, one_lane):
    def receipt_of(event_id: str, token: str) -> tuple[int, dict]:
        return one_lane.call("get", f"/api/queue/draw/signed-receipt?eventId={event_id}&token={token}")

    def code(answer: tuple[int, dict]) -> tuple[int, str]:
        return answer[0], answer[1]["error"]["code"]

    plain = make_event()
    assert code(receipt_of(plain.event_id, one_lane.token(plain.event_id))) == (404, "NO_DRAW")
    event = scheduled()
    early = one_lane.join(event.event_id)[1]["data"]
    leaver = one_lane.token(event.event_id)
    one_lane.leave(leaver, event.event_id)
    assert code(receipt_of(event.event_id, leaver)) == (404, "NOT_IN_DRAW")
    assert code(receipt_of(event.event_id, unknown_token(event.event_id))) == (404, "NOT_IN_DRAW")
    assert code(receipt_of(event.event_id, str(uuid.uuid4()))) == (403, "INVALID_TOKEN")
    assert code(receipt_of(event.event_id, "")) == (400, "MISSING_TOKEN")
    assert code(receipt_of(event.event_id, "nonsense")) == (400, "VALIDATION_ERROR")
    assert code(receipt_of(plain.event_id, early["token"])) == (403, "INVALID_TOKEN")  # another event's
    start_now(event)
    late = one_lane.token(event.event_id)  # after the start: behind the draw, not in it
    assert code(receipt_of(event.event_id, late)) == (404, "NOT_IN_DRAW")

    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(draw.public_key()))
    status, body = receipt_of(event.event_id, early["token"])  # drawing: not drawn yet
    assert status == 200 and (body["data"]["receipt"], body["data"]["position"]) == (early["receipt"], None)
    assert draw.run(event.event_id).outcome == "DONE"
    status, body = receipt_of(event.event_id, early["token"])
    signed = body["data"]
    assert status == 200 and signed["publicKey"] == draw.public_key()
    assert signed["position"] == one_lane.poll(early["token"], event.event_id)[1]["data"]["drawPosition"]
    public.verify(bytes.fromhex(signed["signature"]), draw.statement(signed))  # raises if it is not
    assert draw.statement(signed).decode() == (
        "waiting room draw receipt v1\n"
        f"eventId {event.event_id}\nreceipt {early['receipt']}\ncommitment {signed['commitment']}\n"
        f"size 2\nlistDigest {signed['listDigest']}\nposition {signed['position']}\n"
    )


def _verifier():
    """docs/verify_draw.py as a module."""
    spec = importlib.util.spec_from_file_location("verify_draw", VERIFY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scripts_signature_check_accepts_what_the_key_signed_and_nothing_else():
    """The script checks Ed25519 with Python's standard library alone (RFC 8032's
    arithmetic): it must agree with a well-kept library, both ways."""
    verify = _verifier()
    # RFC 8032, section 7.1, test 1 (the empty message).
    assert verify.ed25519_valid(
        bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"),
        b"",
        bytes.fromhex(
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd2"
            "5bf5f0595bbe24655141438e7a100b"
        ),
    )
    rng = random.Random(8032)
    for _ in range(12):
        key = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
        public = key.public_key().public_bytes_raw()
        message = rng.randbytes(rng.randrange(200))
        signature = key.sign(message)
        assert verify.ed25519_valid(public, message, signature)
        bit = rng.randrange(8 * 64)
        flipped = bytearray(signature)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert not verify.ed25519_valid(public, message, bytes(flipped))
        assert not verify.ed25519_valid(public, message + b"!", signature)
        other = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32)).public_key().public_bytes_raw()
        assert not verify.ed25519_valid(other, message, signature)
        # The same signature with S + L (which the curve's arithmetic cannot tell apart) is refused.
        twin = int.from_bytes(signature[32:], "little") + verify._L
        assert not verify.ed25519_valid(public, message, signature[:32] + twin.to_bytes(32, "little"))
