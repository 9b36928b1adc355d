"""The claim time (docs/modes.md): an admitted person who does not come back within
it loses the turn, and the slot goes to the next person at the next tick."""

import time
import uuid

from booking_app import services as booking
from queue_app import admission, events
from queue_app.models import Event
from queue_app.tokens import parse_token
from ticketing import store
from ticketing.errors import DomainError


def _tick(event_id: str) -> admission.Tick:
    """A tick now: the last one ran a second ago."""
    store.client().set(store.EventKeys(event_id).tick, int(store.client().time()[0]) - 1)
    return admission.event_admit(event_id)


def _claim_time_passes(event_id: str) -> None:
    """Every admission's claim time ends now (as if claimSeconds had gone by)."""
    k = store.EventKeys(event_id)
    for to in store.client().hkeys(k.claims):
        if to != b"upto" and b":" not in store.client().hget(k.claims, to):
            store.client().hset(k.claims, to, store.now_ms(event_id) - 1)


def _claiming_event(make_event, **fields) -> Event:
    fields = {"claim_seconds": 20, "max_active_users": 1, "admit_per_second": 1, **fields}
    return make_event(**fields)


def test_a_person_who_never_comes_back_frees_the_slot_at_the_next_tick(lanes_api, make_event):
    """Real time: a claim time of one second, and a cap of one person at a time."""
    event = _claiming_event(make_event, claim_seconds=1)
    away, next_one = (lanes_api.token(event.event_id) for _ in range(2))
    assert _tick(event.event_id).admitted == 1  # `away` is admitted, and never polls
    assert _tick(event.event_id).outcome == "FULL"
    time.sleep(1.1)
    tick = _tick(event.event_id)
    assert (tick.outcome, tick.admitted) == ("ADMITTED", 1)  # next_one, in away's slot
    assert lanes_api.poll(next_one, event.event_id)[1]["data"]["status"] == "ACTIVE"
    polled = lanes_api.poll(away, event.event_id)[1]["data"]
    assert polled["status"] == "UNCLAIMED"
    assert polled["nextPollMs"] == 0


def test_a_person_who_comes_back_in_time_keeps_the_turn(lanes_api, make_event):
    event = _claiming_event(make_event)
    back, behind = (lanes_api.token(event.event_id) for _ in range(2))
    _tick(event.event_id)
    assert lanes_api.poll(back, event.event_id)[1]["data"]["status"] == "ACTIVE"  # the claim
    _claim_time_passes(event.event_id)
    assert _tick(event.event_id).outcome == "FULL"  # the slot is still theirs
    assert lanes_api.poll(back, event.event_id)[1]["data"]["status"] == "ACTIVE"
    assert lanes_api.poll(behind, event.event_id)[1]["data"]["status"] == "WAITING"


def test_an_unclaimed_turn_cannot_book_and_rejoins_at_the_back(api, make_event):
    event = _claiming_event(make_event, max_active_users=0, admit_per_second=2)
    away, waiting = (api.token(event.event_id) for _ in range(2))
    third = api.token(event.event_id)
    _tick(event.event_id)  # away and waiting are admitted
    api.poll(waiting, event.event_id)
    _claim_time_passes(event.event_id)
    _tick(event.event_id)
    try:
        booking.booking_reserve(event_id=event.event_id, token=parse_token(away), seat_count=1)
    except DomainError as refusal:
        assert refusal.code == "NOT_ACTIVE"
    else:
        raise AssertionError("an unclaimed turn booked")
    status, body = api.rejoin(away, event.event_id)
    assert status == 200
    assert body["data"]["rejoined"] is False  # a new token, at the back
    assert body["data"]["token"] != away
    # Behind `third`, whom the last tick admitted.
    assert api.poll(third, event.event_id)[1]["data"]["status"] == "ACTIVE"
    _, polled = api.poll(body["data"]["token"], event.event_id)
    assert (polled["data"]["status"], polled["data"]["rank"]) == ("WAITING", 1)


def test_booking_in_time_is_coming_back(make_event, api):
    event = _claiming_event(make_event)
    token = api.token(event.event_id)
    _tick(event.event_id)
    booked = booking.booking_reserve(event_id=event.event_id, token=parse_token(token), seat_count=1)
    assert booked.reservation_id
    _claim_time_passes(event.event_id)
    _tick(event.event_id)
    # Booked, claimed: counted once (booked), not again as unclaimed.
    assert events.event_live_numbers(event.event_id)["active"] == 0
    k = store.EventKeys(event.event_id)
    assert store.client().hget(k.claims, b"1").endswith(b":0")


def test_a_rejoin_in_time_is_coming_back(api, make_event):
    event = _claiming_event(make_event)
    token = api.token(event.event_id)
    _tick(event.event_id)
    status, body = api.rejoin(token, event.event_id)  # F5 on the waiting room
    assert (status, body["data"]["status"], body["data"]["rejoined"]) == (200, "ACTIVE", True)
    _claim_time_passes(event.event_id)
    _tick(event.event_id)
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "ACTIVE"


def test_the_unclaimed_are_counted_once_and_leave_the_count_when_their_window_ends(api, make_event):
    event = _claiming_event(make_event, max_active_users=0, admit_per_second=3)
    tokens = [api.token(event.event_id) for _ in range(3)]
    _tick(event.event_id)
    api.poll(tokens[0], event.event_id)
    _claim_time_passes(event.event_id)
    _tick(event.event_id)
    assert events.event_live_numbers(event.event_id)["active"] == 1
    _tick(event.event_id)  # counted already: not taken off again
    assert events.event_live_numbers(event.event_id)["active"] == 1
    # The window ends: the one who came back leaves the count, the others are not
    # taken off a second time.
    k = store.EventKeys(event.event_id)
    (entry,) = store.client().zrange(k.windows, 0, -1)
    to, start, _, admitted = entry.split(b":")
    store.client().zrem(k.windows, entry)
    store.client().zadd(k.windows, {b":".join([to, start, b"1", admitted]): int(to)})
    _tick(event.event_id)
    assert events.event_live_numbers(event.event_id)["active"] == 0
    assert store.client().hget(k.claims, to) is None


def test_a_safety_net_arrival_has_come_back_already(api, make_event):
    event = _claiming_event(make_event, mode=Event.Mode.SAFETY_NET, max_active_users=5, admit_per_second=5)
    token = api.join(event.event_id)[1]["data"]["token"]
    _claim_time_passes(event.event_id)
    _tick(event.event_id)
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "ACTIVE"


def test_pass_through_admits_the_line_who_must_come_back(api, make_event):
    event = _claiming_event(make_event, status=Event.Status.PAUSED)
    waiting = [api.token(event.event_id) for _ in range(3)]
    event.mode, event.status = Event.Mode.PASS_THROUGH, Event.Status.OPEN
    event.save()
    events.event_publish(event)
    newcomer = api.join(event.event_id)[1]["data"]["token"]
    api.poll(waiting[0], event.event_id)
    _claim_time_passes(event.event_id)
    _tick(event.event_id)
    states = [api.poll(t, event.event_id)[1]["data"]["status"] for t in [*waiting, newcomer]]
    assert states == ["ACTIVE", "UNCLAIMED", "UNCLAIMED", "ACTIVE"]
    assert events.event_live_numbers(event.event_id)["active"] == 2


def test_without_a_claim_time_nobody_is_counted_away(api, make_event):
    event = make_event(admit_per_second=2)
    tokens = [api.token(event.event_id) for _ in range(2)]
    _tick(event.event_id)
    assert not store.client().exists(store.EventKeys(event.event_id).claims)
    assert {api.poll(t, event.event_id)[1]["data"]["status"] for t in tokens} == {"ACTIVE"}
    assert uuid.UUID(tokens[0])


def test_with_a_grace_a_late_person_takes_the_turn_again_while_there_is_room(lanes_api, make_event):
    event = _claiming_event(make_event, claim_grace=True, max_active_users=2, admit_per_second=1)
    late, other, third = (lanes_api.token(event.event_id) for _ in range(3))
    _tick(event.event_id)  # late is admitted, and away
    _claim_time_passes(event.event_id)
    _tick(event.event_id)  # late counted away; other admitted in the slot
    assert events.event_live_numbers(event.event_id)["active"] == 1
    # Back while the window lasts, and the cap (2) has room: the turn is theirs again.
    assert lanes_api.poll(late, event.event_id)[1]["data"]["status"] == "ACTIVE"
    assert events.event_live_numbers(event.event_id)["active"] == 2
    assert _tick(event.event_id).outcome == "FULL"  # third waits: the cap is full again
    assert lanes_api.poll(third, event.event_id)[1]["data"]["status"] == "WAITING"
    booked = booking.booking_reserve(event_id=event.event_id, token=parse_token(late), seat_count=1)
    assert booked.reservation_id
    assert lanes_api.poll(other, event.event_id)[1]["data"]["status"] == "ACTIVE"


def test_with_a_grace_a_late_person_finds_no_room_when_the_cap_is_full(api, make_event):
    event = _claiming_event(make_event, claim_grace=True, max_active_users=1)
    late, other = (api.token(event.event_id) for _ in range(2))
    _tick(event.event_id)
    _claim_time_passes(event.event_id)
    _tick(event.event_id)  # other takes the slot
    assert api.poll(other, event.event_id)[1]["data"]["status"] == "ACTIVE"
    assert api.poll(late, event.event_id)[1]["data"]["status"] == "UNCLAIMED"
    assert events.event_live_numbers(event.event_id)["active"] == 1


def test_a_grace_taken_is_counted_once_when_the_window_ends(api, make_event):
    event = _claiming_event(make_event, claim_grace=True, max_active_users=0, admit_per_second=2)
    late, away = (api.token(event.event_id) for _ in range(2))
    _tick(event.event_id)
    _claim_time_passes(event.event_id)
    _tick(event.event_id)
    assert events.event_live_numbers(event.event_id)["active"] == 0
    assert api.poll(late, event.event_id)[1]["data"]["status"] == "ACTIVE"
    assert events.event_live_numbers(event.event_id)["active"] == 1
    k = store.EventKeys(event.event_id)
    (entry,) = store.client().zrange(k.windows, 0, -1)
    assert store.client().hget(k.claims, entry.split(b":")[0]).endswith(b":1")  # only `away` now
    to, start, _, admitted = entry.split(b":")
    store.client().zrem(k.windows, entry)
    store.client().zadd(k.windows, {b":".join([to, start, b"1", admitted]): int(to)})
    _tick(event.event_id)
    assert events.event_live_numbers(event.event_id)["active"] == 0
    assert api.poll(away, event.event_id)[1]["data"]["status"] == "EXPIRED"
