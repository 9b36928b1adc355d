"""Arrival numbers in blocks (queue_app/arrivals.py) under a Redis that comes back
from an older snapshot while blocks are out: a number issued again is one person's
place, never two people's."""

import pytest

from queue_app import arrivals, services, tokens
from queue_app.tests.test_arrivals import _another_process_takes, _number, _token_of
from testsupport.booking import book
from testsupport.line import fresh_tick
from ticketing import store


@pytest.mark.single_redis  # a redis-server of its own (crashed, restored)
@pytest.mark.django_db(transaction=True)
def test_blocks_out_when_redis_comes_back_from_an_older_snapshot(
    postgres, redis_server, make_event, api, settings
):
    """The snapshot was taken before this process's block [2..9]: once restored, Redis
    issues 2, 3 and 4 again, to another process's people, with other random bytes. The
    block's holders (before the crash, and after it, while the block's time ran) are
    not taken for those places; the block given back late punches no hole among the
    numbers issued again."""
    settings.QUEUE_BLOCK_MS = 10_000  # the block stays out across the crash
    event = make_event(total_seats=4, admit_per_second=50)
    k = store.event_keys(event.event_id)
    first = api.token(event.event_id)  # block [1]
    arrivals.give_back()  # no block out in the snapshot
    snapshot = redis_server.snapshot()
    lost = [api.token(event.event_id) for _ in range(2)]  # 2 and 3, of the block [2..9]
    redis_server.crash()
    redis_server.restart(snapshot)
    lost.append(api.token(event.event_id))  # 4: the block is still this process's
    assert [_number(event.event_id, t) for t in [first, *lost]] == [1, 2, 3, 4]

    other = _another_process_takes(event.event_id, 5)  # Redis issues from 2 again
    assert other[0] == 2
    again = [_token_of(event.event_id, other, n) for n in (2, 3, 4)]
    assert store.run(arrivals._BLOCK.call(k, count=0, random=b"", open_ms=0, back=other[2], used=3)) == [
        b"BACK"
    ]
    arrivals.give_back()  # the forgotten block [2..9], given back late: nothing to give
    assert int(store.client().get(k.seq)) == 4 and int(store.client().get(k.holes) or 0) == 0

    assert fresh_tick(event.event_id).admitted == 4

    def status(t: str) -> str:
        return services.queue_poll(event_id=event.event_id, token=tokens.parse_token(t)).status

    assert [status(t) for t in [first, *again]] == ["ACTIVE"] * 4
    assert [status(t) for t in lost] == ["NOT_FOUND"] * 3
    status_code, body = book(api, lost[0], event.event_id, 1)
    assert (status_code, body["error"]["code"]) == (403, "NOT_ACTIVE")
    for t in again:
        assert book(api, t, event.event_id, 1)[0] == 200
