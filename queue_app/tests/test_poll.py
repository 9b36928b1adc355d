import statistics
import threading
import time
import uuid

import pytest
import redis as redis_lib
import requests

from queue_app import cadence, events, line, services
from queue_app.tests.test_admission import admit
from testsupport.booking import book
from testsupport.line import unknown_token
from testsupport.servers import server_env, start_gunicorn, stop_gunicorn
from ticketing import metrics, store

POLL_FIELDS = {
    "status",
    "rank",
    "totalWaiting",
    "ahead",
    "behind",
    "remainingSeats",
    "nextPollMs",
    "activeExpiresAt",
}


def test_poll_while_waiting(api, make_event):
    event = make_event(total_seats=87)
    tokens = [api.token(event.event_id) for _ in range(4)]
    status, body = api.poll(tokens[1], event.event_id)
    assert status == 200
    data = body["data"]
    assert POLL_FIELDS <= data.keys()
    assert data["status"] == "WAITING"
    assert (data["rank"], data["ahead"], data["behind"], data["totalWaiting"]) == (2, 1, 2, 4)
    assert data["remainingSeats"] == 87
    assert data["activeExpiresAt"] is None
    assert 800 <= data["nextPollMs"] <= 1200
    assert data["soldOut"] is False
    assert data["reservationStatus"] is None


def test_poll_unknown_token_is_not_found(api, event):
    api.token(event.event_id)
    data = api.poll(unknown_token(event.event_id), event.event_id)[1]["data"]
    assert data["status"] == "NOT_FOUND"
    assert (data["rank"], data["ahead"], data["behind"], data["activeExpiresAt"]) == (None,) * 4
    assert data["nextPollMs"] == 0
    assert data["totalWaiting"] == 1


def test_poll_booked_token_shows_its_reservation(api, event, rc):
    token = api.token(event.event_id)
    admit(event.event_id)
    rc.set(store.EventKeys(event.event_id).booked(token), "res-42")
    data = api.poll(token, event.event_id)[1]["data"]
    assert data["status"] == "BOOKED"
    assert data["reservationId"] == "res-42"
    assert data["reservationStatus"] is None  # no reservation has that id
    assert data["nextPollMs"] == 0
    assert data["rank"] is None


@pytest.mark.django_db(transaction=True)  # the fast lane reads Postgres on a thread of its own
def test_poll_of_a_free_events_booking_says_it_is_confirmed(api, event):
    token = api.token(event.event_id)
    admit(event.event_id)
    assert api.poll(token, event.event_id)[1]["data"]["reservationStatus"] is None  # ACTIVE
    status, body = book(api, token, event.event_id, 2)
    assert status == 200, body
    data = api.poll(token, event.event_id)[1]["data"]
    assert (data["status"], data["reservationId"]) == ("BOOKED", body["data"]["reservationId"])
    assert data["reservationStatus"] == "CONFIRMED"


def test_with_postgres_away_a_booked_poll_answers_without_the_status(event, rc, tmp_path):
    """Redis knows the booking; Postgres cannot be asked its status. The poll answers
    at once on the fast lane (it waits a second at most), and on Django's lane behind
    it (JSON with an indent is Django's to write) once the database gives up; both
    log why the status is missing."""
    token = services.queue_join(event_id=event.event_id).token
    admit(event.event_id)
    rid = str(uuid.uuid4())
    rc.set(store.EventKeys(event.event_id).booked(token), rid)
    log = tmp_path / "server.log"
    with log.open("wb") as stderr:
        env = server_env(DATABASE_URL="postgres://postgres@127.0.0.1:1/nowhere")
        base, proc = start_gunicorn(env, stderr=stderr)
    try:
        url = f"{base}/api/status/poll?token={token}&eventId={event.event_id}"
        for accept, within in (("application/json", 3), ("application/json; indent=2", 30)):
            started = time.monotonic()
            response = requests.get(url, headers={"Accept": accept}, timeout=60)
            assert response.status_code == 200, response.text
            assert time.monotonic() - started < within
            data = response.json()["data"]
            assert (data["status"], data["reservationId"], data["reservationStatus"]) == ("BOOKED", rid, None)
        assert response.text.startswith('{\n  "success"')  # (Django's lane wrote it)
    finally:
        stop_gunicorn(proc)
    said = [entry for entry in log.read_text().splitlines() if f"reservation {rid}" in entry]
    assert len(said) >= 2 and all("WARNING queue_app.services" in entry for entry in said), said


def test_poll_closed_event_answers_expired(api, event):
    token = api.token(event.event_id)
    event.status = "CLOSED"
    events.event_publish(event)
    data = api.poll(token, event.event_id)[1]["data"]
    assert data["status"] == "EXPIRED"
    assert data["nextPollMs"] == 0
    assert data["eventStatus"] == "CLOSED"


def test_poll_unknown_event_is_404(api, db):
    status, body = api.poll(unknown_token("no-such-event"), "no-such-event")
    assert status == 404
    assert body["error"]["code"] == "EVENT_NOT_FOUND"


def test_poll_needs_a_valid_token(api, event):
    assert (
        api.call("get", f"/api/status/poll?eventId={event.event_id}")[1]["error"]["code"] == "MISSING_TOKEN"
    )
    assert api.poll("not-a-uuid", event.event_id)[1]["error"]["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    ("status", "rank", "base"),
    [
        ("WAITING", 100_001, 10_000),
        ("WAITING", 100_000, 5_000),
        ("WAITING", 10_001, 5_000),
        ("WAITING", 10_000, 3_000),
        ("WAITING", 1_001, 3_000),
        ("WAITING", 1_000, 2_000),
        ("WAITING", 101, 2_000),
        ("WAITING", 100, 1_000),
        ("WAITING", 1, 1_000),
        ("ACTIVE", None, 2_000),
        ("EXPIRED", None, 0),
        ("NOT_FOUND", None, 0),
        ("BOOKED", None, 0),
    ],
)
def test_next_poll_follows_the_seed_table_with_jitter(status, rank, base):
    samples = [cadence.next_poll_ms(status, rank) for _ in range(400)]
    assert all(base * 0.8 <= s <= base * 1.2 for s in samples)
    if base:
        assert len(set(samples)) > 50  # really jittered, not a constant
        assert abs(statistics.median(samples) - base) < base * 0.05


def _server_of(redis_url: str, event_id: str) -> str:
    """The server holding the event: REDIS_URL's, or on a cluster its node (MONITOR
    sees one server's commands)."""
    c = store.client()
    if not isinstance(c, redis_lib.cluster.RedisCluster):
        return redis_url
    node = c.get_node_from_key(store.event_keys(event_id).meta)
    return f"redis://{node.host}:{node.port}/0"


def _commands_received(redis_url: str, action) -> list[dict]:
    """What the Redis server receives while `action` runs, seen through MONITOR."""
    seen: list[dict] = []
    marker = f"end-{uuid.uuid4()}"
    ready = threading.Event()

    def watch() -> None:
        with redis_lib.Redis.from_url(redis_url).monitor() as m:
            ready.set()
            for cmd in m.listen():
                if marker in cmd["command"]:
                    return
                seen.append(cmd)

    watcher = threading.Thread(target=watch)
    watcher.start()
    ready.wait(5)
    closer = redis_lib.Redis.from_url(redis_url)
    closer.ping()  # connected before the action, so its hand-shake is not counted
    seen.clear()
    action()
    closer.echo(marker)
    watcher.join(10)
    db = redis_lib.Redis.from_url(redis_url).connection_pool.connection_kwargs.get("db", 0)
    return [c for c in seen if c.get("client_type") != "lua" and c["command"] != "PING" and c.get("db") == db]


def _polls_commands(redis_url: str, action) -> list[str]:
    """The commands `action`'s polls send, by name. Each process also adds its requests'
    latencies to the metrics once a second, and a connection that opens meanwhile says
    HELLO (and SELECT, on a database other than 0): neither is a poll's."""
    return [
        c["command"].split()[0].upper()
        for c in _commands_received(redis_url, action)
        if metrics.SHARED_KEY not in c["command"] and not c["command"].upper().startswith(("HELLO", "SELECT"))
    ]


def test_polls_of_waiting_people_send_redis_nothing(
    api, event, redis_url, settings, django_assert_num_queries
):
    """Within one refresh of the process's copy of the line (queue_app/line.py), a
    thousand polls of waiting people send Redis no command and Postgres no query;
    the refresh itself is one round trip, and so is the poll of an admitted person
    (and no query)."""
    settings.QUEUE_LINE_REFRESH_MS = 60_000
    redis_url = _server_of(redis_url, event.event_id)
    waiting = [api.token(event.event_id) for _ in range(5)]
    line.forget()
    api.poll(waiting[0], event.event_id)  # warm: the copy is read, scripts are loaded

    def polls() -> None:
        with django_assert_num_queries(0):
            for i in range(1000):
                status, body = api.poll(waiting[i % 5], event.event_id)
                assert (status, body["data"]["rank"]) == (200, i % 5 + 1)

    sent = _polls_commands(redis_url, polls)
    assert sent == [], sent
    line.forget()
    commands = _polls_commands(redis_url, lambda: api.poll(waiting[0], event.event_id))
    assert commands == ["EVALSHA"], commands  # the refresh

    admit(event.event_id)
    line.forget()  # (or wait for the refresh)
    api.poll(waiting[0], event.event_id)
    with django_assert_num_queries(0):  # only a BOOKED poll asks Postgres (its reservation's status)
        commands = _polls_commands(redis_url, lambda: api.poll(waiting[0], event.event_id))
    assert commands == ["EVALSHA"], commands  # lua/poll.lua


def test_a_join_answers_its_first_poll_with_no_redis_command_of_its_own(api, event, redis_url, settings):
    """An arrival is one request: the join's answer carries the place's first poll,
    answered from the process's copy of the line even though the copy was read
    before the place existed; the join sends Redis its script, and nothing for the
    poll."""
    settings.QUEUE_LINE_REFRESH_MS = 60_000
    redis_url = _server_of(redis_url, event.event_id)
    ahead = [api.token(event.event_id) for _ in range(3)]
    api.leave(ahead[1], event.event_id)
    line.forget()
    api.poll(ahead[0], event.event_id)  # warm: the copy is read, scripts are loaded
    services.queue_join_many(event_id=event.event_id, count=4)  # places the copy has not seen
    answers = []
    sent = _polls_commands(redis_url, lambda: answers.extend(api.join(event.event_id) for _ in range(5)))
    assert sent == ["EVALSHA"] * 5, sent  # the join's script, and no more
    for n, (status, body) in enumerate(answers, start=1):
        first = body["data"]["position"]
        assert status == 200 and first["status"] == "WAITING"
        shown = (first["rank"], first["totalWaiting"], first["ahead"], first["behind"])
        assert shown == (6 + n, 6 + n, 5 + n, 0)
        assert first["nextPollMs"] > 0 and first["eventStatus"] == "OPEN" and first["remainingSeats"] > 0
    line.forget()
    token = answers[0][1]["data"]["token"]
    polled = api.poll(token, event.event_id)[1]["data"]
    later = {"nextPollMs": 0, "behind": 0, "totalWaiting": 0}  # (four joined behind it since)
    assert {**answers[0][1]["data"]["position"], **later} == {**polled, **later}
