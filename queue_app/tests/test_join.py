import time
import uuid

from ticketing import store


def test_join_gives_a_fresh_token_and_a_place(api, event):
    before = int(time.time() * 1000)
    status, body = api.join(event.event_id)
    assert status == 200
    assert body["success"] is True
    data = body["data"]
    assert uuid.UUID(data["token"]).version == 8  # signed, carrying its number (test_tokens)
    assert data["eventId"] == event.event_id
    assert before - 1000 <= data["joinedAt"] <= int(time.time() * 1000) + 1000

    status, polled = api.poll(data["token"], event.event_id)
    assert polled["data"]["status"] == "WAITING"
    assert polled["data"]["rank"] == 1


def test_join_without_event_uses_the_default_event(api, make_event, settings):
    default = make_event()
    settings.EVENT_ID = default.event_id
    status, body = api.call("post", "/api/queue/join", {})
    assert status == 200
    assert body["data"]["eventId"] == default.event_id


def test_join_with_an_empty_body_uses_the_default_event(api, make_event, settings):
    default = make_event()
    settings.EVENT_ID = default.event_id
    resp = api.client.generic("POST", "/api/queue/join")  # like `curl -X POST`
    assert resp.status_code == 200
    assert resp.json()["data"]["eventId"] == default.event_id


def test_every_join_is_a_new_person_at_the_back(api, event):
    tokens = [api.token(event.event_id) for _ in range(5)]
    assert len(set(tokens)) == 5
    ranks = [api.poll(t, event.event_id)[1]["data"]["rank"] for t in tokens]
    assert ranks == [1, 2, 3, 4, 5]


def test_join_unknown_event_is_404(api, db, snapshot):
    status, body = api.join("no-such-event")
    assert status == 404
    assert body == {
        "success": False,
        "error": {"code": "EVENT_NOT_FOUND", "message": "No such event."},
    }
    assert snapshot("no-such-event") == {}


def test_join_closed_event_is_403(api, make_event, snapshot):
    event = make_event(status="CLOSED")
    before = snapshot(event.event_id)
    status, body = api.join(event.event_id)
    assert status == 403
    assert body["error"]["code"] == "EVENT_CLOSED"
    assert snapshot(event.event_id) == before


def test_join_paused_event_is_accepted(api, make_event):
    event = make_event(status="PAUSED")
    status, body = api.join(event.event_id)
    assert status == 200
    assert api.poll(body["data"]["token"], event.event_id)[1]["data"]["status"] == "WAITING"


def test_a_place_costs_nothing_in_redis(api, event, rc):
    """The line is counters: joining moves `seq`, and no key is written for the
    person; the token carries their place."""
    k = store.EventKeys(event.event_id)
    before = {name: rc.type(name) for name in store.scan(k.pattern())}
    joined = [api.token(event.event_id) for _ in range(50)]
    after = {name: rc.type(name) for name in store.scan(k.pattern())}
    # The arrival counter, and 2 random bytes a person (lua/lib/line.lua).
    assert after == {**before, k.seq.encode(): b"string", k.nonces.encode(): b"string"}
    assert int(rc.get(k.seq)) == 50 and rc.strlen(k.nonces) == 2 * 50
    assert api.poll(joined[-1], event.event_id)[1]["data"]["rank"] == 50
