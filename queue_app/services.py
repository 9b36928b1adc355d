"""The waiting room: thin Python over the Lua scripts in `lua/`.

Each public function is one atomic script call (one Redis round trip), so two app
servers can never interleave a check and an act.
"""

import functools
import logging
import os
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.utils.module_loading import import_string

from queue_app import draw, line, live, tokens
from queue_app import proof as queue_proof
from queue_app.models import EVENT_ID_RE, Draw, Event
from ticketing import metrics
from ticketing import redis as r
from ticketing.errors import REDIS_ERRORS, DomainError, validation_error

log = logging.getLogger(__name__)


@functools.cache
def _place_gate() -> Callable[[int], bool]:
    return import_string(settings.ACCOUNT_MAY_HOLD_PLACE)


def account_may_hold_place(user_id: int) -> bool:
    """Whether a signed-in account may hold a place on an account-only event (an
    account whose email address must be confirmed first may not). The accounts app
    answers (settings.ACCOUNT_MAY_HOLD_PLACE): the line does not know how."""
    return _place_gate()(user_id)


@dataclass(frozen=True, slots=True)
class Token:
    text: str  # canonical UUID form, as clients see it
    raw: bytes  # the 16 bytes kept in Redis

    @classmethod
    def of(cls, raw: bytes) -> "Token":
        return cls(str(uuid.UUID(bytes=raw)), raw)


def parse_token(value: object) -> Token:
    if value is None or value == "":
        raise DomainError("MISSING_TOKEN", "token is required.")
    if not isinstance(value, str) or len(value) > 45:
        raise validation_error("token must be a UUID string.")
    if len(value) == 36 and value[8] == value[13] == value[18] == value[23] == "-" and value.islower():
        # The form this service hands out, as every poll sends it back: read without
        # building a UUID object.
        try:
            raw = bytes.fromhex(value.replace("-", ""))
        except ValueError:
            raw = b""  # not hex after all: uuid's own refusal below
        if len(raw) == 16:  # (fromhex passes over spaces)
            return Token(value, raw)
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise validation_error("token must be a UUID string.") from None
    return Token(str(parsed), parsed.bytes)


# Joins and rejoins refused, counted per event by reason for the operator (the
# admin's event list): error code -> reason.
JOIN_REFUSALS = {
    "RATE_LIMIT": "rate",
    "INVALID_TOKEN": "forged_token",
    "TOO_MANY_PLACES": "cap",
    "PROOF_OF_WORK": "proof_of_work",
}


def issued(event_id: str, token: Token) -> int:
    """The token's arrival number; INVALID_TOKEN when this service did not issue it
    for this event (queue_app/tokens.py). Checked before Redis is asked anything."""
    number = tokens.verify(event_id, token.raw)
    if number is None:
        raise DomainError("INVALID_TOKEN", "This token was not issued for this event.")
    return number


def parse_event_id(value: object) -> str:
    if value is None or value == "":
        return settings.EVENT_ID
    if not isinstance(value, str) or not EVENT_ID_RE.match(value):
        raise validation_error("eventId must be 1-64 letters, digits, '.', '_' or '-'.")
    return value


def _event_not_found(event_id: str) -> DomainError:
    return DomainError("EVENT_NOT_FOUND", f"No event {event_id!r}.")


def _already_booked(reservation_id: bytes) -> DomainError:
    return DomainError(
        "ALREADY_BOOKED", "This token has already booked.", reservationId=reservation_id.decode()
    )


# Each operation of the crowd is one script call: `_<op>_call` names it, `_<op>`
# reads its reply. The plain function runs it on the sync client (DRF views, pages,
# commands); the `a`-prefixed one on the asyncio client (the fast lane).
Call = tuple[str, list[str], list]


@dataclass(frozen=True, slots=True)
class Joined:
    token: str
    event_id: str
    joined_at: int | None  # ms on Redis' clock; None when the place was kept
    rejoined: bool = False  # rejoin: the place (or the active window) was kept
    status: str = "WAITING"  # rejoin: WAITING or ACTIVE
    receipt: str | None = None  # a place of a scheduled start's pre-queue (docs/draw.md)


@dataclass(frozen=True, slots=True)
class Client:
    """Who asks for a place, for the event's protections (lua/join.lua): the
    signed-in account, the client address and an IPv6 client's /48
    (ticketing.ratelimit.client_address). A signed-in account that may not hold a
    place on an account-only event yet (its email address is not confirmed:
    accounts_app/confirm.py) asks as no account, `unconfirmed`, and such an event
    tells it to confirm."""

    account: str = ""
    address: bytes = b""
    site: bytes = b""
    unconfirmed: bool = False


def _join_call(
    event_id: str, token: Token | None, proof: str | None, client: Client
) -> tuple[Call, DomainError | None]:
    """join (token None) or rejoin: the script issues and signs a new token when the
    person goes to the back; its index bucket is the new nonce's. A payload that
    does not verify is the script's to refuse, in its order (an unknown event
    first): returned beside the call, for `_joined` to raise with its reason."""
    try:
        solved = None if proof is None else queue_proof.verify(event_id, proof)
    except DomainError as refusal:
        return _join_script_call(event_id, token, None, client, unverified=True), refusal
    return _join_script_call(event_id, token, solved, client), None


def _join_script_call(
    event_id: str,
    token: Token | None,
    solved: queue_proof.Proof | None,
    client: Client,
    *,
    unverified: bool = False,
    ask: bool = False,
) -> Call:
    k = r.event_keys(event_id)
    if token is None:
        old, booked = b"", k.meta  # no token to look up: its mark is not read (meta stands in)
    else:
        issued(event_id, token)
        old, booked = token.raw, k.booked(token.text)
    mark, proofs, proofs_until, difficulty = "-" if unverified else "", k.meta, 0, ""
    if solved is not None:
        mark, proofs = str(solved.member), k.proofs(solved.mark, solved.expires_at)
        proofs_until = (solved.expires_at // 60 + 1) * 60_000 + 1_000
        difficulty = solved.difficulty
    account = client.account.encode()
    account_bucket = k.owned(b"u" + account) if account else k.meta
    address_bucket = k.owned(b"a" + client.address) if client.address else k.meta
    site_bucket = k.site_owned(b"a" + client.site) if client.site else k.meta
    keys = [
        k.meta, k.seq, k.left, k.leftpre, k.windows, booked, k.popped, account_bucket, address_bucket, proofs,
        k.drawpos, k.pre, k.booked_places, k.nonces, site_bucket,
    ]  # fmt: skip
    ipad, opad = tokens.keys()[0].pads
    args = [
        old, event_id, ipad, opad, account, client.address, mark, proofs_until, tokens.new_nonce(),
        difficulty, client.site, settings.IPV6_48_LIMIT_FACTOR, "1" if ask else "",
    ]  # fmt: skip
    return "join", keys, args


def _receipt(event_id: str, token: bytes, prequeue: int) -> str | None:
    return draw.receipt(event_id, token).hex() if prequeue else None


# Shared connections (a household's Wi-Fi, an office, a mobile carrier's NAT) put
# many people behind one address: the refusal says so, and what each can do,
# without telling them they hold places they may never have taken.
TOO_MANY_PLACES_MESSAGE = (
    "This connection already has as many places in line as this event allows. Connections "
    "are often shared: by a household, an office, or many people on one mobile carrier. Try "
    "another connection (for example mobile data instead of Wi-Fi), or try again later: a "
    "place frees up when someone on this connection leaves the line, books, or their turn ends."
)


def _too_many_places(most: int) -> DomainError:
    return DomainError("TOO_MANY_PLACES", TOO_MANY_PLACES_MESSAGE, most=most)


def _joined(
    event_id: str, token: Token | None, reply: list, client: Client, unverified: DomainError | None = None
) -> Joined:
    outcome, *rest = reply
    if outcome == b"JOINED":
        return Joined(Token.of(rest[1]).text, event_id, rest[0], receipt=_receipt(event_id, rest[1], rest[2]))
    if outcome in (b"WAITING", b"ACTIVE"):  # a rejoin that kept its place
        assert token is not None
        return Joined(
            token.text, event_id, None, rejoined=True, status=outcome.decode(),
            receipt=_receipt(event_id, token.raw, rest[1]),
        )  # fmt: skip
    if outcome == b"HELD":
        return Joined(
            Token.of(rest[1]).text, event_id, None, rejoined=True, status=rest[0].decode(),
            receipt=_receipt(event_id, rest[1], rest[2]),
        )  # fmt: skip
    if outcome == b"EVENT_NOT_FOUND":
        raise _event_not_found(event_id)
    if outcome == b"EVENT_CLOSED":
        raise DomainError("EVENT_CLOSED", "Booking for this event has closed.")
    if outcome == b"ALREADY_BOOKED":
        raise _already_booked(rest[1])
    if outcome == b"ACCOUNT_REQUIRED" and client.unconfirmed:
        raise DomainError("EMAIL_UNCONFIRMED", "Confirm your email address to join this event's line.")
    if outcome == b"ACCOUNT_REQUIRED":
        raise DomainError("ACCOUNT_REQUIRED", "Sign in to join this event's line.")
    if outcome == b"TOO_MANY_PLACES":
        raise _too_many_places(rest[0])
    if rest[0] == b"invalid" and unverified is not None:
        raise unverified
    if rest[0] == b"used":
        raise DomainError("PROOF_OF_WORK", "This proof of work was used before; solve a new challenge.")
    if rest[0] == b"easier":
        raise DomainError("PROOF_OF_WORK", "The event now asks more proof of work; solve a new challenge.")
    raise DomainError("PROOF_OF_WORK", "This event needs a proof of work: GET /api/queue/challenge.")


_ANYONE = Client()


def queue_join(*, event_id: str, proof: str | None = None, client: Client = _ANYONE) -> Joined:
    """A new person: a fresh token at the back of the line (or, on an account event,
    the account's live place)."""
    call, unverified = _join_call(event_id, None, proof, client)
    return _joined(event_id, None, r.run(*call), client, unverified)


async def aqueue_join(*, event_id: str, proof: str | None = None, client: Client = _ANYONE) -> Joined:
    call, unverified = _join_call(event_id, None, proof, client)
    return _joined(event_id, None, await r.arun(*call), client, unverified)


def queue_rejoin(
    *, event_id: str, token: Token, proof: str | None = None, client: Client = _ANYONE
) -> Joined:
    """A returning person (F5): the same place while waiting or active; otherwise a
    new token at the back, the old one left as it was (EXPIRED, or NOT_FOUND)."""
    call, unverified = _join_call(event_id, token, proof, client)
    return _joined(event_id, token, r.run(*call), client, unverified)


async def aqueue_rejoin(
    *, event_id: str, token: Token, proof: str | None = None, client: Client = _ANYONE
) -> Joined:
    call, unverified = _join_call(event_id, token, proof, client)
    return _joined(event_id, token, await r.arun(*call), client, unverified)


@dataclass(frozen=True, slots=True)
class Challenge:
    required: bool
    challenge: dict


# What the challenge reads of the event: whether it exists, its difficulty, and
# whether its join would count this client's places (a cap, without accounts).
_CHALLENGE_FIELDS = ("status", "proofOfWork", "maxPerAddress", "requireAccount")


def _challenge(event_id: str, fields: list) -> Challenge:
    status, difficulty, _, _ = fields
    if status is None:
        raise _event_not_found(event_id)
    level = int(difficulty or 0)
    return Challenge(level > 0, queue_proof.challenge(event_id, level))


def _counts_places(fields: list, client: Client) -> bool:
    status, _, cap, account = fields
    return status is not None and int(cap or 0) > 0 and account != b"1" and bool(client.address)


def _may_join(reply: list) -> None:
    """The join script's advice (asked, nothing written): TOO_MANY_PLACES when this
    client is at its cap now. Anything else is the join's own to say."""
    if reply[0] == b"TOO_MANY_PLACES":
        raise _too_many_places(reply[1])


def queue_challenge(*, event_id: str, client: Client = _ANYONE) -> Challenge:
    """A proof-of-work challenge at the event's difficulty (one cheap HMGET; an event
    without proof of work gets the easiest, so that a client may always solve one).
    On an event that caps places per address, a client at its cap is told so here,
    before it spends a proof of work on a join that would refuse it: advice only,
    the join decides (lua/join.lua, the same check, atomic with the place)."""
    fields = r.client().hmget(r.event_keys(event_id).meta, *_CHALLENGE_FIELDS)
    if _counts_places(fields, client):
        _may_join(r.run(*_join_script_call(event_id, None, None, client, ask=True)))
    return _challenge(event_id, fields)


async def aqueue_challenge(*, event_id: str, client: Client = _ANYONE) -> Challenge:
    fields = await r.batcher().execute("HMGET", r.event_keys(event_id).meta, *_CHALLENGE_FIELDS)
    if _counts_places(fields, client):
        _may_join(await r.arun(*_join_script_call(event_id, None, None, client, ask=True)))
    return _challenge(event_id, fields)


@dataclass(frozen=True, slots=True)
class Left:
    removed: bool  # False when the token was not waiting


def _leave_call(event_id: str, token: Token) -> Call:
    issued(event_id, token)
    k = r.event_keys(event_id)
    keys = [k.meta, k.left, k.leftpre, k.leftlog, k.holes, k.popped, k.drawpos, k.nonces]
    return "leave", keys, [token.raw]


def _left(event_id: str, removed: int) -> Left:
    if removed < 0:
        raise _event_not_found(event_id)
    return Left(removed == 1)


def _left_noted(event_id: str, token: Token, removed: int) -> Left:
    left = _left(event_id, removed)
    if left.removed:
        line.noted_left(event_id, issued(event_id, token))
    return left


def queue_leave(*, event_id: str, token: Token) -> Left:
    return _left_noted(event_id, token, r.run(*_leave_call(event_id, token)))


async def aqueue_leave(*, event_id: str, token: Token) -> Left:
    return _left_noted(event_id, token, await r.arun(*_leave_call(event_id, token)))


# The seed's adaptive polling: the further back, the less often.
_POLL_STEPS_MS = ((100_000, 10_000), (10_000, 5_000), (1_000, 3_000), (100, 2_000))
_ACTIVE_POLL_MS = 2_000
# Before a scheduled start: the seed's slowest step while the start is far; then one
# poll spread over the first seconds after it (the draw takes a few), so that the
# whole pre-queue does not ask in the start's millisecond. While drawing: soon.
_PRE_QUEUE_POLL_MS = 10_000
_AFTER_START_SPREAD_MS = (500, 3_000)
_DRAWING_POLL_MS = (1_000, 3_000)


def next_poll_ms(status: str, rank: int | None, until_start_ms: int | None = None) -> int:
    """Base interval of the seed's table with +/-20 % jitter, so that a crowd that
    joined in the same second does not poll in the same millisecond forever; before
    a scheduled start, a time spread over the seconds after it."""
    if status == "PRE_QUEUE":
        until = max(until_start_ms or 0, 0)
        if until > _PRE_QUEUE_POLL_MS * 1.5:
            return int(_PRE_QUEUE_POLL_MS * random.uniform(0.8, 1.2))
        return until + random.randint(*_AFTER_START_SPREAD_MS)
    if status == "DRAWING":
        return random.randint(*_DRAWING_POLL_MS)
    if status == "ACTIVE":
        base = _ACTIVE_POLL_MS
    elif status == "WAITING":
        base = 1_000
        for above, ms in _POLL_STEPS_MS:
            if rank is not None and rank > above:
                base = ms
                break
    else:
        return 0  # nothing left to wait for
    return int(base * random.uniform(0.8, 1.2))


@dataclass(slots=True)
class Position:
    """What a poll shows a person. (Not frozen: a frozen dataclass sets each of its
    fields through object.__setattr__, a cost paid on every poll.)"""

    status: str  # PRE_QUEUE, DRAWING, WAITING, ACTIVE, BOOKED, NOT_SAVED, EXPIRED or NOT_FOUND
    rank: int | None  # 1-based, while WAITING
    total_waiting: int
    ahead: int | None
    behind: int | None
    remaining_seats: int
    next_poll_ms: int
    active_expires_at: int | None  # ms, while ACTIVE (or NOT_SAVED in a window still on)
    reservation_id: str | None  # once BOOKED; NOT_SAVED: the booking that was not
    event_id: str
    event_status: str
    sold_out: bool
    eta_seconds: int | None
    opens_at: int | None  # ms: the event's scheduled start, when it has one
    receipt: str | None  # a place of the pre-queue: its receipt in the draw
    draw_position: int | None  # and its drawn position, once drawn


def _poll_call(event_id: str, token: Token) -> Call:
    issued(event_id, token)
    k = r.event_keys(event_id)
    keys = [
        k.meta, k.seq, k.popped, k.left, k.holes, k.leftpre, k.windows, k.booked(token.text), k.seats,
        k.drawpos, k.booked_places, k.nonces,
    ]  # fmt: skip
    return "poll", keys, [token.raw]


# The scripts' words, read once.
_WORDS = {
    word.encode(): word
    for word in (
        "PRE_QUEUE", "DRAWING", "WAITING", "ACTIVE", "BOOKED", "NOT_SAVED", "EXPIRED", "NOT_FOUND",
        "EVENT_NOT_FOUND",
        "OPEN", "PAUSED", "CLOSED",
    )
}  # fmt: skip


def _word(reply: bytes) -> str:
    return _WORDS.get(reply) or reply.decode()


def _window_end(state: str, detail: object) -> int | None:
    """ACTIVE: the window's end. NOT_SAVED: its end too while the window is on (the
    detail is `<reservation id>:<end>` then), so the person can book again."""
    if state == "ACTIVE":
        return int(detail)
    if state == "NOT_SAVED" and b":" in detail:
        return int(detail.split(b":")[1])
    return None


def _position(event_id: str, token: Token, reply: list) -> Position:
    state = _word(reply[0])
    if state == "EVENT_NOT_FOUND":
        raise _event_not_found(event_id)
    _, waiting, seats, event_status, detail, rate, opens_at, prequeue, position = reply
    rank = detail if state == "WAITING" else None
    rate = float(rate)
    opens_at = int(opens_at) if opens_at else None
    until_start = None if opens_at is None else opens_at - int(time.time() * 1000)
    return Position(
        status=state,
        rank=rank,
        total_waiting=waiting,
        ahead=rank - 1 if rank is not None else None,
        behind=waiting - rank if rank is not None else None,
        remaining_seats=max(seats, 0),  # a recount may go below 0 until releases land
        next_poll_ms=next_poll_ms(state, rank, until_start),
        active_expires_at=_window_end(state, detail),
        reservation_id=detail.decode().split(":")[0] if state in ("BOOKED", "NOT_SAVED") else None,
        event_id=event_id,
        event_status=_word(event_status),
        sold_out=seats <= 0,
        eta_seconds=(
            round((rank - 1) / rate)
            if rank is not None and rate > 0 and seats > 0 and event_status == b"OPEN"
            else None
        ),
        opens_at=opens_at,
        receipt=_receipt(event_id, token.raw, prequeue),
        draw_position=position or None,
    )


def queue_poll(*, event_id: str, token: Token) -> Position:
    """A waiting person is answered from the process's copy of the line
    (queue_app/line.py); everyone else, and anyone it cannot place, by Redis."""
    number = issued(event_id, token)
    reply = line.current(event_id, number).answer(token.raw, number)
    if reply is None:
        reply = r.run(*_poll_call(event_id, token))
    return _position(event_id, token, reply)


async def aqueue_poll(*, event_id: str, token: Token) -> Position:
    number = issued(event_id, token)
    reply = (await line.acurrent(event_id, number)).answer(token.raw, number)
    if reply is None:
        reply = await r.arun(*_poll_call(event_id, token))
    return _position(event_id, token, reply)


def queue_draw_receipt(*, event_id: str, token: Token) -> draw.SignedReceipt:
    """A place of the pre-queue's receipt, signed by the service (docs/draw.md): its
    holder's proof that the draw counts the place, and once drawn, where."""
    issued(event_id, token)
    found = draw.find(event_id)
    at = queue_poll(event_id=event_id, token=token)
    if at.receipt is None or at.status == "NOT_FOUND":
        raise DomainError("NOT_IN_DRAW", "This place is not in the draw: it joined after the start, or left.")
    return draw.signed_receipt(found, bytes.fromhex(at.receipt))


# --- Admission -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    event_id: str
    outcome: str  # ADMITTED, ALREADY_TICKED, NOT_OPEN, DRAW_DUE, SOLD_OUT, EMPTY, FULL, EVENT_NOT_FOUND
    admitted: int
    waiting: int
    active: int


def _admit_args(event_id: str) -> tuple[list[str], list[str]]:
    k = r.EventKeys(event_id)
    keys = [
        k.meta, k.seq, k.popped, k.left, k.holes, k.windows, k.per_window, k.active, k.seats, k.tick,
        k.admit_log,
    ]  # fmt: skip
    return keys, [draw.LEAD_MS]


def event_admit(event_id: str) -> Tick:
    """One admission tick for one event (at most once per second, see lua/admit.lua)."""
    outcome, *numbers = r.run("admit", *_admit_args(event_id))
    return Tick(event_id, outcome.decode(), *numbers)


@metrics.observe_tick
def events_admit() -> list[Tick]:
    """The tick for every known event: every event's admission script runs, in
    one pipelined round trip.

    Each event's script decides for itself: only OPEN events with seats admit.
    """
    event_ids = sorted(e.decode() for e in r.client().smembers(r.EVENTS_KEY))
    if not event_ids:
        return []
    replies = _admit_all(event_ids)
    refused = [i for i, reply in enumerate(replies) if isinstance(reply, r.redis.exceptions.NoScriptError)]
    if refused:
        # A restarted or flushed server: a script refused NOSCRIPT did not run, so
        # those events' ticks run again once the script is loaded (rather than a
        # SCRIPT LOAD before every tick, for nothing).
        r.load("admit")
        for i, reply in zip(refused, _admit_all([event_ids[i] for i in refused]), strict=True):
            replies[i] = reply
    ticks = []
    for event_id, reply in zip(event_ids, replies, strict=True):
        if isinstance(reply, Exception):
            log.error("admission tick failed for %s: %s", event_id, reply)
            continue
        outcome, *numbers = reply
        if outcome == b"EVENT_NOT_FOUND":  # wiped from Redis: stop ticking it
            r.client().srem(r.EVENTS_KEY, event_id)
            continue
        ticks.append(Tick(event_id, outcome.decode(), *numbers))
    _sample(ticks)
    return ticks


def _admit_all(event_ids: list[str]) -> list:
    pipe = r.client().pipeline(transaction=False)
    for event_id in event_ids:
        r.run("admit", *_admit_args(event_id), on=pipe)
    return pipe.execute(raise_on_error=False)


def _sample(ticks: list[Tick]) -> None:
    """The operators' live page's sample of this second (queue_app/live.py); a tick
    that another beat already ran this second adds none. Losing one is only logged."""
    try:
        live.record({t.event_id: (t.waiting, t.admitted) for t in ticks if t.outcome != "ALREADY_TICKED"})
    except r.REDIS_ERRORS as exc:
        log.warning("live samples not recorded: %r", exc)


def queue_join_many(*, event_id: str, count: int, chunk: int = 10_000, distinct: bool = False) -> None:
    """Put `count` fresh tokens in line through the join script, pipelined: the way
    load tests and drills fill a line with millions without HTTP. `distinct`: each
    from another IPv4 address, with a solved proof of work of its own (as the
    event's protections would keep them; the proofs are not verified here)."""
    r.load("join")
    expires = int(time.time()) + queue_proof.VALID_SECONDS
    difficulty = int(r.client().hget(r.event_keys(event_id).meta, "proofOfWork") or 0)
    n = 0
    while count > 0:
        pipe = r.event_pipeline(event_id)
        for _ in range(min(chunk, count)):
            n += 1
            solved, client = None, _ANYONE
            if distinct:
                solved = queue_proof.Proof(os.urandom(8), expires, difficulty)
                client = Client(address=(0x0B000000 + n).to_bytes(4, "big"))
            r.run(*_join_script_call(event_id, None, solved, client), on=pipe)
        count -= len(pipe.execute())


# --- Operator side -------------------------------------------------------------


class SeatsBelowSold(ValueError):
    pass


class LineStarted(ValueError):
    """A start cannot be set for a line anyone has joined, nor removed from a
    pre-queue anyone has joined."""


def event_publish(event: Event, *, sold: int = 0) -> int:
    """Copy the operator's record into Redis, where the hot paths read it.

    Takes effect on the next request and the next admission tick: no restart.
    Returns seats left.
    """
    k = r.EventKeys(event.event_id)
    fields = {
        "status": event.status,
        "name": event.name,
        "admitPerSecond": event.admit_per_second,
        "windowSeconds": event.active_window_seconds,
        "maxActive": event.max_active_users,
        "maxPerBooking": event.max_seats_per_booking,
        "requireAccount": int(event.require_account),
        "proofOfWork": event.proof_of_work,
        "maxPerAddress": event.max_places_per_address,
        "maxPerBuyer": event.max_seats_per_buyer,
    }
    pairs = [x for item in fields.items() for x in item]
    # A start whose draw has happened is history: a line rebuilt after it (a reset,
    # a Redis that lost its data) is first come, first served.
    drawn = event.opens_at is not None and Draw.objects.filter(event=event, drawn_at__isnull=False).exists()
    opens_at = "" if event.opens_at is None or drawn else int(event.opens_at.timestamp() * 1000)
    outcome, left = r.run(
        "event_sync",
        [k.meta, k.seats, k.seq],
        [event.total_seats, sold, int(time.time() * 1000), opens_at, tokens.new_generation(), *pairs],
    )
    if outcome == b"SEATS_BELOW_SOLD":
        raise SeatsBelowSold(f"{event.event_id}: {event.total_seats} seats is fewer than already sold.")
    if outcome == b"LINE_STARTED":
        raise LineStarted(f"{event.event_id}: people have joined the line; it cannot get a start time now.")
    if outcome == b"PRE_QUEUE_JOINED":
        raise LineStarted(f"{event.event_id}: people have joined the pre-queue; its start can move, not go.")
    r.client().sadd(r.EVENTS_KEY, event.event_id)
    return left


def line_started(event_id: str) -> bool:
    """Whether anyone has joined the line (or its pre-queue): too late to give it a
    scheduled start, or to take one away."""
    return int(r.client().get(r.event_keys(event_id).seq) or 0) > 0


def event_wipe(event_id: str) -> int:
    """Delete every Redis key of the event (its line, counters, marks). Returns how many.

    The record (meta) goes first, in one command: every script that writes checks it,
    so nothing running meanwhile writes back a key the wipe has passed."""
    k = r.EventKeys(event_id)
    return r.client().unlink(k.meta) + r.delete_matching(k.pattern())


def event_live_numbers(event_id: str) -> dict:
    """Waiting, active, seats left, admitted in the last minute and joins refused by
    reason, for operators."""
    k = r.EventKeys(event_id)
    now = r.now_ms(event_id)
    pipe = r.event_pipeline(event_id)
    pipe.get(k.seq).get(k.popped).get(k.holes)
    pipe.get(k.active).get(k.seats).hget(k.meta, "status").lrange(k.admit_log, 0, 60)
    pipe.hgetall(k.refused)
    seq, popped, holes, active, seats, status, ticks, refused = pipe.execute()
    recent = (tick.split(b":") for tick in ticks)
    return {
        "waiting": int(seq or 0) - int(popped or 0) - int(holes or 0),
        "active": int(active or 0),
        "seatsLeft": int(seats) if seats is not None else None,
        "status": status.decode() if status else None,
        "admittedLastMinute": sum(int(n) for second, n in recent if int(second) * 1000 > now - 60_000),
        "joinsRefused": {reason.decode(): int(n) for reason, n in sorted(refused.items())},
    }


def events_seats_left(events: list[Event]) -> dict[str, int]:
    """Seats left of each event as its waiting room counts them: Redis' count, which
    every hold, sale and release moves at once (one pipelined round trip for the
    list). An event whose Redis state is gone (purged after it closed, or lost and
    not yet recovered), or a Redis out of reach, reads from Postgres' seat ledger:
    the list still shows something true rather than an error page."""
    if not events:
        return {}
    pipe = r.client().pipeline(transaction=False)
    for event in events:
        pipe.get(r.EventKeys(event.event_id).seats)
    try:
        counts = pipe.execute()
    except REDIS_ERRORS:
        counts = [None] * len(events)
    return {
        # A recount may leave Redis below 0 until releases land (as the poll says).
        event.event_id: max(int(count), 0) if count is not None else event.total_seats - event.seats_sold
        for event, count in zip(events, counts, strict=True)
    }


metrics.register_live_numbers(event_live_numbers)  # /metrics reads them at scrape time
