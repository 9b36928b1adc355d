"""On a Redis Cluster (the cluster run, `make test-cluster`): events spread over
the nodes and each works, every script call stays in one slot, scans and wipes
visit every node, scripts come back after a node forgets them, an event's clock
is its node's, and a cluster's own errors are answered like a Redis outage."""

import asyncio
import uuid
from unittest import mock

import pytest
import redis as redis_lib
from django.conf import settings
from redis.cluster import key_slot
from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError

from queue_app import admission, events, services
from queue_app.tokens import parse_token
from testsupport.booking import book
from ticketing import store

pytestmark = pytest.mark.cluster


def node_of(event_id: str) -> str:
    return store.client().get_node_from_key(store.event_keys(event_id).meta).name


@pytest.fixture
def spread(make_event):
    """One event on each primary of the cluster (event ids are tried until every
    node holds one): the hash tag `{eventId}` is what spreads them."""
    primaries = {node.name for node in store.client().get_primaries()}
    assert len(primaries) >= 3
    sales = {}
    while set(sales) != primaries:
        event_id = f"t-{uuid.uuid4().hex[:12]}"
        if node_of(event_id) not in sales:
            sales[node_of(event_id)] = make_event(event_id=event_id, total_seats=10, admit_per_second=5)
    return list(sales.values())


def test_the_client_and_the_batcher_are_the_cluster_clients() -> None:
    assert isinstance(store.client(), redis_lib.cluster.RedisCluster)

    async def kind() -> type:
        return type(store.batcher())

    assert asyncio.run(kind()) is store.ClusterBatcher


def test_events_on_every_node_each_admit_poll_and_book_at_once(spread, lanes_api) -> None:
    """Joins on both lanes, one admission tick over all events (a pipeline that
    goes node by node), polls and bookings: each event on its own node."""
    tokens = {event.event_id: [lanes_api.token(event.event_id) for _ in range(3)] for event in spread}
    ticks = {tick.event_id: tick for tick in admission.events_admit()}
    for event in spread:
        assert (ticks[event.event_id].outcome, ticks[event.event_id].admitted) == ("ADMITTED", 3)
        for token in tokens[event.event_id]:
            status, body = lanes_api.poll(token, event.event_id)
            assert (status, body["data"]["status"]) == (200, "ACTIVE"), body
        status, body = book(lanes_api, tokens[event.event_id][0], event.event_id, seats=2)
        assert status == 200 and body["data"]["status"] == "CONFIRMED", body
        assert int(store.client().get(store.event_keys(event.event_id).seats)) == 8


def test_events_on_every_node_are_served_together_by_one_batcher(spread) -> None:
    """Joins and polls of every event in the same turns of one event loop: the
    batcher splits each turn's commands by node, and every caller gets its own
    answer."""

    async def main() -> list:
        joined = await asyncio.gather(
            *(services.aqueue_join(event_id=event.event_id) for event in spread for _ in range(20))
        )
        polls = await asyncio.gather(
            *(services.aqueue_poll(event_id=j.event_id, token=parse_token(j.token)) for j in joined)
        )
        await store.aclose()
        return list(zip(joined, polls, strict=True))

    answers = asyncio.run(main())
    for event in spread:
        ranks = sorted(poll.rank for joined, poll in answers if joined.event_id == event.event_id)
        assert ranks == list(range(1, 21))


def test_every_script_call_keeps_to_one_slot(spread, api, monkeypatch) -> None:
    """Each script's keys hash to one slot, whichever path calls it: the cluster
    runs a script on one node only."""
    calls: list[tuple[str, list[str]]] = []
    run, arun = store.run, store.arun

    def spy_run(call, **kwargs):
        calls.append((call.script.name, call.keys))
        return run(call, **kwargs)

    async def spy_arun(call):
        calls.append((call.script.name, call.keys))
        return await arun(call)

    monkeypatch.setattr(store, "run", spy_run)
    monkeypatch.setattr(store, "arun", spy_arun)
    for event in spread:
        token = api.token(event.event_id)
        api.leave(api.token(event.event_id), event.event_id)
        admission.events_admit()
        api.poll(token, event.event_id)
        book(api, token, event.event_id)
    assert {name for name, _ in calls} >= {"join", "leave", "admit", "poll", "reserve"}
    for name, keys in calls:
        assert len({key_slot(k.encode()) for k in keys}) == 1, (name, keys)


def test_scan_and_wipe_visit_every_node(spread) -> None:
    for event in spread:
        store.client().set(store.key(event.event_id, "probe"), 1)
    found = set(store.scan("ticket:{t-*}:probe"))
    assert found == {store.key(event.event_id, "probe").encode() for event in spread}
    assert store.delete_matching("ticket:{t-*}:probe") >= len(spread)
    assert not list(store.scan("ticket:{t-*}:probe"))
    for event in spread:
        assert events.event_wipe(event.event_id) > 0
        assert not list(store.scan(store.event_keys(event.event_id).pattern()))


def test_scripts_come_back_after_one_node_forgets_them(spread, lanes_api) -> None:
    """SCRIPT FLUSH on one node (a restarted or failed-over primary): the sync
    path (Django's lane, a pipelined tick) and the fast lane's batcher load the
    script where it is missing and go on."""
    event = spread[0]
    c = store.client()
    node = c.get_node_from_key(store.event_keys(event.event_id).meta)
    token = lanes_api.token(event.event_id)

    def there(name: str) -> bool:
        return c.execute_command("SCRIPT EXISTS", store.script(name).sha, target_nodes=node) == [True]

    c.execute_command("SCRIPT FLUSH", target_nodes=node)
    assert lanes_api.poll(token, event.event_id)[0] == 200  # the line's refresh
    assert there("line_state")
    c.execute_command("SCRIPT FLUSH", target_nodes=node)
    assert lanes_api.token(event.event_id)
    assert there("join")
    c.execute_command("SCRIPT FLUSH", target_nodes=node)
    assert any(t.event_id == event.event_id and t.outcome == "ADMITTED" for t in admission.events_admit())
    assert there("admit")


def test_now_ms_reads_the_clock_of_the_events_node(spread) -> None:
    c = store.client()
    for event in spread:
        with mock.patch.object(c, "time", wraps=c.time) as time:
            now = store.now_ms(event.event_id)
        node = time.call_args.kwargs["target_nodes"]
        assert node.name == node_of(event.event_id)
        seconds, micros = c.time(target_nodes=node)
        assert 0 <= seconds * 1000 + micros // 1000 - now < 5_000


def test_a_batched_command_sent_to_a_node_that_no_longer_owns_its_slot_is_redirected(spread) -> None:
    """The batcher's slot map gone stale (a resharding): MOVED, then the command
    goes through the cluster client, which follows it and refreshes the map."""
    event = spread[0]
    meta = store.event_keys(event.event_id).meta

    async def main() -> list:
        batcher = store.ClusterBatcher(settings.REDIS_URL, {})
        try:
            assert await batcher.execute("HGET", meta, "status") == b"OPEN"
            manager = batcher.client.nodes_manager
            slot = batcher.client.keyslot(meta)
            owner = manager.slots_cache[slot][0]
            stranger = next(n for n in manager.nodes_cache.values() if n.name != owner.name)
            manager.slots_cache[slot] = [stranger]
            replies = await asyncio.gather(*(batcher.execute("HGET", meta, "status") for _ in range(5)))
            return [replies, manager.slots_cache[slot][0].name == owner.name]
        finally:
            await batcher.aclose()

    replies, refreshed = asyncio.run(main())
    assert replies == [b"OPEN"] * 5
    assert refreshed


@pytest.mark.parametrize(
    "error",
    [
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        SlotNotCoveredError('Slot "1" not covered by the cluster.'),
        RedisClusterException("Redis Cluster cannot be connected."),
    ],
    ids=["cluster-down", "slot-not-covered", "cluster-exception"],
)
def test_a_cluster_error_is_answered_503_in_the_envelope(event, lanes_api, monkeypatch, error) -> None:
    token = lanes_api.token(event.event_id)

    def fail(*args, **kwargs):
        raise error

    async def afail(*args, **kwargs):
        raise error

    monkeypatch.setattr(store, "run", fail)
    monkeypatch.setattr(store, "arun", afail)
    status, body = lanes_api.poll(token, event.event_id)
    assert status == 503
    assert body == {
        "success": False,
        "error": {
            "code": "REDIS_UNAVAILABLE",
            "message": "The waiting room is briefly unavailable; try again.",
        },
    }
