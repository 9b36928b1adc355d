"""The fast lane's Redis batcher against the real Redis: every caller gets its own
reply, and it never has more pipelines in flight than its pool has connections."""

import asyncio

import pytest
import redis.asyncio

from ticketing.store import Batcher, ClusterBatcher


async def _many_turns(url: str, pool_size: int, callers: int) -> tuple[list, int]:
    client = redis.asyncio.Redis.from_url(url, max_connections=pool_size)
    batcher = Batcher(client)
    most = 0

    async def caller(i: int) -> object:
        nonlocal most
        for _ in range(i % 50):  # spread over 50 turns of the loop
            await asyncio.sleep(0)
        reply = batcher.execute("ECHO", str(i))
        most = max(most, len(batcher.sending))
        return await reply

    try:
        replies = await asyncio.gather(*(caller(i) for i in range(callers)), return_exceptions=True)
    finally:
        await client.aclose()
    return replies, most


def test_a_pool_of_two_serves_a_thousand_callers_over_fifty_turns(redis_url: str) -> None:
    replies, most = asyncio.run(_many_turns(redis_url, pool_size=2, callers=1000))
    assert replies == [str(i).encode() for i in range(1000)]
    assert most == 2  # the pool's size: both connections were used, never a third


def test_commands_a_stuck_redis_never_answers_fail_in_time(monkeypatch) -> None:
    """A server that accepts connections and never answers (a Redis stopped with
    SIGSTOP looks like this): every command of the turn fails with TimeoutError once
    ASYNC_REQUEST_TIMEOUT has passed, and a later turn's commands get their own time."""
    import socket
    import time

    from ticketing.store import clients

    monkeypatch.setattr(clients, "ASYNC_REQUEST_TIMEOUT", 0.3)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        port = server.getsockname()[1]

        async def main() -> tuple[list, float, list]:
            client = redis.asyncio.Redis(host="127.0.0.1", port=port, protocol=2)
            batcher = Batcher(client)
            try:
                started = time.monotonic()
                first = await asyncio.gather(
                    *(batcher.execute("GET", f"k{i}") for i in range(5)), return_exceptions=True
                )
                took = time.monotonic() - started
                await asyncio.sleep(0.1)
                second = await asyncio.gather(batcher.execute("GET", "x"), return_exceptions=True)
            finally:
                for task in batcher.sending:
                    task.cancel()
                await client.aclose(close_connection_pool=True)
            return first, took, second

        first, took, second = asyncio.run(main())
    assert all(isinstance(reply, TimeoutError) for reply in first), first
    # Not before the timeout; and it was this timeout that ended them (the client
    # has none of its own: without it they would wait for ever), however busy the
    # machine.
    assert 0.25 <= took < 30
    assert isinstance(second[0], TimeoutError)


@pytest.mark.cluster
def test_on_a_cluster_each_caller_is_answered_by_its_keys_node(redis_url: str) -> None:
    """The cluster's batcher: a thousand callers over fifty turns, their keys on
    every node; each command went to the node owning its key (a wrong node would
    have answered MOVED, and the node's batcher would have seen no command)."""
    from ticketing import store

    keys = [f"batcher:{{{i}}}" for i in range(1000)]
    for i, name in enumerate(keys):
        store.client().set(name, i)

    async def main() -> tuple[list, set[str]]:
        batcher = ClusterBatcher(redis_url, {"max_connections": 2})

        async def caller(i: int) -> object:
            for _ in range(i % 50):
                await asyncio.sleep(0)
            return await batcher.execute("GET", keys[i])

        try:
            replies = await asyncio.gather(*(caller(i) for i in range(1000)), return_exceptions=True)
            return replies, set(batcher.nodes)
        finally:
            await batcher.aclose()

    try:
        replies, nodes = asyncio.run(main())
    finally:
        store.client().delete(*keys)
    assert replies == [str(i).encode() for i in range(1000)]
    assert nodes == {node.name for node in store.client().get_primaries()}
