"""The priority lane (docs/modes.md) under the faults the general line is tested
with: its own arrival numbers are guarded by its own random bytes, so a Redis back
from an older snapshot never gives one holder's place to another, and a booking of
a lane holder still sells each seat once."""

import pytest

from queue_app import presale, services, tokens
from queue_app.tokens import parse_token
from testsupport.booking import book, seats_left
from testsupport.line import fresh_tick
from ticketing import store


@pytest.mark.single_redis  # a redis-server of its own (crashed, restored)
@pytest.mark.django_db(transaction=True)
def test_a_lane_number_issued_again_after_an_older_snapshot_never_takes_the_first_holders_place(
    postgres, redis_server, make_event, api
):
    event = make_event(total_seats=4, priority_share=90, admit_per_second=2)
    (code,) = presale.codes_create(event, count=1, uses=10)
    snapshot = redis_server.snapshot()  # before anyone joined
    first = parse_token(services.queue_join(event_id=event.event_id, presale_code=code).token)
    assert tokens.place_of(event.event_id, first.raw) == (1, True)
    redis_server.crash()
    redis_server.restart(snapshot)  # the lane's number 1 is gone from Redis, not from `first`
    second = parse_token(services.queue_join(event_id=event.event_id, presale_code=code).token)
    assert tokens.place_of(event.event_id, second.raw) == (1, True)  # the same number, issued again
    assert second.raw[2:4] != first.raw[2:4] or second.raw[:2] != first.raw[:2]

    # While number 1 waits, each process's copy of the line (which keeps no random
    # bytes, docs/line.md) may show either token its rank; once admitted, Redis answers.
    assert services.queue_poll(event_id=event.event_id, token=second).rank == 1
    fresh_tick(event.event_id)
    assert services.queue_poll(event_id=event.event_id, token=second).status == "ACTIVE"
    assert services.queue_poll(event_id=event.event_id, token=first).status == "NOT_FOUND"
    status, body = book(api, first.text, event.event_id, 2)
    assert (status, body["error"]["code"]) == (403, "NOT_ACTIVE")
    status, body = book(api, second.text, event.event_id, 4)
    assert status == 200, body
    assert seats_left(event.event_id) == 0
    k = store.EventKeys(event.event_id)
    assert store.client().getbit(k.lane_booked_places, 1) == 1
    assert store.client().get(k.booked_places) is None  # the general line's never touched
