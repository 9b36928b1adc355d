"""The line as each web process sees it: an event's counters, cached for a moment.

A waiting person's poll needs the line's head (`popped`), its length (`seq`), who
left before them, the seats left and the event's settings, and their own place,
which their token carries. None of it is theirs alone, so each web process keeps
one copy per event and refreshes it when it is older than QUEUE_LINE_REFRESH_MS
(200 ms unless set): one
Redis round trip (lua/line_state.lua) per event per process per refresh, however
many polls it serves meanwhile. Leavers arrive as a log (5 bytes each, lua/leave.lua)
that the copy reads on from where it stopped, into a bitmap of its own. After a
scheduled start's draw, the drawn positions of the pre-queue (4 bytes a number, never
changed once drawn) are read in chunks of POSITIONS_CHUNK numbers, each once per
process, when a poll first needs one.
The same round trip reads the operator's message to the crowd, which every poll
carries: decoded once per text, then handed to each answer as it is.

How stale an answer can be (docs/line.md): a rank is computed from counters at
most one refresh old, so it is never more than one refresh interval behind. The copy
only ever answers for people still waiting behind the head it knows, which only
grows: everyone at or past that head (admitted, active, expired, booked) is
answered by Redis (lua/poll.lua), so nobody is shown as admitted before the tick
admitted them. A person admitted since the last refresh is shown waiting, at the
front, until the next one.
"""

import asyncio
import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, NamedTuple

import orjson
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from queue_app import tokens
from ticketing import store

log = logging.getLogger(__name__)

_refresh_seconds = settings.QUEUE_LINE_REFRESH_MS / 1000


class PollReply(NamedTuple):
    """A poll's answer, from Redis (lua/poll.lua, whose header names these fields
    in this order: checked when its caller is made) or from the copy of the line.
    Built here for both, so that no answer puts a field in the wrong slot."""

    state: bytes
    waiting: int = 0
    seats: int = 0
    status: bytes = b""
    detail: Any = None  # as the state says: a rank, a window end, a reservation id
    rate: bytes = b"0"
    opens_at: Any = None  # the scheduled start (ms), or None
    prequeue: int = 0  # 1 for a number of the pre-queue
    position: int = 0  # its drawn position, once drawn
    held: int = 0  # seats held by buyers paying now
    # The operator's message: from Redis its JSON (b"" for none); from the copy, decoded
    # already (`decoded_message`), so that an answer carries a reference, not a parse.
    message: Any = None
    lane_rate: bytes = b"0"  # the priority lane's observed rate (the copy's: its line's)


class LineState(NamedTuple):
    """What a refresh reads of a line (lua/line_state.lua, whose header names these
    fields in this order); `status` None for an unknown event."""

    status: bytes | None
    gen: bytes = b""
    rate: bytes = b"0"
    opens_at: bytes = b""
    draw: bytes = b""
    draw_size: bytes = b""
    seq: bytes = b"0"
    popped: bytes = b"0"
    holes: bytes = b"0"
    seats: bytes = b"0"
    chunk: bytes = b""
    length: int = 0
    held: bytes = b"0"
    message: bytes = b""
    lane_rate: bytes = b"0"


@receiver(setting_changed)
def _reread(*, setting: str, **kwargs: Any) -> None:
    global _refresh_seconds
    if setting == "QUEUE_LINE_REFRESH_MS":
        _refresh_seconds = settings.QUEUE_LINE_REFRESH_MS / 1000
    elif setting == "CACHES":  # another Redis: another line
        forget()


# Log bytes read per round trip: 13,107 leavers. A process that starts behind reads
# on in more round trips, once.
LOG_CHUNK = 65_535
# Leavers counted per block of places (4,096 places, 512 bytes of the bitmap).
BLOCK_BYTES = 512
_PRE_QUEUE_FLAG = 1 << 39  # a pre-queue number, not a place (lua/leave.lua)
# Around a scheduled start, Redis' clock decides PRE_QUEUE or DRAWING.
_START_MARGIN_MS = 500
_MAX_EVENTS = 256
# Drawn positions read per round trip: 64 KiB.
POSITIONS_CHUNK = 16_384


@dataclass(slots=True)
class Line:
    """One event's line (its general line, or its priority lane), as last read."""

    event_id: str
    lane: bool = False
    found: bool = False
    status: bytes = b""
    gen: bytes = b""
    admit_rate: bytes = b"0"
    opens_at: int | None = None
    draw: bytes = b""
    draw_size: int | None = None
    seq: int = 0
    popped: int = 0
    holes: int = 0
    seats: int = 0
    held: int = 0  # seats held by buyers paying now
    message: dict | None = None  # the operator's message, decoded (`decoded_message`)
    read_at: float = float("-inf")  # time.monotonic() of the last refresh
    log_read: int = 0  # bytes of the leavers' log applied
    bits: bytearray = field(default_factory=bytearray)  # places that left
    blocks: list[int] = field(default_factory=list)  # set bits per BLOCK_BYTES of `bits`
    prefix: list[int] | None = None  # running sums of `blocks`, rebuilt when they change
    left_pre: set[int] = field(default_factory=set)  # pre-queue numbers that left before the draw
    positions: dict[int, bytes] = field(default_factory=dict)  # chunk -> drawn positions, once drawn
    # Refreshes may overlap (the sync lane's threads, the fast lane's loop): each
    # reply is applied whole, under this lock, and only where the copy stands.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, reply: LineState, offset: int) -> bool:
        """Take in a line_state reply read from log byte `offset`; True when there
        is more to read (the log goes on, or another refresh moved the copy on
        meanwhile, so that this reply's part of the log is not the next one)."""
        with self.lock:
            return self._apply(reply, offset)

    def _apply(self, reply: LineState, offset: int) -> bool:
        if offset != self.log_read:
            return True
        if reply.status is None:
            self.found = False
            return False
        chunk, length = reply.chunk, reply.length
        gen = bytes.fromhex(reply.gen.decode())
        if gen != self.gen or length < self.log_read:  # a line rebuilt from nothing: start over
            misread = self.log_read != 0  # the chunk is from the old line's offset
            self.bits, self.blocks, self.prefix, self.left_pre, self.positions, self.log_read = (
                bytearray(),
                [],
                None,
                set(),
                {},
                0,
            )
            self.gen = gen
            if misread:
                return True
        self.found, self.status, self.gen = True, reply.status, gen
        self.admit_rate, self.draw = reply.lane_rate if self.lane else reply.rate, reply.draw
        self.opens_at = int(reply.opens_at) if reply.opens_at else None
        self.draw_size = int(reply.draw_size) if reply.draw_size else None
        self.seq, self.popped = int(reply.seq), int(reply.popped)
        self.holes, self.seats, self.held = int(reply.holes), int(reply.seats), int(reply.held)
        self.message = decoded_message(reply.message)
        usable = len(chunk) - len(chunk) % 5
        for at in range(0, usable, 5):
            self._left(int.from_bytes(chunk[at : at + 5], "big"))
        self.log_read += usable
        return self.log_read < length

    def _left(self, logged: int) -> None:
        if logged & _PRE_QUEUE_FLAG:
            self.left_pre.add(logged ^ _PRE_QUEUE_FLAG)
            return
        byte, mask = logged >> 3, 0x80 >> (logged & 7)
        if byte >= len(self.bits):
            self.bits.extend(bytes(byte + 1 - len(self.bits)))
        if self.bits[byte] & mask:
            return
        self.bits[byte] |= mask
        block = byte // BLOCK_BYTES
        if block >= len(self.blocks):
            self.blocks.extend([0] * (block + 1 - len(self.blocks)))
        self.blocks[block] += 1
        self.prefix = None

    def left_upto(self, place: int) -> int:
        """How many of places 0..place left."""
        if place < 0:
            return 0
        byte = place >> 3
        if self.prefix is None:
            self.prefix = [0, *accumulate(self.blocks)]
        if byte >= len(self.bits):
            return self.prefix[-1]  # all who left (a place at the back: a join's)
        block = byte // BLOCK_BYTES
        count = self.prefix[min(block, len(self.blocks))]
        count += int.from_bytes(self.bits[block * BLOCK_BYTES : byte], "big").bit_count()
        return count + (self.bits[byte] >> (7 - (place & 7))).bit_count()

    def is_left(self, place: int) -> bool:
        byte = place >> 3
        return byte < len(self.bits) and bool(self.bits[byte] & (0x80 >> (place & 7)))

    def drawn(self, number: int) -> bool:
        """Whether the number is of a pre-queue whose order is drawn."""
        return self.draw == b"DONE" and self.draw_size is not None and number <= self.draw_size

    def missing_positions(self, number: int) -> int | None:
        """The chunk of drawn positions a poll of this number needs and the copy has
        not read yet, if any."""
        chunk = (number - 1) // POSITIONS_CHUNK
        return chunk if self.found and self.drawn(number) and chunk not in self.positions else None

    def position(self, number: int) -> int | None:
        found = self.positions.get((number - 1) // POSITIONS_CHUNK)
        at = (number - 1) % POSITIONS_CHUNK * 4
        if found is None or at + 4 > len(found):
            return None
        return int.from_bytes(found[at : at + 4], "big")

    def answer(self, token: bytes, number: int, fresh: bool = False) -> PollReply | None:
        """A poll's answer for a person still waiting behind the head, in the shape
        of lua/poll.lua's reply; None when Redis must answer (see the module).
        `fresh`: the token was just issued or found waiting by Redis (the join's
        first poll), so a number past the copy's last is a place, not a stranger."""
        if not self.found or self.status == b"CLOSED" or token[:2] != self.gen:
            return None
        waiting = max(self.seq, number) - self.popped - self.holes
        prequeue, place = 0, number
        if self.drawn(number):
            place = self.position(number)
            if place is None:
                return None
            prequeue = 1
        elif self.draw in (b"PENDING", b"DONE") and (self.draw_size is None or number <= self.draw_size):
            if self.draw == b"DONE" or number in self.left_pre:
                return None  # a leaver: Redis knows
            state = None
            if self.draw_size is not None:
                state = b"DRAWING"
            elif self.opens_at is not None:
                now = time.time() * 1000
                if now < self.opens_at - _START_MARGIN_MS:
                    state = b"PRE_QUEUE"
                elif now >= self.opens_at + _START_MARGIN_MS:
                    state = b"DRAWING"
            if state is None:
                return None
            return self._reply(state, waiting, prequeue=1)
        if number > self.seq:
            if not fresh:
                return None  # joined since the last refresh: Redis knows
            self.seq = number  # the line is at least this long: so the next polls say
        if place <= self.popped:
            return None  # at or past the head
        if self.is_left(place):
            return self._reply(b"NOT_FOUND", waiting, prequeue=prequeue, position=place if prequeue else 0)
        rank = place - self.popped - (self.left_upto(place - 1) - self.left_upto(self.popped))
        return self._reply(
            b"WAITING", max(waiting, rank), detail=rank, prequeue=prequeue, position=place if prequeue else 0
        )

    def _reply(
        self, state: bytes, waiting: int, *, detail: int | None = None, prequeue: int = 0, position: int = 0
    ) -> PollReply:
        return PollReply(
            state=state,
            waiting=waiting,
            seats=self.seats,
            status=self.status,
            detail=detail,
            rate=self.admit_rate,
            opens_at=self.opens_at,
            prequeue=prequeue,
            position=position,
            held=self.held,
            message=self.message,
            lane_rate=self.admit_rate,
        )


_MESSAGE_KEYS = {"id", "ko", "en", "at"}


@functools.lru_cache(maxsize=16)
def decoded_message(raw: bytes) -> dict | None:
    """The operator's message to the crowd as polls show it, from the JSON the event's
    record holds in Redis (queue_app/events.py), or None for none. Parsed once per
    process for each text: every refresh of a copy and every answer from Redis reads
    the same bytes until the operator changes them, and gets this same object (which
    nobody changes). A text that does not read as a message is shown as none, and
    logged (once)."""
    if not raw:
        return None
    try:
        found = orjson.loads(raw)
        if found.keys() == _MESSAGE_KEYS:
            return found
    except (orjson.JSONDecodeError, AttributeError):
        pass
    log.warning("an event's message in Redis is not one: %r", raw[:200])
    return None


_lines: dict[str, Line] = {}
_locks: dict[str, threading.Lock] = {}
_pending: dict[tuple[asyncio.AbstractEventLoop, str, Any], asyncio.Future] = {}


_LINE_STATE = store.Caller("line_state", passes="offset most", reply=LineState)


def _call(line: Line, offset: int) -> store.Call:
    return _LINE_STATE.call(store.event_keys(line.event_id, line.lane), offset=offset, most=LOG_CHUNK)


def _refresh(line: Line) -> None:
    started = time.monotonic()
    while True:
        offset = line.log_read
        if not line.apply(store.run(_call(line, offset)), offset):
            break
    line.read_at = started


async def _arefresh(line: Line) -> None:
    started = time.monotonic()
    while True:
        offset = line.log_read
        if not line.apply(await store.arun(_call(line, offset)), offset):
            break
    line.read_at = started


def _line(line_id: str, event_id: str, lane: bool) -> Line:
    found = _lines.get(line_id)
    if found is None:
        if len(_lines) >= _MAX_EVENTS:
            _lines.pop(next(iter(_lines)))
        found = _lines[line_id] = Line(event_id, lane)
    return found


def _positions_range(line: Line, chunk: int) -> tuple[str, int, int]:
    return (
        store.event_keys(line.event_id).drawpos,
        chunk * POSITIONS_CHUNK * 4,
        (chunk + 1) * POSITIONS_CHUNK * 4 - 1,
    )


def _took_positions(line: Line, chunk: int, gen: bytes, read: bytes) -> None:
    # Kept only for the line they were read for, and only if there were any (none:
    # the line was wiped meanwhile, and Redis will say so).
    with line.lock:
        if read and line.gen == gen:
            line.positions[chunk] = read


def current(event_id: str, number: int = 0, lane: bool = False) -> Line:
    """The event's line (`lane`: its priority lane), refreshed first when older than
    the refresh interval (one refresh at a time per line: the other threads wait for
    it), with the drawn positions that `number`'s poll needs."""
    line_id = tokens.signed_for(event_id, lane)
    line = _line(line_id, event_id, lane)
    if time.monotonic() - line.read_at >= _refresh_seconds:
        with _locks.setdefault(line_id, threading.Lock()):
            if time.monotonic() - line.read_at >= _refresh_seconds:
                _refresh(line)
    chunk = line.missing_positions(number)
    if chunk is not None:
        with _locks.setdefault(line_id, threading.Lock()):
            if chunk not in line.positions:
                gen = line.gen
                _took_positions(line, chunk, gen, store.client().getrange(*_positions_range(line, chunk)))
    return line


async def _once(event_id: str, what: Any, work: Any) -> None:
    """Run `work()` once for the polls of one event loop that need `what` at the
    same time: the others wait for it."""
    loop = asyncio.get_running_loop()
    pending = _pending.get((loop, event_id, what))
    if pending is None:
        pending = _pending[(loop, event_id, what)] = loop.create_future()
        try:
            await work()
            pending.set_result(None)
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: only the waiters below raise it
            raise
        finally:
            del _pending[(loop, event_id, what)]
    else:
        await asyncio.shield(pending)


def at_hand(event_id: str, number: int = 0, lane: bool = False) -> Line | None:
    """The line as `acurrent` would give it without waiting (nearly always: a copy
    read within the refresh interval, with what `number`'s poll needs), else None."""
    line = _lines.get(tokens.signed_for(event_id, lane))
    if (
        line is None
        or time.monotonic() - line.read_at >= _refresh_seconds
        or line.missing_positions(number) is not None
    ):
        return None
    return line


async def acurrent(event_id: str, number: int = 0, lane: bool = False) -> Line:
    """`current` on the asyncio client: the polls of one event-loop turn that find
    the copy stale all wait for one refresh."""
    line_id = tokens.signed_for(event_id, lane)
    line = _line(line_id, event_id, lane)
    if time.monotonic() - line.read_at >= _refresh_seconds:
        await _once(line_id, "state", lambda: _arefresh(line))
    chunk = line.missing_positions(number)
    if chunk is not None:

        async def read() -> None:
            gen = line.gen
            found = await store.batcher().execute("GETRANGE", *_positions_range(line, chunk))
            _took_positions(line, chunk, gen, found)

        await _once(line_id, chunk, read)
    return line


def noted_left(event_id: str, number: int, lane: bool = False) -> None:
    """A leave this process made: its own copy knows at once (others, at their next
    refresh)."""
    line = _lines.get(tokens.signed_for(event_id, lane))
    if line is None or not line.found:
        return
    with line.lock:
        if line.drawn(number):
            place = line.position(number)
            if place is not None:
                line._left(place)
            return
        if line.draw in (b"PENDING", b"DONE") and (line.draw_size is None or number <= line.draw_size):
            if line.draw == b"PENDING":
                line.left_pre.add(number)
            return
        line._left(number)


def forget() -> None:
    """Drop every copy (tests that rebuild lines under the same event id)."""
    _lines.clear()
