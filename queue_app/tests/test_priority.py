"""The priority lane (docs/modes.md): a presale's holders join a second line of the
event, admitted ahead of the general line at the operator's share of the rate and
never more while the general line waits; the general line always gets the rest.
Every step a token takes afterwards (poll, leave, booking, a booking given back)
reads and writes its own line's keys."""

import threading
import uuid
from datetime import timedelta

import pytest
import requests
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from booking_app import reconcile
from booking_app.services import Booking, reserve_call
from queue_app import admission, events, presale, services, support, tokens
from queue_app.tokens import parse_token
from ticketing import store


def _tick(event_id: str) -> admission.Tick:
    """A tick now: the last one ran a second ago."""
    store.client().set(store.EventKeys(event_id).tick, int(store.client().time()[0]) - 1)
    return admission.event_admit(event_id)


def _lane_event(make_event, share: int = 30, uses: int = 100, **fields):
    event = make_event(priority_share=share, **fields)
    (code,) = presale.codes_create(event, count=1, uses=uses)
    return event, code


def _holder(event, code: str) -> tokens.Token:
    return parse_token(services.queue_join(event_id=event.event_id, presale_code=code).token)


def _general(event) -> tokens.Token:
    return parse_token(services.queue_join(event_id=event.event_id).token)


def _line(event_id: str, lane: bool) -> dict:
    """The values of one line's keys (a give-back must leave the other line's alone)."""
    k, c = store.event_keys(event_id, lane), store.client()
    return {name: c.dump(getattr(k, name)) for name in store.LINE_KEY_NAMES}


def test_a_holder_joins_the_lane_and_everyone_else_the_general_line(api, make_event):
    event, code = _lane_event(make_event)
    status, body = api.call("post", "/api/queue/join", {"eventId": event.event_id, "presaleCode": code})
    assert status == 200
    holder = parse_token(body["data"]["token"])
    assert tokens.place_of(event.event_id, holder.raw) == (1, True)
    plain = parse_token(api.token(event.event_id))
    assert tokens.place_of(event.event_id, plain.raw) == (1, False)  # numbers count in each line apart
    k = store.EventKeys(event.event_id)
    assert (store.client().get(k.seq), store.client().get(k.lane_seq)) == (b"1", b"1")
    for token in (holder, plain):
        assert api.poll(token.text, event.event_id)[1]["data"]["rank"] == 1
    numbers = events.event_live_numbers(event.event_id)
    assert (numbers["waiting"], numbers["waitingPriority"]) == (2, 1)
    found = support.place_lookup(event, holder.text).places[0]
    assert (found.lane, found.number, found.status) == (True, 1, "WAITING")


def test_a_bad_code_on_a_lane_event_is_refused_and_changes_nothing(api, make_event):
    from testsupport.line import event_state

    event, _ = _lane_event(make_event)
    before = event_state(event.event_id)
    status, body = api.call(
        "post", "/api/queue/join", {"eventId": event.event_id, "presaleCode": presale.new_code()}
    )
    assert (status, body["error"]["code"]) == (403, "PRESALE_CODE_INVALID")
    assert event_state(event.event_id) == before


def test_the_lane_takes_its_share_and_the_general_line_the_rest(make_event):
    """10 a second, 30 %: 3 from the lane and 7 from the general line each tick while
    both wait; a lane of 40 behind never takes more than its share."""
    event, code = _lane_event(make_event, admit_per_second=10)
    lane = [_holder(event, code) for _ in range(40)]
    general = [_general(event) for _ in range(40)]
    k = store.EventKeys(event.event_id)
    for n in range(1, 4):
        assert _tick(event.event_id).admitted == 10
        assert (int(store.client().get(k.lane_popped)), int(store.client().get(k.popped))) == (3 * n, 7 * n)
    assert services.queue_poll(event_id=event.event_id, token=lane[8]).status == "ACTIVE"
    assert services.queue_poll(event_id=event.event_id, token=lane[9]).rank == 1
    assert services.queue_poll(event_id=event.event_id, token=general[20]).status == "ACTIVE"
    assert services.queue_poll(event_id=event.event_id, token=general[21]).rank == 1


@pytest.mark.parametrize("share", [90, 30])
def test_a_full_lane_never_starves_the_general_line(make_event, share):
    """A rate of 1 a second and a lane far longer than the general line: at the most
    a lane may take (90 %), the general line still goes on, one person in ten ticks,
    in arrival order; at 30 %, 7 in 10."""
    event, code = _lane_event(make_event, share=share, admit_per_second=1)
    for _ in range(30):
        _holder(event, code)
    general = [_general(event) for _ in range(10)]
    k = store.EventKeys(event.event_id)
    for _ in range(10):
        assert _tick(event.event_id).admitted == 1
    general_admitted = int(store.client().get(k.popped))
    lane_admitted = int(store.client().get(k.lane_popped))
    assert (lane_admitted, general_admitted) == (share // 10, 10 - share // 10)
    statuses = [services.queue_poll(event_id=event.event_id, token=t).status for t in general]
    assert statuses == ["ACTIVE"] * general_admitted + ["WAITING"] * (10 - general_admitted)


def test_with_the_general_line_empty_the_lane_takes_the_whole_rate(make_event):
    """A presale's first hour: only holders join, and they are let in at the full
    rate, not at the lane's share."""
    event, code = _lane_event(
        make_event, admit_per_second=10, public_from=timezone.now() + timedelta(hours=1)
    )
    for _ in range(25):
        _holder(event, code)
    assert [_tick(event.event_id).admitted for _ in range(3)] == [10, 10, 5]
    assert int(store.client().get(store.EventKeys(event.event_id).lane_popped)) == 25


def test_with_the_lane_empty_the_general_line_takes_the_whole_rate(make_event):
    event, _ = _lane_event(make_event, admit_per_second=10)
    for _ in range(12):
        _general(event)
    assert [_tick(event.event_id).admitted for _ in range(2)] == [10, 2]


def test_a_leaver_of_the_lane_leaves_the_lane(api, make_event):
    event, code = _lane_event(make_event)
    first, second = _holder(event, code), _holder(event, code)
    general = _general(event)
    status, body = api.leave(first.text, event.event_id)
    assert (status, body["data"]["removed"]) == (200, True)
    assert api.poll(second.text, event.event_id)[1]["data"]["rank"] == 1
    assert api.poll(general.text, event.event_id)[1]["data"]["rank"] == 1
    assert store.client().getbit(store.EventKeys(event.event_id).lane_left, 1) == 1
    assert store.client().getbit(store.EventKeys(event.event_id).left, 1) == 0


@pytest.mark.django_db(transaction=True)  # the server reads what this test commits
def test_concurrent_holders_and_others_each_get_one_place_in_their_own_line(production_server, make_event):
    """20 clients with a code of 3 uses and 20 without, released together, on the
    production server: exactly 3 places in the lane, 20 in the general line, the
    other 17 told the code is used up, and no number issued twice in either line."""
    event, code = _lane_event(make_event, uses=3)
    barrier, answers, errors = threading.Barrier(40), [], []

    def attempt(with_code: bool) -> None:
        try:
            body = {"eventId": event.event_id} | ({"presaleCode": presale.shown(code)} if with_code else {})
            barrier.wait()
            answer = requests.post(f"{production_server}/api/queue/join", json=body, timeout=30)
            answers.append((with_code, answer.status_code, answer.json()))
        except Exception as exc:  # noqa: BLE001 (any failure in a thread fails the test below)
            errors.append(repr(exc))

    threads = [threading.Thread(target=attempt, args=(n < 20,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    places = [
        tokens.place_of(event.event_id, parse_token(body["data"]["token"]).raw)
        for _, status, body in answers
        if status == 200
    ]
    used_up = [body["error"]["code"] for with_code, status, body in answers if with_code and status != 200]
    assert used_up == ["PRESALE_CODE_USED_UP"] * 17
    assert sorted(n for n, lane in places if lane) == [1, 2, 3]
    assert sorted(n for n, lane in places if not lane) == list(range(1, 21))


@pytest.mark.django_db(transaction=True)
def test_a_lane_holders_booking_refused_later_gives_the_window_back_in_the_lane(make_event, settings):
    """A holder admitted from the lane books, and that process dies after the Redis
    step. Postgres then has no room for it (its ledger is full): reconcile refuses
    it and gives the holder's window back, through the lane's keys, so the holder
    may book again; the general line's keys (whose number 1 is admitted too) are
    never touched."""
    from queue_app.models import Event

    settings.BOOKING_RECONCILE_GRACE_SEC = 0
    event, code = _lane_event(make_event, share=90, total_seats=10, admit_per_second=2)
    holder, general = _holder(event, code), _general(event)
    _tick(event.event_id)  # 90 % of 2: one from each line, both number 1
    for token in (holder, general):
        assert services.queue_poll(event_id=event.event_id, token=token).status == "ACTIVE"
    reply = store.run(reserve_call(Booking(uuid.uuid4(), event.event_id, holder.text, 3)))
    assert reply[0] == b"OK", reply  # the Redis step; its process dies here
    k = store.EventKeys(event.event_id)
    assert store.client().getbit(k.lane_booked_places, 1) == 1
    Event.objects.filter(pk=event.pk).update(seats_sold=10)  # no room left in Postgres
    general_before = _line(event.event_id, lane=False)

    report = reconcile.booking_reconcile(event.event_id)
    assert len(report.refused) == 1
    assert _line(event.event_id, lane=False) == general_before
    assert store.client().getbit(k.lane_booked_places, 1) == 0  # the window is the holder's again
    at = services.queue_poll(event_id=event.event_id, token=holder)
    assert (at.status, at.active_expires_at is not None) == ("NOT_SAVED", True)
    assert services.queue_poll(event_id=event.event_id, token=general).status == "ACTIVE"


def test_a_lane_with_a_scheduled_start_is_refused(make_event):
    event = make_event()
    event.priority_share, event.opens_at = 30, timezone.now() + timedelta(hours=1)
    with pytest.raises(ValidationError) as refused:
        event.full_clean()
    assert "priority_share" in refused.value.message_dict
    event.opens_at, event.priority_share = None, 91
    with pytest.raises(ValidationError):
        event.full_clean()


def test_init_event_sets_the_share(db, rc):
    event_id = f"lane-{uuid.uuid4().hex[:8]}"
    try:
        call_command("init_event", event_id, "--priority-share", "25")
        assert rc.hget(store.EventKeys(event_id).meta, "priorityShare") == b"25"
    finally:
        events.event_wipe(event_id)


def test_the_lane_shows_its_own_rate_in_its_estimates(make_event):
    event, code = _lane_event(make_event, admit_per_second=10)
    for _ in range(30):
        _holder(event, code)
    for _ in range(30):
        _general(event)
    _tick(event.event_id)
    lane_next, general_next = _holder(event, code), _general(event)
    lane_at = services.queue_poll(event_id=event.event_id, token=lane_next)
    general_at = services.queue_poll(event_id=event.event_id, token=general_next)
    meta = store.client().hmget(store.EventKeys(event.event_id).meta, "laneRate", "admitRate")
    assert [float(rate) for rate in meta] == [3.0, 7.0]
    assert lane_at.eta_seconds == round((lane_at.rank - 1) / 3)
    assert general_at.eta_seconds == round((general_at.rank - 1) / 7)


def test_an_account_holds_one_place_over_both_lines(make_event):
    """An account event with a lane: a listed account joins the lane; asking again,
    with or without a code, answers that place (HELD), never a second one."""
    from django.contrib.auth import get_user_model

    from queue_app.models import PresaleAllow

    event, code = _lane_event(make_event, require_account=True)
    user = get_user_model().objects.create_user(f"p{uuid.uuid4().hex[:12]}", password="pw-for-tests-1")
    PresaleAllow.objects.create(event=event, account=user)
    client = services.Client(account=str(user.pk))
    joined = services.queue_join(event_id=event.event_id, client=client)
    assert tokens.place_of(event.event_id, parse_token(joined.token).raw) == (1, True)
    PresaleAllow.objects.filter(event=event).delete()  # no longer listed: still their place
    for again in (None, code):
        held = services.queue_join(event_id=event.event_id, client=client, presale_code=again)
        assert (held.token, held.joined_at) == (joined.token, None)
    k = store.EventKeys(event.event_id)
    assert (store.client().get(k.seq), store.client().get(k.lane_seq)) == (None, b"1")


def test_safety_net_lets_nobody_in_at_once_while_the_other_line_waits(make_event):
    """Safety-net admits a join at once only while nobody waits in either line: a
    holder does not pass people waiting in the general line, nor anyone the lane."""
    for first_waits_in_lane in (False, True):
        event, code = _lane_event(make_event, mode="safety-net", admit_per_second=1, max_active_users=1)
        assert services.queue_join(event_id=event.event_id).status == "ACTIVE"  # an empty sale: straight in
        code_first = code if first_waits_in_lane else None
        # The cap is reached: this one waits, in the lane or the general line.
        assert services.queue_join(event_id=event.event_id, presale_code=code_first).status == "WAITING"
        store.client().set(store.EventKeys(event.event_id).active, 0)  # room again; one still waits
        code_next = None if first_waits_in_lane else code
        assert services.queue_join(event_id=event.event_id, presale_code=code_next).status == "WAITING"


def test_a_process_learns_an_event_has_a_lane_and_keeps_passing_its_keys(make_event):
    """A join passes the lane's keys only for an event that has had a lane: a
    process that does not know yet is told (LANE, nothing written) and asks again;
    an event whose share is set back to 0 keeps its lane's places."""
    event, code = _lane_event(make_event)
    services._with_lane.discard(event.event_id)
    holder = _holder(event, code)
    assert tokens.place_of(event.event_id, holder.raw) == (1, True)
    assert event.event_id in services._with_lane
    event.priority_share = 0
    event.save()
    events.event_publish(event)
    services._with_lane.discard(event.event_id)
    kept = services.queue_rejoin(event_id=event.event_id, token=holder)
    assert (kept.token, kept.status) == (holder.text, "WAITING")
    assert tokens.place_of(event.event_id, _general(event).raw)[1] is False  # a code is ignored now
    assert services.queue_poll(event_id=event.event_id, token=holder).rank == 1


def test_a_general_token_from_before_the_lane_with_the_top_bit_set_keeps_its_place(make_event):
    """Tokens issued before lanes existed had random bytes with any top bit: such a
    token is still the general line's, for the service (its signature) and for the
    join script (the lane did not issue its random bytes)."""
    event, code = _lane_event(make_event)
    _holder(event, code)  # lane number 1
    _general(event)  # general number 1, its random bytes rewritten below as an old token's
    k = store.EventKeys(event.event_id)
    gen = bytes.fromhex(store.client().hget(k.meta, "gen").decode())
    head, number = gen + b"\xf1\x23", (1).to_bytes(5, "big")
    store.client().setrange(k.nonces, 0, head[2:4])
    old = tokens.Token.of(
        tokens._assemble(head, number, tokens._mac(tokens.keys()[0], event.event_id, head, number))
    )
    assert tokens.place_of(event.event_id, old.raw) == (1, False)
    assert services.queue_poll(event_id=event.event_id, token=old).rank == 1
    kept = services.queue_rejoin(event_id=event.event_id, token=old)
    assert (kept.token, kept.status) == (old.text, "WAITING")
    assert int(store.client().get(k.seq)) == 1  # no new place


def test_a_drill_fills_the_general_line_of_an_event_with_a_lane(make_event):
    """queue_join_many pipelines its joins, which cannot ask again: on an event with
    a lane it passes the lane's keys from the start."""
    event, _ = _lane_event(make_event)
    services._with_lane.discard(event.event_id)
    services.queue_join_many(event_id=event.event_id, count=50)
    k = store.EventKeys(event.event_id)
    assert (int(store.client().get(k.seq)), store.client().get(k.lane_seq)) == (50, None)
