from testsupport.line import unknown_token
from ticketing import store


def test_rejoin_keeps_the_place(api, event):
    first = api.token(event.event_id)
    mine = api.token(event.event_id)
    api.token(event.event_id)
    for _ in range(3):  # F5, F5, F5
        status, body = api.rejoin(mine, event.event_id)
        assert status == 200
        assert body["data"].pop("position")["rank"] == 2  # its first poll
        assert body["data"] == {
            "token": mine,
            "eventId": event.event_id,
            "joinedAt": None,
            "rejoined": True,
            "status": "WAITING",
            "receipt": None,
        }
    assert api.poll(mine, event.event_id)[1]["data"]["rank"] == 2
    assert api.poll(first, event.event_id)[1]["data"]["totalWaiting"] == 3


def test_rejoin_with_an_unknown_token_goes_to_the_back(api, event):
    api.token(event.event_id)
    stranger = unknown_token(event.event_id)
    status, body = api.rejoin(stranger, event.event_id)
    assert status == 200
    assert body["data"]["rejoined"] is False
    assert body["data"]["status"] == "WAITING"
    assert isinstance(body["data"]["joinedAt"], int)
    assert body["data"]["token"] != stranger  # a new place is a new token
    assert api.poll(body["data"]["token"], event.event_id)[1]["data"]["rank"] == 2
    assert api.poll(stranger, event.event_id)[1]["data"]["status"] == "NOT_FOUND"


def test_rejoin_after_leaving_goes_to_the_back(api, event):
    mine = api.token(event.event_id)
    other = api.token(event.event_id)
    assert api.leave(mine, event.event_id)[1]["data"]["removed"] is True
    status, body = api.rejoin(mine, event.event_id)
    assert body["data"]["rejoined"] is False
    assert api.poll(other, event.event_id)[1]["data"]["rank"] == 1
    assert api.poll(body["data"]["token"], event.event_id)[1]["data"]["rank"] == 2
    assert api.poll(mine, event.event_id)[1]["data"]["status"] == "NOT_FOUND"


def test_rejoin_normalises_the_token_spelling(api, event):
    mine = api.token(event.event_id)
    status, body = api.rejoin(mine.upper(), event.event_id)
    assert body["data"]["token"] == mine
    assert body["data"]["rejoined"] is True


def test_rejoin_after_booking_is_409_with_the_reservation(api, event, rc):
    mine = api.token(event.event_id)
    rc.set(store.EventKeys(event.event_id).booked(mine), "res-1")
    status, body = api.rejoin(mine, event.event_id)
    assert status == 409
    assert body["error"]["code"] == "ALREADY_BOOKED"
    assert body["error"]["reservationId"] == "res-1"


def test_rejoin_a_closed_event_is_403(api, make_event):
    event = make_event()
    mine = api.token(event.event_id)
    event.status = "CLOSED"
    from queue_app import events

    events.event_publish(event)
    status, body = api.rejoin(mine, event.event_id)
    assert status == 403
    assert body["error"]["code"] == "EVENT_CLOSED"


def test_rejoin_needs_a_token(api, event):
    status, body = api.call("post", "/api/queue/rejoin", {"eventId": event.event_id})
    assert status == 400
    assert body["error"]["code"] == "MISSING_TOKEN"
