"""The waiting room: thin Python over the Lua scripts in `lua/`.

Each public function is one atomic script call (one Redis round trip), so two app
servers can never interleave a check and an act.
"""

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils.module_loading import import_string

from queue_app import arrivals, cadence, draw, line, presale, tokens
from queue_app import proof as queue_proof
from queue_app.models import EVENT_ID_RE
from queue_app.tokens import Token, issued, issued_place, parse_token
from ticketing import store
from ticketing.conf import setting
from ticketing.errors import DomainError, validation_error

log = logging.getLogger(__name__)


@functools.cache
def _place_gate() -> Callable[[int], bool]:
    return import_string(settings.ACCOUNT_MAY_HOLD_PLACE)


def account_may_hold_place(user_id: int) -> bool:
    """Whether a signed-in account may hold a place on an account-only event (an
    account whose email address must be confirmed first may not). The accounts app
    answers (settings.ACCOUNT_MAY_HOLD_PLACE): the line does not know how."""
    return _place_gate()(user_id)


def parse_event_id(value: object) -> str:
    if value is None or value == "":
        return setting("EVENT_ID")
    if not isinstance(value, str) or not EVENT_ID_RE.match(value):
        raise validation_error("eventId must be 1-64 letters, digits, '.', '_' or '-'.")
    return value


# Each operation of the crowd is one script call: `_<op>_call` binds it, `_<op>`
# reads its reply. The plain function runs it on the sync client (DRF views, pages,
# commands); the `a`-prefixed one on the asyncio client (the fast lane). What each
# passes to its script besides the event's own keys, checked against the script's
# header when this module is imported:
_JOIN_PASSES = (
    "booked account_bucket address_bucket site_bucket proofs old event_id ipad opad account address "
    "solution proofs_until nonce difficulty site site_factor ask code presale_pass"
)
# An event that has had a priority lane is joined with the lane's keys too; any
# other without them (ten fewer keys a join). The script says when it needs them.
_LANE_KEYS = " ".join(f"lane_{name}" for name in store.LINE_KEY_NAMES if name not in ("leftpre", "leftlog"))
_JOIN = store.Caller("join", passes=_JOIN_PASSES, leaves=_LANE_KEYS)
_JOIN_LANE = store.Caller("join", passes=_JOIN_PASSES)
# The events this process has been told have a lane (the join script's LANE).
_with_lane: set[str] = set()
_LEAVE = store.Caller("leave", passes="token")
_POLL = store.Caller("poll", passes="booked token own", reply=line.PollReply)
Call = store.Call


@dataclass(slots=True)
class Joined:
    """A join's answer. (Not frozen, as Position is not: one is made for every
    arrival.)"""

    token: str
    event_id: str
    joined_at: int | None  # ms on Redis' clock; None when the place was kept
    rejoined: bool = False  # rejoin: the place (or the active window) was kept
    # ACTIVE: admitted at once (a safety-net or pass-through event), or a rejoin's kept window
    status: str = "WAITING"
    receipt: str | None = None  # a place of a scheduled start's pre-queue (docs/draw.md)
    # The place's first poll, answered with the join so that an arrival is one request.
    position: "Position | None" = None


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
    event_id: str,
    token: Token | None,
    proof: str | None,
    client: Client,
    presale_code: str | None = None,
    presale_pass: str = "",
) -> tuple[Call, DomainError | None]:
    """join (token None) or rejoin: the script issues and signs a new token when the
    person goes to the back; its index bucket is the new nonce's. A payload that
    does not verify is the script's to refuse, in its order (an unknown event
    first): returned beside the call, for `_joined` to raise with its reason."""
    code = b"" if presale_code is None else presale.code_key(event_id, presale_code)
    try:
        solved = None if proof is None else queue_proof.verify(event_id, proof)
    except DomainError as refusal:
        call = _join_script_call(
            event_id, token, None, client, unverified=True, code=code, presale_pass=presale_pass
        )
        return call, refusal
    return _join_script_call(event_id, token, solved, client, code=code, presale_pass=presale_pass), None


def _join_script_call(
    event_id: str,
    token: Token | None,
    solved: queue_proof.Proof | None,
    client: Client,
    *,
    unverified: bool = False,
    ask: bool = False,
    code: bytes = b"",
    presale_pass: str = "",
) -> Call:
    k, caller = store.event_keys(event_id), _JOIN_LANE if event_id in _with_lane else _JOIN
    if token is None:
        old, booked = b"", k.meta  # no token to look up: its mark is not read (meta stands in)
    else:
        if issued_place(event_id, token)[1]:
            caller = _JOIN_LANE
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
    ipad, opad = tokens.keys()[0].pads
    return caller.call(
        k,
        booked=booked,
        account_bucket=account_bucket,
        address_bucket=address_bucket,
        site_bucket=site_bucket,
        proofs=proofs,
        old=old,
        event_id=event_id,
        ipad=ipad,
        opad=opad,
        account=account,
        address=client.address,
        solution=mark,
        proofs_until=proofs_until,
        nonce=tokens.new_nonce(),
        difficulty=difficulty,
        site=client.site,
        site_factor=settings.IPV6_48_LIMIT_FACTOR,
        ask="1" if ask else "",
        code=code,
        presale_pass=presale_pass,
    )


def _receipt(event_id: str, token: bytes, prequeue: int) -> str | None:
    return draw.receipt(event_id, token).hex() if prequeue else None


def _joined(
    event_id: str, token: Token | None, reply: list, client: Client, unverified: DomainError | None = None
) -> Joined:
    outcome, *rest = reply
    if outcome == b"JOINED":
        return Joined(
            Token.of(rest[1]).text, event_id, rest[0], status="ACTIVE" if rest[3] else "WAITING",
            receipt=_receipt(event_id, rest[1], rest[2]),
        )  # fmt: skip
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
        raise DomainError("EVENT_NOT_FOUND")
    if outcome == b"EVENT_CLOSED":
        raise DomainError("EVENT_CLOSED")
    if outcome == b"EVENT_REJECTING":
        # The operator's message says why, when there is one (docs/modes.md).
        said = line.decoded_message(rest[0])
        if said is None:
            raise DomainError("EVENT_REJECTING")
        raise DomainError("EVENT_REJECTING", said["en"] or said["ko"], crowdMessage=said)
    if outcome == b"ALREADY_BOOKED":
        raise DomainError("ALREADY_BOOKED", reservationId=rest[1].decode())
    if outcome == b"ACCOUNT_REQUIRED" and client.unconfirmed:
        raise DomainError("EMAIL_UNCONFIRMED")
    if outcome == b"ACCOUNT_REQUIRED":
        raise DomainError("ACCOUNT_REQUIRED", "Sign in to join this event's line.")
    if outcome == b"TOO_MANY_PLACES":
        raise DomainError("TOO_MANY_PLACES", most=rest[0])
    if outcome in _PRESALE_REFUSALS:
        raise DomainError(_PRESALE_REFUSALS[outcome])
    if rest[0] == b"invalid" and unverified is not None:
        raise unverified
    if rest[0] == b"used":
        raise DomainError("PROOF_OF_WORK", "This proof of work was used before; solve a new challenge.")
    if rest[0] == b"easier":
        raise DomainError("PROOF_OF_WORK", "The event now asks more proof of work; solve a new challenge.")
    raise DomainError("PROOF_OF_WORK")


# --- Presale (queue_app/presale.py) ---------------------------------------------

# The join script's presale refusals, and the error code each is.
_PRESALE_REFUSALS = {
    b"PRESALE_CODE_REQUIRED": "PRESALE_CODE_REQUIRED",
    b"PRESALE_CODE_INVALID": "PRESALE_CODE_INVALID",
    b"PRESALE_CODE_USED_UP": "PRESALE_CODE_USED_UP",
}


def _presale_pass(event_id: str, client: Client) -> str:
    """The join script's `presale_pass`, once it asked (PRESALE_PASS: the event is in
    its presale and a signed-in account joins): whether the account is listed. The
    only read of Postgres on the join's way, and only then."""
    return "1" if client.account and presale.account_listed(event_id, client.account) else "0"


def _presale_pass_then_close(event_id: str, client: Client) -> str:
    try:
        return _presale_pass(event_id, client)
    finally:
        close_old_connections()  # no request cycle on the fast lane (see _reservation_status_then_close)


# (The fast lane hands signed-in requests to Django's lane, so this is seldom run.)
_apresale_pass = sync_to_async(_presale_pass_then_close, thread_sensitive=True)


def _from_block(event_id: str, issued: arrivals.Issued, token: Token, reply: line.PollReply) -> Joined:
    """A new place of a plain event, its number from this process's block
    (queue_app/arrivals.py), with its first poll: the copy's answer, or Redis' when the
    copy cannot give one (a closed event, a line rebuilt meanwhile)."""
    return Joined(token.text, event_id, issued.joined_at, position=_position(event_id, token, reply))


def _blocks(token: Token | None, proof: str | None) -> bool:
    """Whether a join may take its number from a block: a new person who sent no
    proof of work (one sent is checked by the join script, whatever the event)."""
    return token is None and proof is None and setting("QUEUE_BLOCK_MS") > 0


def _join(event_id: str, token: Token | None, proof: str | None, client: Client, code: str | None) -> Joined:
    if _blocks(token, proof) and (issued := arrivals.issue(event_id)) is not None:
        new = Token.of(issued.token)
        found = line.current(event_id, issued.number).answer(new.raw, issued.number, fresh=True)
        return _from_block(event_id, issued, new, found or store.run(_poll_call(event_id, new)))
    call, unverified = _join_call(event_id, token, proof, client, code)
    reply = store.run(call)
    if reply[0] == b"LANE":
        _with_lane.add(event_id)
        call, unverified = _join_call(event_id, token, proof, client, code)
        reply = store.run(call)
    if reply[0] == b"PRESALE_PASS":
        call, unverified = _join_call(event_id, token, proof, client, code, _presale_pass(event_id, client))
        reply = store.run(call)
    joined = _joined(event_id, token, reply, client, unverified)
    new = parse_token(joined.token)
    number, lane = issued_place(event_id, new)
    found = joined.status == "WAITING" and line.current(event_id, number, lane).answer(
        new.raw, number, fresh=True
    )
    return _with_position(joined, new, found or store.run(_poll_call(event_id, new)), lane)


async def _ajoin(
    event_id: str, token: Token | None, proof: str | None, client: Client, code: str | None
) -> Joined:
    # (`at_hand`: the number and the copy as nearly every join finds them, without a
    # coroutine each.)
    if (
        _blocks(token, proof)
        and (issued := arrivals.at_hand(event_id) or await arrivals.aissue(event_id)) is not None
    ):
        new = Token.of(issued.token)
        copy = line.at_hand(event_id, issued.number) or await line.acurrent(event_id, issued.number)
        found = copy.answer(new.raw, issued.number, fresh=True)
        return _from_block(event_id, issued, new, found or await store.arun(_poll_call(event_id, new)))
    call, unverified = _join_call(event_id, token, proof, client, code)
    reply = await store.arun(call)
    if reply[0] == b"LANE":
        _with_lane.add(event_id)
        call, unverified = _join_call(event_id, token, proof, client, code)
        reply = await store.arun(call)
    if reply[0] == b"PRESALE_PASS":
        listed = await _apresale_pass(event_id, client)
        call, unverified = _join_call(event_id, token, proof, client, code, listed)
        reply = await store.arun(call)
    joined = _joined(event_id, token, reply, client, unverified)
    new = parse_token(joined.token)
    number, lane = issued_place(event_id, new)
    found = joined.status == "WAITING" and (
        line.at_hand(event_id, number, lane) or await line.acurrent(event_id, number, lane)
    ).answer(new.raw, number, fresh=True)
    return _with_position(joined, new, found or await store.arun(_poll_call(event_id, new)), lane)


def _with_position(joined: Joined, token: Token, reply: line.PollReply, lane: bool) -> Joined:
    """The join's answer with its place's first poll. A place waiting is answered
    from the process's copy of the line, which knows everyone ahead of it (as one
    refresh saw them) though maybe not the new place itself yet (`fresh`); one
    admitted already by Redis, as any poll of it is (the join claimed it)."""
    return dataclasses.replace(joined, position=_position(joined.event_id, token, reply, lane))


_ANYONE = Client()


def queue_join(
    *, event_id: str, proof: str | None = None, presale_code: str | None = None, client: Client = _ANYONE
) -> Joined:
    """A new person: a fresh token at the back of the line (or, on an account event,
    the account's live place). During a presale, only with a presale code that has a
    use left (which the place spends) or an account on the allow-list."""
    return _join(event_id, None, proof, client, presale_code)


async def aqueue_join(
    *, event_id: str, proof: str | None = None, presale_code: str | None = None, client: Client = _ANYONE
) -> Joined:
    return await _ajoin(event_id, None, proof, client, presale_code)


def queue_rejoin(
    *,
    event_id: str,
    token: Token,
    proof: str | None = None,
    presale_code: str | None = None,
    client: Client = _ANYONE,
) -> Joined:
    """A returning person (F5): the same place while waiting or active; otherwise a
    new token at the back, the old one left as it was (EXPIRED, or NOT_FOUND). A
    place kept needs no presale code; one at the back does, as a join's."""
    return _join(event_id, token, proof, client, presale_code)


async def aqueue_rejoin(
    *,
    event_id: str,
    token: Token,
    proof: str | None = None,
    presale_code: str | None = None,
    client: Client = _ANYONE,
) -> Joined:
    return await _ajoin(event_id, token, proof, client, presale_code)


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
        raise DomainError("EVENT_NOT_FOUND")
    level = int(difficulty or 0)
    return Challenge(level > 0, queue_proof.challenge(event_id, level))


def _counts_places(fields: list, client: Client) -> bool:
    status, _, cap, account = fields
    return status is not None and int(cap or 0) > 0 and account != b"1" and bool(client.address)


def _may_join(reply: list) -> None:
    """The join script's advice (asked, nothing written): TOO_MANY_PLACES when this
    client is at its cap now. Anything else is the join's own to say."""
    if reply[0] == b"TOO_MANY_PLACES":
        raise DomainError("TOO_MANY_PLACES", most=reply[1])


def queue_challenge(*, event_id: str, client: Client = _ANYONE) -> Challenge:
    """A proof-of-work challenge at the event's difficulty (one cheap HMGET; an event
    without proof of work gets the easiest, so that a client may always solve one).
    On an event that caps places per address, a client at its cap is told so here,
    before it spends a proof of work on a join that would refuse it: advice only,
    the join decides (lua/join.lua, the same check, atomic with the place)."""
    fields = store.client().hmget(store.event_keys(event_id).meta, *_CHALLENGE_FIELDS)
    if _counts_places(fields, client):
        reply = store.run(_join_script_call(event_id, None, None, client, ask=True))
        if reply[0] == b"LANE":
            _with_lane.add(event_id)
            reply = store.run(_join_script_call(event_id, None, None, client, ask=True))
        _may_join(reply)
    return _challenge(event_id, fields)


async def aqueue_challenge(*, event_id: str, client: Client = _ANYONE) -> Challenge:
    fields = await store.batcher().execute("HMGET", store.event_keys(event_id).meta, *_CHALLENGE_FIELDS)
    if _counts_places(fields, client):
        reply = await store.arun(_join_script_call(event_id, None, None, client, ask=True))
        if reply[0] == b"LANE":
            _with_lane.add(event_id)
            reply = await store.arun(_join_script_call(event_id, None, None, client, ask=True))
        _may_join(reply)
    return _challenge(event_id, fields)


@dataclass(frozen=True, slots=True)
class Left:
    removed: bool  # False when the token was not waiting


def _leave_call(event_id: str, token: Token) -> Call:
    _, lane = issued_place(event_id, token)
    return _LEAVE.call(store.event_keys(event_id, lane), token=token.raw)


def _left(event_id: str, removed: int) -> Left:
    if removed < 0:
        raise DomainError("EVENT_NOT_FOUND")
    return Left(removed == 1)


def _left_noted(event_id: str, token: Token, removed: int) -> Left:
    left = _left(event_id, removed)
    if left.removed:
        line.noted_left(event_id, *issued_place(event_id, token))
    return left


def queue_leave(*, event_id: str, token: Token) -> Left:
    return _left_noted(event_id, token, store.run(_leave_call(event_id, token)))


async def aqueue_leave(*, event_id: str, token: Token) -> Left:
    return _left_noted(event_id, token, await store.arun(_leave_call(event_id, token)))


@dataclass(slots=True)
class Position:
    """What a poll shows a person. (Not frozen: a frozen dataclass sets each of its
    fields through object.__setattr__, a cost paid on every poll.)"""

    status: str  # PRE_QUEUE, DRAWING, WAITING, ACTIVE, BOOKED, NOT_SAVED, UNCLAIMED, EXPIRED or NOT_FOUND
    rank: int | None  # 1-based, while WAITING
    total_waiting: int
    ahead: int | None
    behind: int | None
    remaining_seats: int
    seats_on_hold: int  # held by buyers paying now: they may come back
    next_poll_ms: int
    active_expires_at: int | None  # ms, while ACTIVE (or NOT_SAVED in a window still on)
    reservation_id: str | None  # once BOOKED; NOT_SAVED: the booking that was not
    reservation_status: str | None  # once BOOKED: its status in Postgres (HELD, CONFIRMED), if read
    event_id: str
    event_status: str
    sold_out: bool
    eta_seconds: int | None
    opens_at: int | None  # ms: the event's scheduled start, when it has one
    receipt: str | None  # a place of the pre-queue: its receipt in the draw
    draw_position: int | None  # and its drawn position, once drawn
    # The operator's message to the crowd ({id, ko, en, at}), or None: one object per
    # text in each process (line.decoded_message), shared by every answer.
    message: dict | None
    # In the event's priority lane (docs/modes.md): rank, waiting and the estimate
    # are the lane's.
    lane: bool = False


def _poll_call(event_id: str, token: Token, own: bool = True) -> Call:
    _, lane = issued_place(event_id, token)
    k = store.event_keys(event_id, lane)
    return _POLL.call(k, booked=k.booked(token.text), token=token.raw, own="1" if own else "")


# The scripts' words, read once.
_WORDS = {
    word.encode(): word
    for word in (
        "PRE_QUEUE", "DRAWING", "WAITING", "ACTIVE", "BOOKED", "NOT_SAVED", "UNCLAIMED", "EXPIRED",
        "NOT_FOUND", "EVENT_NOT_FOUND",
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


def _position(event_id: str, token: Token, reply: line.PollReply, lane: bool = False) -> Position:
    state = _word(reply.state)
    if state == "EVENT_NOT_FOUND":
        raise DomainError("EVENT_NOT_FOUND")
    _, waiting, seats, event_status, detail, rate, opens_at, prequeue, position, held, message, lane_rate = (
        reply
    )
    rank = detail if state == "WAITING" else None
    rate = float(lane_rate if lane else rate)
    opens_at = int(opens_at) if opens_at else None
    until_start = None if opens_at is None else opens_at - int(time.time() * 1000)
    return Position(
        status=state,
        rank=rank,
        total_waiting=waiting,
        ahead=rank - 1 if rank is not None else None,
        behind=waiting - rank if rank is not None else None,
        remaining_seats=max(seats, 0),  # a recount may go below 0 until releases land
        seats_on_hold=held,
        next_poll_ms=cadence.next_poll_ms(state, rank, until_start),
        active_expires_at=_window_end(state, detail),
        reservation_id=detail.decode().split(":")[0] if state in ("BOOKED", "NOT_SAVED") else None,
        reservation_status=None,  # a BOOKED poll's is read from Postgres (queue_poll)
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
        # The copy's answer carries it decoded; Redis' carries its JSON.
        message=line.decoded_message(message) if message.__class__ is bytes else message,
        lane=lane,
    )


@functools.cache
def _status_reader() -> Callable[[str], str | None]:
    return import_string(settings.RESERVATION_STATUS)


def reservation_status(reservation_id: str) -> str | None:
    """A booked token's reservation's status in Postgres: HELD while a priced event's
    buyer pays, CONFIRMED once paid (a free event's at once). Redis' mark says only
    that the token booked, and which reservation; the booking app owns the row and
    reads it (settings.RESERVATION_STATUS), so the line never imports it. None when
    there is no row yet (BOOKING_PENDING), or Postgres cannot be asked: the poll still
    answers, and a booked person's page leaves the waiting room either way."""
    try:
        return _status_reader()(reservation_id)
    except DatabaseError as exc:
        log.warning("reservation %s: its status was not read for a poll: %s", reservation_id, exc)
        return None


def _reservation_status_then_close(reservation_id: str) -> str | None:
    try:
        return reservation_status(reservation_id)
    finally:
        # The fast lane has no request cycle to end the connection: end it as
        # Django's request_finished does (back to the pool, or closed past its age).
        close_old_connections()


# On asgiref's one thread for thread-sensitive code (Django's connection belongs to
# its thread): each process asks Postgres for at most one poll at a time, on one
# connection, so a burst of booked polls cannot take the pool the bookings need. A
# read on a unique index takes well under a millisecond, and booked polls are few.
_areservation_status = sync_to_async(_reservation_status_then_close, thread_sensitive=True)
# A poll waits this long for the status, then answers without it: Postgres away
# would otherwise hold it for its connect_timeout (5 s) or the pool's timeout (10 s).
RESERVATION_STATUS_WAIT_SEC = 1.0


def queue_poll(*, event_id: str, token: Token, own: bool = True) -> Position:
    """A waiting person is answered from the process's copy of the line
    (queue_app/line.py); everyone else, and anyone it cannot place, by Redis. Only a
    BOOKED answer (rare: a booked person's page leaves) reads Postgres, once.
    `own`: the person's own poll, which claims an admitted place (docs/modes.md);
    False for anyone else asking where a place stands, which changes nothing."""
    number, lane = issued_place(event_id, token)
    reply = line.current(event_id, number, lane).answer(token.raw, number)
    if reply is None:
        reply = store.run(_poll_call(event_id, token, own))
    at = _position(event_id, token, reply, lane)
    if at.status == "BOOKED":
        at.reservation_status = reservation_status(at.reservation_id)
    return at


async def aqueue_poll(*, event_id: str, token: Token) -> Position:
    number, lane = issued_place(event_id, token)
    copy = line.at_hand(event_id, number, lane) or await line.acurrent(event_id, number, lane)
    reply = copy.answer(token.raw, number)
    if reply is None:
        reply = await store.arun(_poll_call(event_id, token))
    at = _position(event_id, token, reply, lane)
    if at.status == "BOOKED":
        try:
            at.reservation_status = await asyncio.wait_for(
                _areservation_status(at.reservation_id), RESERVATION_STATUS_WAIT_SEC
            )
        except TimeoutError:
            log.warning(
                "reservation %s: Postgres did not answer its status for a poll in time", at.reservation_id
            )
    return at


def queue_draw_receipt(*, event_id: str, token: Token) -> draw.SignedReceipt:
    """A place of the pre-queue's receipt, signed by the service (docs/draw.md): its
    holder's proof that the draw counts the place, and once drawn, where."""
    issued(event_id, token)
    found = draw.find(event_id)
    at = queue_poll(event_id=event_id, token=token)
    if at.receipt is None or at.status == "NOT_FOUND":
        raise DomainError("NOT_IN_DRAW")
    return draw.signed_receipt(found, bytes.fromhex(at.receipt))


def queue_join_many(*, event_id: str, count: int, chunk: int = 10_000, distinct: bool = False) -> None:
    """Put `count` fresh tokens in line through the join script, pipelined: the way
    load tests and drills fill a line with millions without HTTP. `distinct`: each
    from another IPv4 address, with a solved proof of work of its own (as the
    event's protections would keep them; the proofs are not verified here)."""
    store.load("join")
    expires = int(time.time()) + queue_proof.VALID_SECONDS
    asked, has_lane = store.client().hmget(store.event_keys(event_id).meta, "proofOfWork", "hasLane")
    difficulty = int(asked or 0)
    if has_lane == b"1":
        _with_lane.add(event_id)  # a pipeline cannot ask again on LANE: pass the lane's keys at once
    n = 0
    while count > 0:
        pipe = store.event_pipeline(event_id)
        for _ in range(min(chunk, count)):
            n += 1
            solved, client = None, _ANYONE
            if distinct:
                solved = queue_proof.Proof(os.urandom(8), expires, difficulty)
                client = Client(address=(0x0B000000 + n).to_bytes(4, "big"))
            store.run(_join_script_call(event_id, None, solved, client), on=pipe)
        count -= len(pipe.execute())
