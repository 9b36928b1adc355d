import ipaddress
import time
import uuid

import pytest
import redis as redis_lib

from testsupport.line import unknown_token
from ticketing import ratelimit, store


@pytest.fixture
def limits(settings):
    settings.RATE_LIMIT_JOIN = 10
    settings.RATE_LIMIT_LEAVE = 5
    return settings


def _ip() -> str:
    # Each test its own address: the counters are shared by every app server.
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def test_join_allows_ten_per_second_then_429(api, event, limits, snapshot):
    ip = _ip()
    for _ in range(10):
        assert api.join(event.event_id, REMOTE_ADDR=ip)[0] == 200
    before = snapshot(event.event_id)
    status, body = api.join(event.event_id, REMOTE_ADDR=ip)
    assert status == 429
    assert body["error"]["code"] == "RATE_LIMIT"
    assert api.last["Retry-After"] == "1"
    assert snapshot(event.event_id) == before  # the refused join queued nobody
    assert api.join(event.event_id, REMOTE_ADDR=_ip())[0] == 200  # others are unaffected


def test_rejoin_shares_the_join_limit(api, event, limits):
    ip = _ip()
    token = api.token(event.event_id)
    for _ in range(10):
        assert api.rejoin(token, event.event_id, REMOTE_ADDR=ip)[0] == 200
    assert api.rejoin(token, event.event_id, REMOTE_ADDR=ip)[0] == 429


def test_leave_allows_five_per_second(api, event, limits):
    ip = _ip()
    stranger = unknown_token(event.event_id)
    for _ in range(5):
        assert api.leave(stranger, event.event_id, REMOTE_ADDR=ip)[0] == 200
    assert api.leave(stranger, event.event_id, REMOTE_ADDR=ip)[0] == 429


def test_challenges_are_limited_per_client_on_both_lanes(lanes_api, event, limits):
    limits.RATE_LIMIT_CHALLENGE = 3
    ip = _ip()
    path = f"/api/queue/challenge?eventId={event.event_id}"
    assert [lanes_api.call("get", path, REMOTE_ADDR=ip)[0] for _ in range(4)] == [200, 200, 200, 429]
    assert lanes_api.last["Retry-After"] == "1"


def test_the_limit_is_configurable(api, event, limits):
    limits.RATE_LIMIT_JOIN = 2
    ip = _ip()
    assert [api.join(event.event_id, REMOTE_ADDR=ip)[0] for _ in range(3)] == [200, 200, 429]


def test_forwarded_for_is_ignored_from_an_untrusted_peer(api, event, limits):
    peer = _ip()
    for i in range(10):
        api.join(event.event_id, REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=f"192.0.2.{i}")
    # A client cannot dodge the limit by inventing forwarded addresses.
    assert api.join(event.event_id, REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR="192.0.2.99")[0] == 429


def test_forwarded_for_is_believed_from_a_trusted_proxy(api, event, limits):
    limits.TRUSTED_PROXIES = (ipaddress.ip_network("10.0.0.0/8"),)
    proxy = "10.9.9.9"
    client_a, client_b = (f"198.51.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}" for _ in range(2))
    for _ in range(10):
        assert api.join(event.event_id, REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=client_a)[0] == 200
    assert api.join(event.event_id, REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=client_a)[0] == 429
    # The rightmost untrusted hop is the client; a forged leftmost entry changes nothing.
    assert api.join(event.event_id, REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=f"6.6.6.6, {client_a}")[0] == 429
    assert api.join(event.event_id, REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=client_b)[0] == 200


def test_a_counter_that_lost_its_expiry_does_not_lock_a_client_out(api, event, limits, rc):
    ip = _ip()
    counter = f"ticket:ratelimit:join:{ip}"
    rc.set(counter, 50)  # over the limit, and no expiry (restored by hand, say)
    assert api.join(event.event_id, REMOTE_ADDR=ip)[0] == 429
    assert 0 < rc.pttl(counter) <= 1000  # armed: the window now ends
    rc.delete(counter)


def _net64() -> str:
    n = uuid.uuid4().int
    return f"2001:db8:{n % 65536:x}:{n // 65536 % 65536:x}"


def test_ipv6_is_counted_per_64_however_the_script_rotates_inside_it(api, event, limits):
    net = _net64()
    for i in range(10):
        assert api.join(event.event_id, REMOTE_ADDR=f"{net}:{i:x}::{i + 1:x}")[0] == 200
    assert api.join(event.event_id, REMOTE_ADDR=f"{net}:ffff:ffff:ffff:fffe")[0] == 429
    # The neighbouring /64 is someone else.
    other = _net64()
    assert api.join(event.event_id, REMOTE_ADDR=f"{other}::1")[0] == 200


def test_ipv4_mapped_ipv6_is_counted_as_the_ipv4_address(api, event, limits):
    ip = _ip()
    for _ in range(5):
        assert api.join(event.event_id, REMOTE_ADDR=ip)[0] == 200
    for _ in range(5):
        assert api.join(event.event_id, REMOTE_ADDR=f"::ffff:{ip}")[0] == 200
    assert api.join(event.event_id, REMOTE_ADDR=ip)[0] == 429


def test_refused_joins_are_counted_per_event_and_reason(api, event, limits, rc):
    from queue_app import events

    ip = _ip()
    for _ in range(12):
        api.join(event.event_id, REMOTE_ADDR=ip)  # the last two refused: rate
    assert api.rejoin(str(uuid.uuid4()), event.event_id)[1]["error"]["code"] == "INVALID_TOKEN"
    assert events.event_live_numbers(event.event_id)["joinsRefused"] == {"forged_token": 1, "rate": 2}
    # A refusal naming an event that does not exist leaves nothing behind.
    nowhere = f"nope-{uuid.uuid4().hex[:10]}"
    assert api.rejoin(str(uuid.uuid4()), nowhere)[1]["error"]["code"] == "INVALID_TOKEN"
    store.flush_refusals()
    assert not rc.exists(store.event_keys(nowhere).refused)


def _48() -> str:
    n = uuid.uuid4().int
    return f"2001:db8:{n % 65536:x}"


def test_an_ipv6_48_is_counted_too_with_a_higher_limit_of_its_own(lanes_api, event, limits):
    """A /48 is 65,536 /64s (a tunnel broker hands one out for free): each /64 may
    join 10 a second, the /48 twice that (IPV6_48_LIMIT_FACTOR = 2 here)."""
    limits.IPV6_48_LIMIT_FACTOR = 2
    site = _48()
    answers = [lanes_api.join(event.event_id, REMOTE_ADDR=f"{site}:{i:x}::1")[0] for i in range(25)]
    assert answers == [200] * 20 + [429] * 5
    assert lanes_api.join(event.event_id, REMOTE_ADDR=f"{_48()}:1::1")[0] == 200  # another /48


def test_a_refused_request_uses_up_nothing(api, event, limits):
    """A /64 past its own limit does not eat what the rest of its /48 may do."""
    limits.IPV6_48_LIMIT_FACTOR = 2
    site = _48()
    for _ in range(30):
        api.join(event.event_id, REMOTE_ADDR=f"{site}:1::1")  # 10 allowed, 20 refused
    assert [api.join(event.event_id, REMOTE_ADDR=f"{site}:2::1")[0] for _ in range(10)] == [200] * 10


def _ipv4_in_6to4(ip: str) -> str:
    return str(ipaddress.IPv6Address(0x2002 << 112 | int(ipaddress.IPv4Address(ip)) << 80 | 1))


def _ipv4_in_teredo(ip: str) -> str:
    """A Teredo address (2001::/32): server 192.0.2.1, a port, and the client's IPv4
    address with its bits flipped."""
    server, port = int(ipaddress.IPv4Address("192.0.2.1")), uuid.uuid4().int % 65536
    flipped = ~int(ipaddress.IPv4Address(ip)) & 0xFFFFFFFF
    return str(ipaddress.IPv6Address(0x20010000 << 96 | server << 64 | port << 32 | flipped))


def test_6to4_and_teredo_are_counted_as_the_ipv4_address_they_carry(lanes_api, event, limits):
    ip = _ip()
    for address in [ip] * 4 + [_ipv4_in_6to4(ip)] * 3 + [_ipv4_in_teredo(ip)] * 3:
        assert lanes_api.join(event.event_id, REMOTE_ADDR=address)[0] == 200
    for address in (ip, _ipv4_in_6to4(ip), _ipv4_in_teredo(ip)):
        assert lanes_api.join(event.event_id, REMOTE_ADDR=address)[0] == 429


@pytest.mark.parametrize(
    ("address", "units"),
    [
        ("198.51.100.7", ("198.51.100.7",)),
        ("::ffff:198.51.100.7", ("198.51.100.7",)),
        ("2002:c633:6407::1", ("198.51.100.7",)),  # 6to4
        ("2001:0:c000:201:0:f00d:39cc:9bf8", ("198.51.100.7",)),  # Teredo
        ("2001:db8:1:2:3:4:5:6", ("2001:db8:1:2::/64", "2001:db8:1::/48")),
        ("not an address", ("not an address",)),
    ],
)
def test_a_client_is_counted_as_these_units(address, units):
    assert ratelimit.client_units(address) == units


def _asks(redis_url: str, counter: str, action) -> int:
    """The rate limit's round trips for `counter` while `action` runs (MONITOR, on the
    server holding the counter)."""
    from queue_app.tests.test_poll import _commands_received

    c = store.client()
    if isinstance(c, redis_lib.cluster.RedisCluster):
        node = c.get_node_from_key(counter)
        redis_url = f"redis://{node.host}:{node.port}/0"
    asked = f"EVALSHA {ratelimit._RATELIMIT.script.sha}"
    return sum(1 for cmd in _commands_received(redis_url, action) if cmd["command"].startswith(asked))


def _joins_of_one_client(api, event_id: str, redis_url: str, n: int) -> tuple[list[int], int, int]:
    """`n` joins from one new address: their statuses, the rate limit's round trips
    for them, and what its counter holds after."""
    ip = _ip()
    counter = f"ticket:ratelimit:join:{ip}"
    answers: list[int] = []
    asks = _asks(
        redis_url, counter, lambda: answers.extend(api.join(event_id, REMOTE_ADDR=ip)[0] for _ in range(n))
    )
    return answers, asks, int(store.client().get(counter))


def test_a_client_that_joins_again_is_let_through_from_a_lease(lanes_api, event, limits, redis_url):
    """A hundred joins of one client cost seven asks of the rate limit (leases of 1, 2,
    4 ... 64 requests, counted in Redis before they are let through)."""
    limits.RATE_LIMIT_JOIN = 1000
    answers, asks, counted = _joins_of_one_client(lanes_api, event.event_id, redis_url, 100)
    assert answers == [200] * 100
    assert asks == 7
    assert counted == 127  # what was leased, all counted


def test_a_flood_past_the_limit_is_refused_without_asking_redis(lanes_api, event, limits, redis_url):
    """Leases of at most a quarter of the limit; once Redis grants fewer than asked,
    the process refuses the client itself until its window ends."""
    answers, asks, counted = _joins_of_one_client(lanes_api, event.event_id, redis_url, 50)
    assert answers == [200] * 10 + [429] * 40
    assert asks == 6  # 1, 2, 2, 2, 2, then 2 asked and 1 granted
    assert counted == 10


def test_refused_joins_are_counted_in_the_process_and_written_together(api, event, limits, redis_url):
    """Thirty refused joins cost Redis no command each: the process counts them and
    writes them once a second (one write for each second the flood lasts may fall
    within it, and one more at its edge), or when it reads the counts itself."""
    from queue_app import events
    from queue_app.tests.test_poll import _commands_received, _server_of

    limits.RATE_LIMIT_JOIN = 1
    ip = _ip()
    answers = []
    written = f"EVALSHA {store.scripts.REFUSED.script.sha}"
    # Refusals of earlier tests' events still held by this process go out with the same
    # script in the same pipeline, one write per event: only this event's are counted.
    ours = store.event_keys(event.event_id).meta
    started = time.monotonic()
    seen = _commands_received(
        _server_of(redis_url, event.event_id),
        lambda: answers.extend(api.join(event.event_id, REMOTE_ADDR=ip)[0] for _ in range(31)),
    )
    lasted = time.monotonic() - started
    assert answers == [200] + [429] * 30
    writes = [cmd for cmd in seen if cmd["command"].startswith(written) and ours in cmd["command"]]
    assert len(writes) <= 1 + int(lasted)
    assert lasted < 15  # (else the bound above would let a write per refusal through)
    assert events.event_live_numbers(event.event_id)["joinsRefused"] == {"rate": 30}


def test_a_waiter_cancelled_while_its_client_is_asked_for_leaves_the_others_theirs():
    """Requests of one client that find its lease empty wait for one ask of Redis; one
    of them cancelled (its client left, a graceful stop ran out of time) must not
    cancel the ask for the others: the asker and the others are let through."""
    import asyncio

    leases = ratelimit.Leases()
    keys = (store.ratelimit_key("join", f"cancelled-{uuid.uuid4().hex}"),)

    async def main() -> list:
        asker = asyncio.ensure_future(leases.acheck(keys, 1000))
        await asyncio.sleep(0)  # its ask is sent: the next ones wait for it
        waiters = [asyncio.ensure_future(leases.acheck(keys, 1000)) for _ in range(3)]
        await asyncio.sleep(0)
        waiters[0].cancel()
        return await asyncio.gather(asker, *waiters, return_exceptions=True)

    asker, cancelled, *others = asyncio.run(main())
    assert isinstance(cancelled, asyncio.CancelledError)
    assert [asker, *others] == [0, 0, 0]
