"""An event's mode (docs/modes.md): how a new arrival is let in, and that a switch
during a sale keeps every place."""

import io
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.core.management import call_command

from queue_app import admission, events
from queue_app.models import Event
from queue_app.tokens import issued, parse_token
from ticketing import store


def _switch(event: Event, mode: str, **fields: object) -> None:
    event.mode = mode
    for name, value in fields.items():
        setattr(event, name, value)
    event.save()
    events.event_publish(event)


def _next_second(event_id: str) -> None:
    """Make the next tick due now: the last one ran a second ago."""
    store.client().set(store.EventKeys(event_id).tick, int(store.client().time()[0]) - 1)


def test_a_join_on_an_empty_safety_net_event_is_active_on_its_first_poll(lanes_api, make_event):
    event = make_event(mode=Event.Mode.SAFETY_NET)
    status, body = lanes_api.join(event.event_id)
    assert status == 200
    assert body["data"]["status"] == "ACTIVE"
    first = body["data"]["position"]  # the join's answer carries its first poll
    assert first["status"] == "ACTIVE" and first["activeExpiresAt"] is not None
    _, polled = lanes_api.poll(body["data"]["token"], event.event_id)
    assert polled["data"]["status"] == "ACTIVE"
    assert polled["data"]["activeExpiresAt"] == first["activeExpiresAt"]
    assert events.event_live_numbers(event.event_id)["active"] == 1


def test_a_queue_event_keeps_every_join_waiting_for_the_tick(lanes_api, event):
    status, body = lanes_api.join(event.event_id)
    assert (status, body["data"]["status"]) == (200, "WAITING")
    _, polled = lanes_api.poll(body["data"]["token"], event.event_id)
    assert polled["data"]["status"] == "WAITING"


def test_safety_net_lets_people_in_while_there_is_room_then_forms_a_line(api, make_event):
    event = make_event(mode=Event.Mode.SAFETY_NET, max_active_users=3, admit_per_second=100)
    statuses = [api.join(event.event_id)[1]["data"]["status"] for _ in range(5)]
    # The cap is reached at three: the fourth waits, and so does the fifth, behind it.
    assert statuses == ["ACTIVE", "ACTIVE", "ACTIVE", "WAITING", "WAITING"]


def test_safety_net_admits_no_more_in_a_second_than_the_rate(api, make_event):
    event = make_event(mode=Event.Mode.SAFETY_NET, admit_per_second=2)
    statuses = [api.join(event.event_id)[1]["data"]["status"] for _ in range(4)]
    assert statuses == ["ACTIVE", "ACTIVE", "WAITING", "WAITING"]


def test_nobody_who_joins_a_safety_net_line_passes_someone_waiting(api, make_event):
    event = make_event(mode=Event.Mode.SAFETY_NET, max_active_users=1)
    first = api.join(event.event_id)[1]["data"]
    waiting = api.join(event.event_id)[1]["data"]
    assert (first["status"], waiting["status"]) == ("ACTIVE", "WAITING")
    # The active person books or leaves the window: there is room again, but the
    # person waiting is ahead of any newcomer.
    store.client().set(store.EventKeys(event.event_id).active, 0)
    newcomer = api.join(event.event_id)[1]["data"]
    assert newcomer["status"] == "WAITING"
    _, polled = api.poll(newcomer["token"], event.event_id)
    assert polled["data"]["rank"] == 2


def test_safety_net_waits_while_paused_sold_out_or_before_the_draw(api, make_event):
    paused = make_event(mode=Event.Mode.SAFETY_NET, status=Event.Status.PAUSED)
    assert api.join(paused.event_id)[1]["data"]["status"] == "WAITING"
    sold_out = make_event(mode=Event.Mode.SAFETY_NET, total_seats=0)
    assert api.join(sold_out.event_id)[1]["data"]["status"] == "WAITING"


def test_a_burst_on_a_safety_net_event_is_admitted_in_arrival_order(production_server, make_event):
    """200 concurrent arrivals on the production server: those let straight in are
    the first arrivals, and the ticks after them go on in order; nobody who joined
    later is admitted before someone who joined earlier."""
    event = make_event(mode=Event.Mode.SAFETY_NET, max_active_users=40, admit_per_second=25, total_seats=1000)

    def join(_: int) -> dict:
        resp = requests.post(
            f"{production_server}/api/queue/join", json={"eventId": event.event_id}, timeout=30
        )
        assert resp.status_code == 200, resp.text
        return resp.json()["data"]

    with ThreadPoolExecutor(max_workers=50) as pool:
        joined = list(pool.map(join, range(200)))
    by_number = sorted(joined, key=lambda j: issued(event.event_id, parse_token(j["token"])))
    admitted_at_once = [j["status"] == "ACTIVE" for j in by_number]
    assert 0 < sum(admitted_at_once) <= 40
    # Admitted at once: a prefix of the arrival order.
    assert admitted_at_once == sorted(admitted_at_once, reverse=True)
    k = store.EventKeys(event.event_id)
    assert int(store.client().get(k.popped)) == sum(admitted_at_once)

    # Room again (the active people booked, say): each tick admits the next ones in order.
    for _ in range(3):
        store.client().set(k.active, 0)
        _next_second(event.event_id)
        admission.event_admit(event.event_id)

    def status(j: dict) -> str:
        resp = requests.get(
            f"{production_server}/api/status/poll",
            params={"token": j["token"], "eventId": event.event_id},
            timeout=30,
        )
        return resp.json()["data"]["status"]

    states = [status(j) == "ACTIVE" for j in by_number]
    assert sum(states) > sum(admitted_at_once)
    assert states == sorted(states, reverse=True)


def test_pass_through_admits_the_whole_line_in_order_with_the_newcomer(api, event):
    waiting = [api.token(event.event_id) for _ in range(5)]
    api.leave(waiting[2], event.event_id)
    _switch(event, Event.Mode.PASS_THROUGH)
    newcomer = api.join(event.event_id)[1]["data"]
    assert newcomer["status"] == "ACTIVE"
    polled = [api.poll(t, event.event_id)[1]["data"]["status"] for t in [*waiting, newcomer["token"]]]
    assert polled == ["ACTIVE", "ACTIVE", "NOT_FOUND", "ACTIVE", "ACTIVE", "ACTIVE"]
    live = events.event_live_numbers(event.event_id)
    assert (live["active"], live["waiting"]) == (5, 0)


def test_pass_through_is_not_held_back_by_the_cap(api, make_event):
    event = make_event(mode=Event.Mode.PASS_THROUGH, max_active_users=1)
    assert [api.join(event.event_id)[1]["data"]["status"] for _ in range(3)] == ["ACTIVE"] * 3


def test_a_tick_on_a_pass_through_event_admits_everyone_waiting(api, make_event):
    event = make_event(status=Event.Status.PAUSED, admit_per_second=1, max_active_users=1)
    tokens = [api.token(event.event_id) for _ in range(4)]
    _switch(event, Event.Mode.PASS_THROUGH, status=Event.Status.OPEN)
    tick = admission.event_admit(event.event_id)
    assert (tick.outcome, tick.admitted) == ("ADMITTED", 4)
    assert {api.poll(t, event.event_id)[1]["data"]["status"] for t in tokens} == {"ACTIVE"}


def test_reject_refuses_new_places_and_keeps_the_line(lanes_api, event):
    tokens = [lanes_api.token(event.event_id) for _ in range(3)]
    _switch(event, Event.Mode.REJECT)
    k = store.EventKeys(event.event_id)
    seq = store.client().get(k.seq)
    status, body = lanes_api.join(event.event_id)
    assert status == 403
    assert body["error"]["code"] == "EVENT_REJECTING"
    assert store.client().get(k.seq) == seq  # nothing issued
    # People already in line keep their places, on a rejoin (F5) too, and are admitted.
    status, kept = lanes_api.rejoin(tokens[1], event.event_id)
    assert (status, kept["data"]["rejoined"], kept["data"]["token"]) == (200, True, tokens[1])
    assert [lanes_api.poll(t, event.event_id)[1]["data"]["rank"] for t in tokens] == [1, 2, 3]
    tick = admission.event_admit(event.event_id)
    assert tick.admitted == 3


def test_switching_modes_during_a_sale_keeps_every_place(api, event):
    tokens = [api.token(event.event_id) for _ in range(6)]
    for mode in (Event.Mode.SAFETY_NET, Event.Mode.REJECT, Event.Mode.QUEUE, Event.Mode.SAFETY_NET):
        _switch(event, mode)
        assert [api.poll(t, event.event_id)[1]["data"]["rank"] for t in tokens] == [1, 2, 3, 4, 5, 6]
    # In safety-net with people waiting, a newcomer goes behind them.
    newcomer = api.join(event.event_id)[1]["data"]
    assert newcomer["status"] == "WAITING"
    assert api.poll(newcomer["token"], event.event_id)[1]["data"]["rank"] == 7


def test_init_event_and_event_status_set_the_mode(make_event, api):
    event = make_event()
    out = io.StringIO()
    call_command("init_event", event.event_id, "--mode", "safety-net", stdout=out)
    assert "mode safety-net" in out.getvalue()
    assert api.join(event.event_id)[1]["data"]["status"] == "ACTIVE"
    out = io.StringIO()
    call_command("event_status", event.event_id, "--mode", "reject", stdout=out)
    assert out.getvalue().strip() == f"Event {event.event_id} is OPEN, mode reject."
    assert api.join(event.event_id)[1]["error"]["code"] == "EVENT_REJECTING"
    call_command("event_status", event.event_id, "PAUSED", "--mode", "queue", stdout=io.StringIO())
    event.refresh_from_db()
    assert (event.status, event.mode) == ("PAUSED", "queue")


def test_event_status_needs_a_status_or_a_mode(make_event):
    from django.core.management.base import CommandError

    event = make_event()
    with pytest.raises(CommandError, match="Name a status"):
        call_command("event_status", event.event_id)
    with pytest.raises(CommandError):
        call_command("event_status", event.event_id, "--mode", "everyone")


def test_the_admin_list_switches_the_mode_live(client, make_event, api):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw-for-tests"))
    event = make_event()
    waiting = api.token(event.event_id)
    resp = client.post("/admin/queue_app/event/", {"action": "mode_reject", "_selected_action": [event.pk]})
    assert resp.status_code == 302
    event.refresh_from_db()
    assert event.mode == "reject"
    assert api.join(event.event_id)[1]["error"]["code"] == "EVENT_REJECTING"
    assert api.poll(waiting, event.event_id)[1]["data"]["rank"] == 1
    for action, mode in (
        ("mode_safety_net", "safety-net"),
        ("mode_pass_through", "pass-through"),
        ("mode_queue", "queue"),
    ):
        client.post("/admin/queue_app/event/", {"action": action, "_selected_action": [event.pk]})
        event.refresh_from_db()
        assert event.mode == mode
        assert store.client().hget(store.EventKeys(event.event_id).meta, "mode").decode() == mode


def test_reject_says_the_operators_message(lanes_api, event):
    from queue_app import crowd_messages

    crowd_messages.event_message_post(
        event_id=event.event_id, text_ko="점검 중입니다", text_en="Back at 10:30"
    )
    _switch(event, Event.Mode.REJECT)
    status, body = lanes_api.join(event.event_id)
    assert status == 403
    error = body["error"]
    assert (error["code"], error["message"]) == ("EVENT_REJECTING", "Back at 10:30")
    assert (error["crowdMessage"]["ko"], error["crowdMessage"]["en"]) == ("점검 중입니다", "Back at 10:30")
