"""Arrival numbers in blocks: a new person's place without a Redis command of its own.

One counter orders everyone (`seq`), and issuing each number from it in Redis made
the hot event's Redis node the limit on arrivals, however many web processes stood
in front of it. So each web process takes numbers from the counter a block at a
time (lua/block.lua, one round trip) and hands them out itself, in order, signing
each token here with the key every process shares (queue_app/tokens.py) and the
random bytes the block wrote to Redis with its numbers.

The order this keeps (docs/line.md): a process hands a block out for at most
QUEUE_BLOCK_MS (T) from the moment it asked for it, and blocks are issued in the
order Redis took them. So of two people, one whose join was sent more than T after
the other's was answered is behind, whichever processes answered them; within T, two
processes' people may be in either order. A block's size follows the process's arrivals: what
it handed out in T, grown at most GROWTH times a block while a block runs out
early, and never more than MOST numbers.

What a block leaves behind: the process gives it back once its time is over (with
its next block, from a thread of its own when no join comes, or as its worker shuts
down), saying how many numbers it handed out; Redis makes the rest holes, which
ranks and the tick pass as they pass leavers. A process killed with a block out never gives it back: the tick
waits for it for OPEN_GRACE_MS past its time, then admits its numbers in their turn,
with LOST_CLAIM_MS to come back: its holders keep their turn, and the slots of the
numbers nobody held go to the next people (lua/admit.lua).

Only a plain event's new joins come from blocks (lua/block.lua says which); a
rejoin, a proof of work sent, and every join of another event go one at a time
through lua/join.lua, as before. When Redis says an event is not plain, this
process asks again only after QUEUE_LINE_REFRESH_MS.
"""

import asyncio
import atexit
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from queue_app import tokens
from ticketing import store
from ticketing.errors import REDIS_ERRORS

log = logging.getLogger(__name__)

# The most numbers in one block, and how much a block may grow on the last.
MOST = 4_096
GROWTH = 8
# How long past its time Redis keeps a block open for its process to give it back.
OPEN_GRACE_MS = 2_000
# How long the people of a lost block (its process killed) have to come back once
# admitted, on an event without a claim time of its own (lua/admit.lua): two of the
# slowest polls a page in a background tab makes.
LOST_CLAIM_MS = 120_000
# The top bit of each token's first random byte clear: the general line's.
_GENERAL = int.from_bytes(b"\x7f\xff" * MOST, "big")

_BLOCK = store.Caller("block", passes="count random open_ms back used")


@dataclass(slots=True)
class Issued:
    """A number handed out, its token and when. (Not frozen: one is made for every
    arrival, and a frozen dataclass sets each field through object.__setattr__.)"""

    number: int
    token: bytes  # raw
    joined_at: int  # ms on Redis' clock


@dataclass(slots=True)
class _Block:
    first: int
    last: int
    member: bytes  # as Redis' `blocks` holds it
    asked: float  # time.monotonic() when it was asked for
    until: float  # time.monotonic() after which none of it is handed out
    at_ms: int  # Redis' clock when Redis took it
    taken: float  # time.monotonic() when its reply came
    random: bytes
    mint: Callable[[int, bytes], bytes]  # its numbers' tokens (tokens.minter)
    next: int = 0


@dataclass(slots=True)
class _Event:
    event_id: str
    lock: threading.Lock = field(default_factory=threading.Lock)  # the block and its counters
    taking: threading.Lock = field(default_factory=threading.Lock)  # one take at a time (threads)
    block: _Block | None = None
    size: int = 1
    one_at_a_time_until: float = float("-inf")  # not plain: join.lua until then
    back: list[tuple[bytes, int]] = field(default_factory=list)  # blocks to give back
    pending: dict = field(default_factory=dict)  # event loop -> the take under way there


_events: dict[str, _Event] = {}
_events_lock = threading.Lock()
_wake = threading.Event()
_reaper: list[int] = []  # the pid whose reaper thread runs


# Events whose joins this process keeps a block for: bounded, since any event id a
# client sends reaches here (an unknown one is answered by the join script).
_MAX_EVENTS = 256


def _event(event_id: str) -> _Event:
    found = _events.get(event_id)
    if found is None:
        with _events_lock:
            if len(_events) >= _MAX_EVENTS:
                for idle in [
                    i for i, e in _events.items() if e.block is None and not e.back and not e.pending
                ]:
                    del _events[idle]
            found = _events.setdefault(event_id, _Event(event_id))
    return found


def _block_ms() -> int:
    return settings.QUEUE_BLOCK_MS


def _hand_out(e: _Event, now: float, asked: bool = False) -> Issued | None:
    """The block's next number, if it has one and its time is not over (under e.lock).
    `asked`: for the join that asked for the block, which takes its first number
    even when Redis answered later than the block's time: Redis took the block after
    that join arrived, so the order holds (docs/line.md)."""
    b = e.block
    if b is None or b.next > b.last or (now >= b.until and not asked):
        return None
    n = b.next
    b.next += 1
    at = (n - b.first) * 2
    token = b.mint(n, b.random[at : at + 2])
    return Issued(n, token, b.at_ms + int((now - b.taken) * 1000))


def _retire(e: _Event, now: float) -> None:
    """Stop handing out the current block (under e.lock): it goes to `back`, and the
    next block's size follows what this one saw."""
    b = e.block
    if b is None:
        return
    e.block = None
    used = b.next - b.first
    if b.next > b.last and now < b.until:  # ran out early: the arrivals outgrew it
        rate = used / max(now - b.asked, 1e-6)
        e.size = max(e.size, min(MOST, e.size * GROWTH, math.ceil(rate * _block_ms() / 1000)))
    else:
        e.size = max(1, min(MOST, used))
    e.back.append((b.member, used))


def _random(count: int) -> bytes:
    """The random bytes of `count` tokens, each pair's first with its top bit clear."""
    mask = _GENERAL >> (16 * (MOST - count))
    return (int.from_bytes(os.urandom(count * 2), "big") & mask).to_bytes(count * 2, "big")


def _call(e: _Event, random: bytes, back: tuple[bytes, int] | None) -> store.Call:
    member, used = back or (b"", 0)
    return _BLOCK.call(
        store.event_keys(e.event_id),
        count=len(random) // 2,
        random=random,
        open_ms=_block_ms() + OPEN_GRACE_MS,
        back=member,
        used=used,
    )


def _first_of(e: _Event, reply: list, random: bytes, asked: float) -> Issued | None:
    """Keep the block Redis gave and hand its first number to the join that asked for
    it (under e.lock); None when the event is not plain."""
    if reply[0] != b"BLOCK":
        e.one_at_a_time_until = time.monotonic() + settings.QUEUE_LINE_REFRESH_MS / 1000
        return None
    _, first, at_ms, gen, member = reply
    now = time.monotonic()
    if e.block is not None:  # another thread's or loop's take came first: both count
        _retire(e, now)
    e.block = _Block(
        first=first,
        last=first + len(random) // 2 - 1,
        member=member,
        asked=asked,
        until=asked + _block_ms() / 1000,
        at_ms=at_ms,
        taken=now,
        random=random,
        mint=tokens.minter(e.event_id, bytes.fromhex(gen.decode())),
        next=first,
    )
    _start_reaper()
    return _hand_out(e, now, asked=True)


# What `_at_hand` answers when the join must take a new block.
_TAKE = object()


def _at_hand(e: _Event) -> Issued | None | object:
    """The block's next number; None when the event's joins go one at a time; else
    _TAKE."""
    now = time.monotonic()
    with e.lock:
        if now < e.one_at_a_time_until:
            return None
        found = _hand_out(e, now)
    return _TAKE if found is None else found


def _next_take(e: _Event) -> Issued | tuple[store.Call, tuple[bytes, int] | None, bytes]:
    """Once this join may take: a number after all (another take came first), or the
    take to send, with a block to give back if one waits, and its random bytes."""
    with e.lock:
        now = time.monotonic()
        found = _hand_out(e, now)
        if found is not None:
            return found
        _retire(e, now)
        back = e.back.pop(0) if e.back else None
        random = _random(e.size)
    return _call(e, random, back), back, random


def issue(event_id: str) -> Issued | None:
    """A new person's number and token from this process's block of the event, taking
    a new block when it needs one; None when the event's joins go one at a time."""
    e = _event(event_id)
    found = _at_hand(e)
    if found is not _TAKE:
        return found
    with e.taking:  # one take at a time; the threads behind it hand out from its block
        take = _next_take(e)
        if isinstance(take, Issued):
            return take
        call, back, random = take
        asked = time.monotonic()
        try:
            reply = store.run(call)
        except BaseException:
            _give_back_later(e, back)
            raise
        with e.lock:
            return _first_of(e, reply, random, asked)


def at_hand(event_id: str) -> Issued | None:
    """A new person's number and token from the block at hand (nearly always), or
    None: then `issue` or `aissue` says whether there is one."""
    found = _at_hand(_event(event_id))
    return None if found is _TAKE else found


async def aissue(event_id: str) -> Issued | None:
    """`issue` on the asyncio client: the joins of one event loop that find the block
    used up wait for one take."""
    e = _event(event_id)
    found = _at_hand(e)
    if found is not _TAKE:
        return found  # (nearly always: from the block at hand)
    loop = asyncio.get_running_loop()
    while (found := _at_hand(e)) is _TAKE:
        pending = e.pending.get(loop)
        if pending is not None:
            await asyncio.shield(pending)
            continue
        pending = e.pending[loop] = loop.create_future()
        try:
            take = _next_take(e)
            if isinstance(take, Issued):
                return take
            call, back, random = take
            asked = time.monotonic()
            try:
                reply = await store.arun(call)
            except BaseException:
                _give_back_later(e, back)
                raise
            with e.lock:
                return _first_of(e, reply, random, asked)
        finally:
            del e.pending[loop]
            pending.set_result(None)
    return found


def _give_back_later(e: _Event, back: tuple[bytes, int] | None) -> None:
    if back is not None:
        with e.lock:
            e.back.insert(0, back)
        _wake.set()


# --- Giving blocks back when no join comes ------------------------------------


def give_back(event_id: str | None = None) -> None:
    """Give back every block of this process (of one event) whose time is over, or
    all of them (`event_id` None: the process is ending), in one round trip each."""
    now = time.monotonic()
    for e in list(_events.values()) if event_id is None else [_event(event_id)]:
        with e.lock:
            if e.block is not None and (event_id is None or now >= e.block.until):
                _retire(e, now)
            backs, e.back = e.back, []
        for i, back in enumerate(backs):
            try:
                store.run(_call(e, b"", back))
            except REDIS_ERRORS as exc:
                log.warning("could not give back a block of %s: %r", e.event_id, exc)
                with e.lock:
                    e.back[:0] = backs[i:]
                break


def _reap() -> None:
    """Give back blocks whose time is over: the process's thread, idle while it holds
    none."""
    while True:
        _wake.wait()
        time.sleep(min(max(_block_ms(), 10), 100) / 1000)
        busy = False
        for event_id, e in list(_events.items()):
            with e.lock:
                due = bool(e.back) or (e.block is not None and time.monotonic() >= e.block.until)
                busy = busy or e.block is not None or bool(e.back)
            if due:
                give_back(event_id)
        if not busy:
            _wake.clear()


def _start_reaper() -> None:
    _wake.set()
    if _reaper != [os.getpid()]:
        with _events_lock:
            if _reaper != [os.getpid()]:
                _reaper[:] = [os.getpid()]
                threading.Thread(target=_reap, name="arrival-blocks", daemon=True).start()


def _forget_in_child() -> None:
    """A forked process holds none of its parent's blocks: handing them out too would
    give two people one number."""
    global _events_lock
    _events_lock = threading.Lock()
    _events.clear()
    _reaper.clear()
    _wake.clear()


async def _give_back_at_close() -> None:
    await asyncio.to_thread(give_back)


os.register_at_fork(after_in_child=_forget_in_child)
# A worker that ends (a restart, a deploy) gives its blocks back, so that the tick need
# not wait out their time: at the ASGI worker's shutdown, and at any process's exit.
store.on_close(_give_back_at_close)
atexit.register(give_back)
