from testsupport.line import unknown_token


def test_leave_removes_a_waiting_token_and_moves_the_line_up(api, event):
    a, b, c = (api.token(event.event_id) for _ in range(3))
    status, body = api.leave(b, event.event_id)
    assert status == 200
    assert body == {"success": True, "data": {"removed": True}}
    assert api.poll(b, event.event_id)[1]["data"]["status"] == "NOT_FOUND"
    polled = api.poll(c, event.event_id)[1]["data"]
    assert (polled["rank"], polled["ahead"], polled["behind"], polled["totalWaiting"]) == (2, 1, 0, 2)
    assert api.poll(a, event.event_id)[1]["data"]["behind"] == 1


def test_leave_twice_removes_nothing_the_second_time(api, event):
    a = api.token(event.event_id)
    assert api.leave(a, event.event_id)[1]["data"]["removed"] is True
    assert api.leave(a, event.event_id)[1]["data"]["removed"] is False
    assert api.poll(api.token(event.event_id), event.event_id)[1]["data"]["totalWaiting"] == 1


def test_leave_an_unknown_token_removes_nothing(api, event, snapshot):
    api.token(event.event_id)
    before = snapshot(event.event_id)
    status, body = api.leave(unknown_token(event.event_id), event.event_id)
    assert (status, body["data"]["removed"]) == (200, False)
    assert snapshot(event.event_id) == before


def test_leave_needs_a_token(api, event):
    status, body = api.call("delete", f"/api/queue/leave?eventId={event.event_id}")
    assert status == 400
    assert body["error"]["code"] == "MISSING_TOKEN"


def test_leave_unknown_event_is_404(api, db):
    status, body = api.leave(unknown_token("no-such-event"), "no-such-event")
    assert status == 404
    assert body["error"]["code"] == "EVENT_NOT_FOUND"
