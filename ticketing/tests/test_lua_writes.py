"""Every script checks everything before its first write.

Redis runs a script atomically but does not roll back: the writes done before a
command fails (WRONGTYPE, a counter that is not a number, ...) stay. A script that
wrote first and then met a bad key would leave half a change behind, e.g. an
arrival number issued with nobody in line. So each case below sets up a realistic
event, gives one key the script touches the wrong type (or a counter a non-number),
runs the script through the real service function and proves that it failed with a
Redis error AND that no key of the event changed, the corrupted one included.

To cover another script, add a `Case` to CASES: its setup, its call and the KEYS
positions of its header. `test_every_key_of_each_case_is_covered` keeps the table
honest when a header gains a key.
"""

import dataclasses
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import altcha
import pytest
import redis as redis_lib
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from booking_app import reconcile
from booking_app import services as booking
from booking_app.models import Reservation
from queue_app import (
    admission,
    arrivals,
    draw,
    events,
    line,
    presale,
    proof,
    seating,
    services,
    support,
    tokens,
)
from queue_app.models import Event
from queue_app.tokens import Token, parse_token
from testsupport.line import end_windows, event_state, next_redis_second
from ticketing import ratelimit, store

ADMIT_PER_SECOND = 2


@dataclass
class World:
    """What a setup made and a call acts on."""

    event: Event
    tokens: list[Token]  # everyone who joined, in arrival order
    token: Token  # the person the call is about
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def keys(self) -> store.EventKeys:
        return store.EventKeys(self.event.event_id)


def crowd(make_event: Callable[..., Event], **fields: object) -> World:
    """A fresh event in mid-sale: 2 admitted, 5 waiting, 1 who left (a hole in the
    line between the first two now waiting), ticks and a rate on record.

    Line after setup: [t2, t3 (left), t4, t5, t6, t7]; the next tick admits t2, t4.
    """
    event = make_event(admit_per_second=ADMIT_PER_SECOND, total_seats=100, **fields)
    tokens = [parse_token(services.queue_join(event_id=event.event_id).token) for _ in range(8)]
    tick = admission.event_admit(event.event_id)  # a fresh event's first tick always runs
    assert (tick.outcome, tick.admitted) == ("ADMITTED", ADMIT_PER_SECOND)
    assert services.queue_leave(event_id=event.event_id, token=tokens[3]).removed
    # The last tick was a second ago, so the next one is due now (no sleeping).
    k = store.EventKeys(event.event_id)
    store.client().set(k.tick, int(store.client().time()[0]) - 1)
    return World(event, tokens, tokens[5])


def crowd_new_person(make_event: Callable[..., Event]) -> World:
    """The crowd, and the nonce of the token the next join will hand out (known in
    advance so that its own bucket can be corrupted too)."""
    world = crowd(make_event)
    world.extra["nonce"] = tokens.new_nonce()
    return world


def crowd_account(make_event: Callable[..., Event]) -> World:
    """The crowd, on an account event that asks for a proof of work, solved."""
    return _protected(crowd(make_event), require_account=True)


def crowd_capped(make_event: Callable[..., Event]) -> World:
    """The crowd, on an event with 2 places per address and a proof of work, solved."""
    return _protected(crowd(make_event), max_places_per_address=2)


def crowd_capped_ipv6(make_event: Callable[..., Event]) -> World:
    """crowd_capped, joined from an IPv6 /64, whose /48 is counted too."""
    world = crowd_capped(make_event)
    n = uuid.uuid4().int
    world.extra["client"] = services.Client(
        "",
        (0x20010DB8 << 32 | n % 2**32).to_bytes(8, "big"),
        (0x20010DB8 << 16 | n % 2**16).to_bytes(6, "big"),
    )
    return world


def crowd_presale(make_event: Callable[..., Event]) -> World:
    """The crowd, in a presale whose end is an hour away, and a code of 2 uses."""
    world = crowd(make_event)
    world.event.public_from = timezone.now() + timedelta(hours=1)
    events.event_publish(world.event)
    (world.extra["code"],) = presale.codes_create(world.event, count=1, uses=2)
    world.extra["nonce"] = tokens.new_nonce()
    return world


def crowd_lane(make_event: Callable[..., Event], share: int = 30, **fields: object) -> World:
    """The crowd, on an event with a priority lane (docs/modes.md) and a code of 3
    uses; one holder waits in the lane already. The next join with the code joins
    the lane."""
    world = crowd(make_event, priority_share=share, **fields)
    (world.extra["code"],) = presale.codes_create(world.event, count=1, uses=3)
    world.extra["lane"] = parse_token(
        services.queue_join(event_id=world.event.event_id, presale_code=world.extra["code"]).token
    )
    assert tokens.place_of(world.event.event_id, world.extra["lane"].raw)[1]
    world.extra["nonce"] = tokens.new_nonce()
    return world


def crowd_lane_safety_net(make_event: Callable[..., Event]) -> World:
    """crowd_lane, switched to safety-net with a claim time: a lane join reads both
    lines' waiting and its own line's admission log before it may go straight in."""
    world = crowd_lane(make_event, claim_seconds=20)
    world.event.mode = Event.Mode.SAFETY_NET
    events.event_publish(world.event)
    return world


def crowd_lane_claiming(make_event: Callable[..., Event]) -> World:
    """crowd_lane with a claim time, its holder admitted by a tick and not back yet:
    the call is them coming back, read from the lane's keys."""
    world = crowd_lane(make_event, share=90, claim_seconds=20)  # 90 % of 2 a second: at least 1
    k = world.keys
    store.client().set(k.tick, int(store.client().time()[0]) - 1)
    assert admission.event_admit(world.event.event_id).admitted >= 1
    assert store.client().get(k.lane_popped) == b"1"
    world.token = world.extra["lane"]
    return world


def join_with_code(world: World) -> Any:
    with mock.patch.object(tokens, "new_nonce", return_value=world.extra["nonce"]):
        return services.queue_join(event_id=world.event.event_id, presale_code=world.extra["code"])


def _protected(world: World, **protections: object) -> World:
    event = world.event
    for name, value in {"proof_of_work": 1, **protections}.items():
        setattr(event, name, value)
    events.event_publish(event)
    world.extra["nonce"] = tokens.new_nonce()
    world.extra["proof"] = _solved(event.event_id)
    world.extra["client"] = services.Client("2", bytes([10, 9, uuid.uuid4().int % 250, 1]))
    return world


def _solved(event_id: str) -> str:
    challenge = altcha.Challenge.from_dict(proof.challenge(event_id, 1))
    return altcha.Payload(challenge, altcha.solve_challenge(challenge)).to_base64()


def crowd_pass_through(make_event: Callable[..., Event]) -> World:
    """The crowd, on a pass-through event with a claim time: the next join admits the
    whole line up to itself, writing what a tick writes (docs/modes.md)."""
    world = crowd(make_event, claim_seconds=20)
    world.extra["nonce"] = tokens.new_nonce()
    world.event.mode = Event.Mode.PASS_THROUGH
    events.event_publish(world.event)
    return world


def crowd_claiming(make_event: Callable[..., Event]) -> World:
    """The crowd, on an event with a claim time; the person the call is about is
    admitted and has not come back yet: the call is them coming back."""
    world = crowd(make_event, claim_seconds=20)
    world.token = world.tokens[0]
    world.extra["nonce"] = tokens.new_nonce()
    return world


def crowd_late_with_grace(make_event: Callable[..., Event]) -> World:
    """The crowd, on an event with a claim time and a grace; the person the call is
    about was admitted, counted away, and comes back while their window lasts."""
    world = crowd(make_event, claim_seconds=20, claim_grace=True)
    world.token = world.tokens[0]
    k = world.keys
    (to,) = [t for t in store.client().hkeys(k.claims) if t != b"upto"]
    store.client().hset(k.claims, to, f"{store.now_ms(world.event.event_id) - 1}:2")
    return world


def crowd_claim_passed(make_event: Callable[..., Event]) -> World:
    """The crowd, whose admitted people's claim time has just passed unclaimed: the
    next tick counts them and gives their slots on."""
    world = crowd(make_event, claim_seconds=20)
    k = world.keys
    for to in store.client().hkeys(k.claims):
        store.client().hset(k.claims, to, store.now_ms(world.event.event_id) - 1)
    return world


def crowd_head_left(make_event: Callable[..., Event]) -> World:
    """The crowd, whose head (t2) left too: a run of two holes at the head."""
    world = crowd(make_event)
    assert services.queue_leave(event_id=world.event.event_id, token=world.tokens[2]).removed
    return world


def crowd_window_passed(make_event: Callable[..., Event]) -> World:
    """The crowd, and an admitted person whose window has just passed (not yet
    swept by a tick): their rejoin goes to the back of the line."""
    world = crowd(make_event)
    world.token = world.tokens[0]
    world.extra["nonce"] = tokens.new_nonce()  # of the new token it will be handed
    end_windows(world.event.event_id)
    return world


def crowd_active(make_event: Callable[..., Event]) -> World:
    """The crowd; the person the call is about is admitted, in their window."""
    world = crowd(make_event)
    world.token = world.tokens[0]
    world.extra["nonce"] = tokens.new_nonce()
    return world


def _scheduled(make_event: Callable[..., Event], *, joined: int, started: bool) -> tuple[Event, list[Token]]:
    """An event with a scheduled start and `joined` people in its pre-queue (their
    tokens); with `started`, the start has come (the operator moved it to now)."""
    event = make_event(
        admit_per_second=ADMIT_PER_SECOND, total_seats=100, opens_at=timezone.now() + timedelta(hours=1)
    )
    early = [parse_token(services.queue_join(event_id=event.event_id).token) for _ in range(joined)]
    if started:
        Event.objects.filter(pk=event.pk).update(opens_at=timezone.now())
        event.refresh_from_db()
        events.event_publish(event)
    return event, early


def pre_queue(make_event: Callable[..., Event]) -> World:
    """Three people in the pre-queue of a start an hour away; the next join's nonce."""
    event, _ = _scheduled(make_event, joined=3, started=False)
    world = World(event, [], parse_token(services.queue_join(event_id=event.event_id).token))
    world.extra["nonce"] = tokens.new_nonce()
    return world


def drawing(make_event: Callable[..., Event]) -> World:
    """The start has come for a pre-queue of five; the draw has not run."""
    event, early = _scheduled(make_event, joined=5, started=True)
    return World(event, early, early[0])


def drawn_but_not_switched(make_event: Callable[..., Event]) -> World:
    """A draw that wrote its tables and died before putting them in place."""
    world = drawing(make_event)

    def stop(call: store.Call, **kwargs: Any) -> Any:
        if call.script.name == "draw_done":
            raise _Recorded
        return real(call, **kwargs)

    real = store.run
    with mock.patch.object(store, "run", stop), pytest.raises(_Recorded):
        draw.run(world.event.event_id)
    run_keys = sorted(n.decode() for n in store.scan(store.key(world.event.event_id, "queue", "draw", "*")))
    world.extra["run"] = run_keys
    assert len(run_keys) == 1 and run_keys[0].endswith(":pos"), run_keys
    return world


def drawn(make_event: Callable[..., Event]) -> World:
    """A drawn pre-queue of five, two later arrivals; the next tick is due. The
    person the call is about is a drawn one, waiting."""
    event, early = _scheduled(make_event, joined=5, started=True)
    for _ in range(2):
        services.queue_join(event_id=event.event_id)
    assert draw.run(event.event_id).outcome == "DONE"
    k = store.EventKeys(event.event_id)
    store.client().set(k.tick, int(store.client().time()[0]) - 1)
    world = World(event, early, early[0])  # number 1: drawn somewhere, not admitted
    world.extra["nonce"] = tokens.new_nonce()
    return world


def drawn_stranded(make_event: Callable[..., Event]) -> World:
    """A drawn pre-queue whose first two drawn places were admitted; the first one's
    booking is stranded in the outbox (as booking_stranded). The person the call is
    about is the second, in their window."""
    world = drawn(make_event)
    assert admit(world).admitted == ADMIT_PER_SECOND
    table = store.client().get(world.keys.drawpos)
    first, second = _drawn_at(world, table, 1), _drawn_at(world, table, 2)
    _strand(world, first)
    world.token = second
    return world


def _drawn_at(world: World, table: bytes, place: int) -> Token:
    """The pre-queue token drawn to this place."""
    places = [int.from_bytes(table[at : at + 4], "big") for at in range(0, len(table), 4)]
    return world.tokens[places.index(place)]


def crowd_rate_limited(make_event: Callable[..., Event]) -> World:
    """The crowd, and one client address that has made 3 joins this second."""
    world = crowd(make_event)
    world.extra["meta"] = {"REMOTE_ADDR": f"10.{uuid.uuid4().int % 250}.0.{uuid.uuid4().int % 250}"}
    for _ in range(3):
        limit(world)
    return world


def crowd_rate_limited_ipv6(make_event: Callable[..., Event]) -> World:
    """The crowd, and one IPv6 client (a /64 and its /48) that has made 3 joins this second."""
    world = crowd(make_event)
    n = uuid.uuid4().int
    world.extra["meta"] = {"REMOTE_ADDR": f"2001:db8:{n % 65536:x}:{n // 65536 % 65536:x}::1"}
    for _ in range(3):
        limit(world)
    return world


def join(world: World) -> Any:
    with mock.patch.object(tokens, "new_nonce", return_value=world.extra["nonce"]):
        return services.queue_join(event_id=world.event.event_id)


def join_protected(world: World) -> Any:
    with mock.patch.object(tokens, "new_nonce", return_value=world.extra["nonce"]):
        return services.queue_join(
            event_id=world.event.event_id, proof=world.extra["proof"], client=world.extra["client"]
        )


def rejoin(world: World) -> Any:
    with mock.patch.object(tokens, "new_nonce", return_value=world.extra["nonce"]):
        return services.queue_rejoin(event_id=world.event.event_id, token=world.token)


def leave(world: World) -> Any:
    return services.queue_leave(event_id=world.event.event_id, token=world.token)


def poll(world: World) -> Any:
    """The poll script itself (queue_poll asks it when the line's copy cannot tell)."""
    return store.run(services._poll_call(world.event.event_id, world.token))


def look_up(world: World) -> Any:
    """An operator's support lookup of the person's place (queue_app/support.py): it
    writes nothing, and a bad key fails it rather than be read as something else."""
    return support.place_state(world.event.event_id, world.token.raw)


def line_state(world: World) -> Any:
    """A web process's refresh of its copy of the line (queue_app/line.py)."""
    line.forget()
    return line.current(world.event.event_id)


def admit(world: World) -> Any:
    outcome, *numbers = store.run(admission._admit_call(world.event.event_id))
    return admission.Tick(world.event.event_id, outcome.decode(), *numbers)


def publish(world: World) -> Any:
    """The operator changes a setting: written over the live record."""
    world.event.admit_per_second = 5
    return events.event_publish(world.event)


def close_pre_queue(world: World) -> Any:
    """The draw's first step (queue_app/draw.py), which closes the pre-queue."""
    return draw.run(world.event.event_id)


def switch(world: World) -> Any:
    """The draw's last step, with the keys the run wrote (queue_app/draw.py: run)."""
    k = world.keys
    size = int(store.client().hget(k.meta, "drawSize"))
    (run,) = world.extra["run"]
    return store.run(draw._DRAW_DONE.call(k, runpos=run, draw_size=size))


def limit(world: World) -> Any:
    """The join throttle, at 10 a second, for the world's client address."""
    with override_settings(RATE_LIMIT_JOIN=10):
        return ratelimit.JoinThrottle().allow_request(SimpleNamespace(META=world.extra["meta"]), None)


def crowd_with_blocks_out(make_event: Callable[..., Event]) -> World:
    """The crowd, and two blocks of arrival numbers out (queue_app/arrivals.py): the
    call gives the first back, one of its three numbers handed out, behind the second
    (holes), and takes a new one."""
    world = crowd(make_event)
    k = world.keys
    members = []
    for count in (3, 2):
        reply = store.run(
            arrivals._BLOCK.call(k, count=count, random=bytes(count * 2), open_ms=60_000, back=b"", used=0)
        )
        assert reply[0] == b"BLOCK", reply
        members.append(reply[4])
    world.extra["back"] = members[0]
    return world


def take_block(world: World) -> Any:
    call = arrivals._BLOCK.call(
        world.keys, count=2, random=bytes(4), open_ms=60_000, back=world.extra["back"], used=1
    )
    return store.run(call)


def booking_stranded(make_event: Callable[..., Event]) -> World:
    """The crowd, and a booking of the first admitted person whose process died after
    its Redis step: its entry waits in the outbox. The person the call is about is
    the other admitted one, still in their window."""
    world = crowd(make_event)
    _strand(world, world.tokens[0])
    world.token = world.tokens[1]
    return world


def _strand(world: World, token: Token) -> None:
    b = booking.Booking(uuid.uuid4(), world.event.event_id, token.text, 2)
    reply = store.run(booking.reserve_call(b))
    assert reply[0] == b"OK", reply
    world.extra.update(booking=dataclasses.replace(b, window_end=int(reply.window_end)), entry=reply.entry)


# An event with a seat map (queue_app/seating.py): 20 numbered seats and a floor,
# its 100 seats.
SEAT_MAP = {
    "sections": [
        {"id": "R", "name": "R", "rows": [{"row": "A", "count": 10}, {"row": "B", "count": 10}]},
        {"id": "GA", "name": "Floor", "places": 80},
    ]
}


def crowd_on_a_map(make_event: Callable[..., Event]) -> World:
    """The crowd on an event with a seat map, and a booking of R-A-1 and R-A-2 by the
    first admitted person whose process died after its Redis step (in the outbox)."""
    world = crowd(make_event)
    seating.seat_map_apply(world.event, SEAT_MAP)
    events.event_publish(world.event)
    b = booking.Booking(
        uuid.uuid4(), world.event.event_id, world.tokens[0].text, 2, seat_ids=("R-A-1", "R-A-2")
    )
    reply = store.run(booking.reserve_call(b))
    assert reply[0] == b"OK", reply
    b = dataclasses.replace(b, window_end=int(reply.window_end), section="R")
    world.extra.update(booking=b, entry=reply.entry)
    world.token = world.tokens[1]
    return world


def seats_released(make_event: Callable[..., Event]) -> World:
    """`booking_released` on a map: the hold had R-B-5."""
    world = booking_released(make_event)
    seating.seat_map_apply(world.event, SEAT_MAP)
    events.event_publish(world.event)
    world.extra["released"].section, world.extra["released"].seats = "R", ["R-B-5"]
    return world


def reserve_seat(world: World) -> Any:
    return booking.booking_reserve(
        event_id=world.event.event_id, token=world.token, seat_count=1, seats=("R-B-1",)
    )


def cancel_seats(world: World) -> Any:
    returned = Reservation(
        event=world.event,
        reservation_id=uuid.uuid4(),
        token=world.token.text,
        seat_count=2,
        section="R",
        seats=["R-B-2", "R-B-3"],
    )
    return booking.give_back_cancelled(returned)


def heal_map(world: World) -> Any:
    counted = reconcile._seat_map_count(world.event.event_id, [], [])
    call = reconcile._SEATS_HEAL.call(
        world.keys,
        mark="ours",
        free=100,
        version=counted.version,
        state=counted.state,
        section_free=counted.section_free,
        confirmed=[],
    )
    return store.run(call)


def block_seat(world: World) -> Any:
    return seating.seats_block(world.event, ["R-B-9"])


def show_sold(world: World) -> Any:
    return store.run(booking._SEATS_SOLD.call(world.keys, seat_ids=["R-A-1", "R-A-2"]))


def booking_recounting(make_event: Callable[..., Event]) -> World:
    world = booking_stranded(make_event)
    store.client().set(world.keys.recount, "ours", px=60_000)
    return world


def crowd_on_a_map_recounting(make_event: Callable[..., Event]) -> World:
    world = crowd_on_a_map(make_event)
    store.client().set(world.keys.recount, "ours", px=60_000)
    return world


def booking_mark_lost(make_event: Callable[..., Event]) -> World:
    """The crowd, and a confirmed reservation whose booking mark Redis lost."""
    world = crowd(make_event)
    world.token = world.tokens[1]
    Reservation.objects.create(event=world.event, token=world.token.text, seat_count=1)
    return world


def reserve(world: World) -> Any:
    return booking.booking_reserve(event_id=world.event.event_id, token=world.token, seat_count=1)


def release(world: World) -> Any:
    return booking.release(
        world.keys, world.extra["entry"], world.extra["booking"], booking.Decision(booking.NOT_SAVED)
    )


def outbox_done(world: World) -> Any:
    return booking.outbox_done(world.keys, world.extra["entry"])


def cancel(world: World) -> Any:
    returned = Reservation(
        event=world.event, reservation_id=uuid.uuid4(), token=world.token.text, seat_count=1
    )
    return booking.give_back_cancelled(returned)


def booking_released(make_event: Callable[..., Event]) -> World:
    """The crowd, and a released hold of the other admitted person whose seat is back
    on sale (in the `returned` hash): its late payment takes it back."""
    world = crowd(make_event)
    world.token = world.tokens[1]
    rid = uuid.uuid4()
    store.client().hset(world.keys.returned, str(rid), 1)
    world.extra["released"] = Reservation(
        event=world.event, reservation_id=rid, token=world.token.text, seat_count=1
    )
    return world


def retake(world: World) -> Any:
    return booking.seats_retake(world.extra["released"])


def heal(world: World) -> Any:
    k = world.keys
    call = reconcile._SEATS_HEAL.call(
        k, mark="ours", free=100, version="", state="", section_free="", confirmed=[]
    )
    return store.run(call)


def booking_lost(make_event: Callable[..., Event]) -> World:
    """The crowd, and a person whose pending booking Redis lost (nothing of it is left)."""
    world = crowd(make_event)
    world.token = world.tokens[1]
    return world


def note_lost(world: World) -> Any:
    b = booking.Booking(uuid.uuid4(), world.event.event_id, world.token.text, 1)
    return booking.settle_unheard(b)


def mark_restore(world: World) -> Any:
    return reconcile.restore_marks(world.event.event_id)


@dataclass(frozen=True)
class Case:
    script: str
    setup: Callable[[Callable[..., Event]], World]  # make_event -> World
    call: Callable[[World], Any]  # runs the script once through its service
    keys: tuple[int, ...]  # KEYS positions to give the wrong type
    counters: tuple[int, ...] = ()  # KEYS positions holding a number: also given "x"


CASES = [
    # A plain join reads no place (3-5, 11, 13) and no owner (8-10: meta stands in).
    Case("join", crowd_new_person, join, keys=(1, 2, 6, 7, 8, 9, 10, 14), counters=(2, 7)),
    # Admitted by the join itself: the head's counters and the admission log (5, 16-19).
    Case(
        "join",
        crowd_pass_through,
        join,
        keys=(1, 2, 5, 6, 7, 8, 9, 10, 14, 16, 17, 18, 19, 20, 21),
        counters=(2, 7, 16, 18, 19),
    ),  # fmt: skip
    # Coming back in time: the claims (20) and the bitmap of those who came (21).
    Case("join", crowd_claiming, rejoin, keys=(1, 3, 5, 6, 7, 13, 14, 20, 21), counters=(7,)),
    Case("join", crowd_account, join_protected, keys=(1, 2, 6, 7, 8, 10, 14), counters=(2, 7)),
    Case("join", crowd_capped, join_protected, keys=(1, 2, 6, 7, 9, 10, 14), counters=(2, 7)),
    Case("join", crowd_capped_ipv6, join_protected, keys=(1, 2, 6, 7, 9, 10, 14, 15), counters=(2, 7)),
    # A presale's code (16), spent with the place.
    Case("join", crowd_presale, join_with_code, keys=(1, 2, 6, 7, 8, 9, 10, 14, 22), counters=(2, 7)),
    Case("join", crowd_window_passed, rejoin, keys=(1, 2, 3, 5, 6, 7, 8, 9, 10, 14), counters=(2, 7)),
    # The priority lane's join: its own counters and random bytes (23-25).
    Case("join", crowd_lane, join_with_code, keys=(1, 6, 8, 9, 10, 22, 23, 24, 25), counters=(23, 25)),
    Case(
        "join",
        crowd_lane_safety_net,
        join_with_code,
        keys=(1, 2, 6, 7, 8, 9, 10, 16, 18, 19, 22, 23, 24, 25, 27, 28, 29, 30, 31),
        counters=(2, 7, 16, 18, 19, 23, 25, 27),
    ),  # fmt: skip
    # A lane holder coming back in time reads the lane's line (26, 28, 30-32).
    Case("join", crowd_lane_claiming, rejoin, keys=(1, 6, 24, 25, 26, 28, 30, 31, 32), counters=(25,)),
    # F5 in the window: the booked places (13) say it has not booked.
    Case("join", crowd_active, rejoin, keys=(1, 3, 5, 6, 7, 13, 14), counters=(7,)),
    # A join into the pre-queue appends its token to the pre-queue's string (12).
    Case("join", pre_queue, join, keys=(1, 2, 6, 7, 8, 9, 10, 12, 14), counters=(2, 7)),
    Case("join", pre_queue, rejoin, keys=(1, 4, 6, 14)),
    # A drawn place kept on F5: its place is read from the positions (11).
    Case("join", drawn, rejoin, keys=(1, 3, 6, 7, 11, 14), counters=(7,)),
    Case("leave", crowd, leave, keys=(1, 2, 4, 5, 6, 8), counters=(5, 6)),
    Case("leave", pre_queue, leave, keys=(1, 3, 4, 5, 6, 8), counters=(5, 6)),
    Case("leave", drawn, leave, keys=(1, 2, 4, 5, 6, 7, 8), counters=(5, 6)),
    Case("poll", crowd, poll, keys=(1, 2, 3, 4, 5, 8, 9, 12), counters=(2, 3, 5, 9)),
    Case("poll", crowd_active, poll, keys=(1, 2, 3, 4, 5, 7, 8, 9, 11, 12), counters=(2, 3, 5, 9)),
    Case("poll", crowd_claiming, poll, keys=(1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 14), counters=(2, 3, 5, 9)),
    # A late person's grace: the active count (15) takes them back.
    Case(
        "poll",
        crowd_late_with_grace,
        poll,
        keys=(1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 14, 15),
        counters=(2, 3, 5, 9, 15),
    ),  # fmt: skip
    Case("poll", pre_queue, poll, keys=(1, 2, 3, 5, 6, 8, 9, 12), counters=(2, 3, 5, 9)),
    Case("poll", drawn, poll, keys=(1, 2, 3, 4, 5, 8, 9, 10, 12), counters=(2, 3, 5, 9)),
    # The support lookup reads what a poll reads, and the admission's entry and claim (7, 12, 13).
    Case("place_state", crowd, look_up, keys=(1, 2, 3, 4, 5, 8, 10, 11), counters=(2, 3, 5)),
    Case("place_state", crowd_active, look_up, keys=(1, 2, 3, 4, 5, 7, 8, 10, 11, 12, 13), counters=(3,)),
    Case("place_state", crowd_claiming, look_up, keys=(1, 3, 7, 10, 12, 13), counters=(3,)),
    Case("place_state", pre_queue, look_up, keys=(1, 2, 3, 5, 6, 8, 11), counters=(2, 3, 5)),
    Case("place_state", drawn, look_up, keys=(1, 2, 3, 4, 5, 8, 9, 10, 11), counters=(2, 3, 5)),
    Case("line_state", crowd, line_state, keys=(1, 2, 3, 4, 5, 6), counters=(2, 3, 4, 5)),
    # Both lines' keys are read before the first write, the lane's (14-21) too.
    # A block taken, and one given back behind another (its tail made holes).
    Case("block", crowd_with_blocks_out, take_block, keys=tuple(range(1, 9)), counters=(2, 5, 8)),
    Case("admit", crowd, admit, keys=tuple(range(1, 23)), counters=(2, 3, 5, 8, 9, 10, 15, 16, 18)),
    Case("admit", drawn, admit, keys=tuple(range(1, 23)), counters=(2, 3, 5, 8, 9, 10, 15, 16, 18)),
    Case(
        "admit", crowd_claim_passed, admit, keys=tuple(range(1, 23)), counters=(2, 3, 5, 8, 9, 10, 15, 16, 18)
    ),
    Case("admit", crowd_lane, admit, keys=tuple(range(1, 23)), counters=(2, 3, 5, 8, 9, 10, 15, 16, 18)),
    Case("event_sync", crowd, publish, keys=(1, 2, 3), counters=(2, 3)),
    Case("draw_close", drawing, close_pre_queue, keys=(1, 2, 3, 4), counters=(2, 3)),
    Case("draw_done", drawn_but_not_switched, switch, keys=tuple(range(1, 9)), counters=(7,)),
    Case("ratelimit", crowd_rate_limited, limit, keys=(1,), counters=(1,)),
    Case("ratelimit", crowd_rate_limited_ipv6, limit, keys=(1, 2), counters=(1, 2)),
    Case("reserve", booking_stranded, reserve, keys=(1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12), counters=(4, 6, 9)),
    Case(
        "reserve", drawn_stranded, reserve, keys=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), counters=(4, 6, 9)
    ),
    Case(
        "reserve",
        crowd_claiming,
        reserve,
        keys=(1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 17, 18),
        counters=(4, 6, 9),
    ),
    Case("release", booking_stranded, release, keys=(1, 2, 3, 4, 5, 6, 7, 9), counters=(2, 6)),
    Case("release", drawn_stranded, release, keys=(1, 2, 3, 4, 5, 6, 7, 8, 9), counters=(2, 6)),
    Case("outbox_done", booking_stranded, outbox_done, keys=(1, 2)),
    Case("cancel", booking_stranded, cancel, keys=(1, 2, 3, 4, 5), counters=(1,)),
    Case("retake", booking_released, retake, keys=(1, 2, 3, 4, 5), counters=(1,)),
    # A seats value that is not a number is simply replaced by the recount.
    Case("seats_heal", booking_recounting, heal, keys=(1, 2, 3, 4)),
    Case("mark_restore", booking_mark_lost, mark_restore, keys=(1, 2, 3)),
    # On a map: the sections, the seats' index and states, and the places per section.
    Case("reserve", crowd_on_a_map, reserve_seat, keys=(1, 3, 4, 5, 13, 14, 15, 16), counters=(4,)),
    Case("release", crowd_on_a_map, release, keys=(1, 2, 3, 7, 10, 11, 12, 13), counters=(2,)),
    Case("cancel", crowd_on_a_map, cancel_seats, keys=(1, 6, 7, 8, 9), counters=(1,)),
    Case("retake", seats_released, retake, keys=(1, 6, 7, 8, 9), counters=(1,)),
    Case("seats_heal", crowd_on_a_map_recounting, heal_map, keys=(1, 5, 6, 7, 8)),
    Case("seats_block", crowd_on_a_map, block_seat, keys=(1, 2, 3, 4, 5), counters=(1,)),
    Case("seats_sold", crowd_on_a_map, show_sold, keys=(1, 2, 3)),
    Case("note_not_saved", booking_lost, note_lost, keys=(1, 2)),
]


def header_types(script: str) -> dict[int, str]:
    """KEYS position -> the Redis type its header declares, e.g. {1: 'HASH'}: its
    `-- KEY <name> <TYPE>` lines, in order."""
    text = (Path(settings.BASE_DIR) / "lua" / f"{script}.lua").read_text()
    found = re.findall(r"^-- KEY \w+\??\s+([A-Z]+)", text, re.M)
    return {n: kind for n, kind in enumerate(found, start=1)}


class _Recorded(Exception):
    pass


def keys_passed(case: Case, world: World) -> list[str]:
    """The KEYS the service hands to its script, read off the call without running
    it: the test follows services.py instead of repeating its key lists."""
    seen = []

    def record(call: store.Call, **kwargs: Any) -> Any:
        seen.append((call.script.name, call.keys))
        raise _Recorded

    with mock.patch.object(store, "run", record), pytest.raises(_Recorded):
        case.call(world)
    # The first: the call stops there (a booking's count for /metrics may follow it).
    (name, keys), *_ = seen
    assert name == case.script
    return keys


def dump(name: str) -> tuple[str, Any]:
    c = store.client()
    kind = c.type(name).decode()
    reader = {"none": lambda n: None, "string": c.get, "list": lambda n: c.lrange(n, 0, -1)}[kind]
    return kind, reader(name)


def outside(world: World, keys: list[str]) -> list[str]:
    """The script's keys that are not the event's (the rate-limit counter)."""
    return [name for name in keys if not name.startswith(store.key(world.event.event_id))]


def state(world: World, keys: list[str]) -> dict:
    """Every key of the event, plus the script's keys that live outside it."""
    return event_state(world.event.event_id) | {name: dump(name) for name in outside(world, keys)}


def corrupt(name: str, declared: str, how: str) -> None:
    """A string key becomes a list, any other a string; a counter may get "x"."""
    c = store.client()
    c.delete(name)
    if how == "type" and declared == "STRING":
        c.rpush(name, "x")
    else:
        c.set(name, "x")


PARAMS = [
    pytest.param(case, position, how, id=f"{case.script}:{case.call.__name__}:KEYS[{position}]:{how}")
    for case in CASES
    for how, positions in (("type", case.keys), ("number", case.counters))
    for position in positions
]


@pytest.mark.parametrize(("case", "position", "how"), PARAMS)
def test_a_bad_key_fails_the_script_before_it_writes(case, position, how, make_event):
    world = case.setup(make_event)
    keys = keys_passed(case, world)
    try:
        corrupt(keys[position - 1], header_types(case.script)[position], how)
        before = state(world, keys)
        with pytest.raises(redis_lib.exceptions.ResponseError):
            case.call(world)
        assert state(world, keys) == before
    finally:
        for name in outside(world, keys):  # make_event wipes the event's own keys
            store.client().delete(name)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.script}:{c.call.__name__}")
def test_every_key_of_each_case_is_covered(case):
    declared = header_types(case.script)
    covered = {n for other in CASES if other.script == case.script for n in other.keys}
    assert covered == set(declared), f"{case.script}: KEYS in the header vs the table"
    assert set(case.keys) <= set(declared)
    assert all(declared[n] == "STRING" for n in case.counters)


# --- Values, not types ---------------------------------------------------------


@pytest.mark.parametrize("field_name", ["admitPerSecond", "windowSeconds", "maxActive"])
def test_admit_with_a_non_number_setting_changes_nothing(make_event, field_name):
    world = crowd(make_event)
    store.client().hset(world.keys.meta, field_name, "x")
    before = event_state(world.event.event_id)
    with pytest.raises(redis_lib.exceptions.ResponseError):
        admit(world)
    assert event_state(world.event.event_id) == before


def test_event_sync_with_an_odd_settings_list_changes_nothing(make_event):
    world = crowd(make_event)
    k = world.keys
    before = event_state(world.event.event_id)
    with pytest.raises(redis_lib.exceptions.ResponseError):
        odd = ["status", "OPEN", "name"]
        store.run(
            events._EVENT_SYNC.call(
                k, total_seats=120, sold=0, opened_at=1, opens_at="", gen="abcd", settings=odd
            )
        )
    assert event_state(world.event.event_id) == before


@pytest.mark.parametrize("uses", [b"x", b"1.5", b"", b"99999999999999999999"])
def test_a_code_whose_uses_are_not_a_number_fails_the_join_before_it_writes(make_event, uses):
    """HINCRBY runs after the place's writes: the script checks its rule first."""
    world = crowd_presale(make_event)
    store.client().hset(world.keys.codes, presale.code_key(world.event.event_id, world.extra["code"]), uses)
    before = event_state(world.event.event_id)
    with pytest.raises(redis_lib.exceptions.ResponseError):
        join_with_code(world)
    assert event_state(world.event.event_id) == before


@pytest.mark.parametrize("args", [("x", 1000), (10, "x")], ids=["limit", "window"])
def test_ratelimit_with_a_bad_argument_counts_nothing(args):
    c = store.client()
    counter = f"ticket:ratelimit:test:{uuid.uuid4().hex}"
    c.set(counter, 3, px=60_000)
    try:
        with pytest.raises(redis_lib.exceptions.ResponseError):
            store.run(ratelimit.limit_call(counter, *args))
        assert c.get(counter) == b"3"
    finally:
        c.delete(counter)


# --- Redis' clock jumping back --------------------------------------------------


@pytest.mark.parametrize("ahead", [7, 3600])
def test_a_last_tick_far_ahead_is_a_clock_jump_and_the_tick_admits(make_event, ahead):
    """After a failover to a replica whose clock is behind, the stored last tick is
    in the future: admission must not stop until the clock catches up."""
    world = crowd(make_event)
    c = store.client()
    second = int(c.time()[0])
    c.set(world.keys.tick, second + ahead)
    tick = admit(world)
    assert (tick.outcome, tick.admitted) == ("ADMITTED", ADMIT_PER_SECOND)
    assert second <= int(c.get(world.keys.tick)) <= second + 1  # the new clock's second


def test_after_a_clock_jump_the_tick_is_once_per_second_again(make_event):
    world = crowd(make_event)
    c = store.client()
    next_redis_second(margin=0.01)  # both ticks in one fresh second
    c.set(world.keys.tick, int(c.time()[0]) + 3600)
    assert [admit(world).outcome, admit(world).outcome] == ["ADMITTED", "ALREADY_TICKED"]


@pytest.mark.parametrize("ahead", [1, 5])
def test_a_last_tick_slightly_ahead_still_counts_as_already_ticked(make_event, ahead):
    """Within the tolerance a tick ahead is this second's (two beats in one second
    admit once), not a clock jump."""
    world = crowd(make_event)
    c = store.client()
    c.set(world.keys.tick, int(c.time()[0]) + ahead)
    before = event_state(world.event.event_id)
    tick = admit(world)
    assert (tick.outcome, tick.admitted) == ("ALREADY_TICKED", 0)
    assert event_state(world.event.event_id) == before
