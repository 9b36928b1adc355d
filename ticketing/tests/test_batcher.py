"""The fast lane's Redis batcher against the real Redis: every caller gets its own
reply, and it never has more pipelines in flight than its pool has connections."""

import asyncio

import redis.asyncio

from ticketing.redis import Batcher


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
