"""Support lookup: an operator finds a person's place from what the person can tell
them on the phone (docs/support.md).

The line keeps nothing per waiting person but 2 random bytes per arrival number
(docs/line.md): a place is its token. So a lookup first finds tokens, then reads each
one's place. What a query may be, and where its tokens come from:

    a whole token          itself
    a token's first digits the line: the first 8 hex digits are the line's generation
    (8 or more hex digits)  and the token's random bytes, which the line keeps by
                           number (`nonces`); each number with those bytes gives the
                           token the join issued it (tokens.reissued), kept when it
                           begins with the digits typed. And the reservations' tokens.
    a receipt (16 hex)     a scheduled start's pre-queue: before the draw, the tokens
                           kept in `pre`; after it, the published list, where a
                           receipt's index is its arrival number
    an account             its places on an event that counts places per account
    (username or email)    (the owner hashes, lua/join.lua), and its reservations
    an email address       the reservations of that buyer (and of accounts with it)

Each source is a function `(event, query) -> [Lead]`, named by path in
settings.SUPPORT_SOURCES: the booking app's source knows the reservations, and the
line does not import it (as settings.RESERVATION_STATUS); another source (notify-me's
requests, say) joins the list.

A place is read by lua/place_state.lua, which writes nothing: a poll of an admitted
person is their claim (docs/modes.md), and a lookup must not come back for them.
"""

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db.models import Q
from django.utils.module_loading import import_string
from django.utils.translation import gettext

from queue_app import draw, tokens
from queue_app.models import Draw, Event, NotifyRequest
from queue_app.tokens import Token
from ticketing import store
from ticketing.errors import DomainError, validation_error

# The longest query: an email address's most (RFC 5321).
MAX_QUERY = 254
# A token's first digits must name its line's generation and its random bytes (4 hex
# digits each): fewer would match thousands of places of a long line. With 8, a line
# of 2,000,000 has about 30 places that share them; each digit more divides by 16.
MIN_PREFIX = 8
# Places shown for one query; more are said to be there, to be narrowed down.
MAX_FOUND = 20
# Accounts one query may name (a username, an email address several accounts share).
MAX_ACCOUNTS = 10
# The line's random bytes read per Redis command (2 a number): 1 MiB, 524,288 numbers.
NONCE_CHUNK = 1 << 20

# How a place was found.
TOKEN, PREFIX, RECEIPT, ACCOUNT, EMAIL, NOTIFY = "TOKEN", "PREFIX", "RECEIPT", "ACCOUNT", "EMAIL", "NOTIFY"

_HEX = frozenset("0123456789abcdef")
# What Django's username validator lets a username be made of.
_NAME = re.compile(r"^[\w.@+-]+\Z")


@dataclass(frozen=True, slots=True)
class Query:
    """An operator's query, read once for every source."""

    text: str  # as typed, trimmed
    token: bytes | None  # a whole token (32 hex digits, hyphens or not)
    prefix: str  # MIN_PREFIX to 31 hex digits, lowercase, hyphens dropped: a token's first ones
    receipt: bytes | None  # 16 hex digits: a pre-queue's receipt (a token's first digits, too)
    email: str  # an email address as typed
    name: str  # an account's username or email address, as typed
    short: bool  # hex digits, fewer than MIN_PREFIX: too few for a token's first ones


def parse_query(value: object) -> Query:
    """The query's kinds; VALIDATION_ERROR for a query none of the sources can read."""
    if not isinstance(value, str) or not value.strip():
        raise validation_error(
            gettext("Type a token, its first digits, a receipt, an account or an email address.")
        )
    text = value.strip()
    if len(text) > MAX_QUERY:
        raise validation_error(
            gettext(
                "That is longer than any token, receipt, account or email address (%(n)s characters at most)."
            )
            % {"n": MAX_QUERY}
        )
    digits = text.replace("-", "").lower()
    if not (digits and set(digits) <= _HEX):
        digits = ""
    email = text if "@" in text and _is_email(text) else ""
    name = text if _NAME.match(text) else ""
    if not (len(digits) >= MIN_PREFIX or email or name):
        raise validation_error(
            gettext(
                "“%(query)s” is not a token, a token's first %(n)s or more hex digits, "
                "a receipt (16 hex digits), an account or an email address."
            )
            % {"query": text, "n": MIN_PREFIX}
        )
    return Query(
        text=text,
        token=bytes.fromhex(digits) if len(digits) == 32 else None,
        prefix=digits if MIN_PREFIX <= len(digits) < 32 else "",
        receipt=bytes.fromhex(digits) if len(digits) == 2 * draw.RECEIPT_BYTES else None,
        email=email,
        name=name,
        short=0 < len(digits) < MIN_PREFIX,
    )


def _is_email(text: str) -> bool:
    try:
        validate_email(text)
    except ValidationError:
        return False
    return True


def hyphenated(digits: str) -> str:
    """A token's first hex digits as they begin its UUID text (8-4-4-4-12)."""
    parts, at = [], 0
    for size in (8, 4, 4, 4, 12):
        if at >= len(digits):
            break
        parts.append(digits[at : at + size])
        at += size
    return "-".join(parts)


# --- Sources: a query's tokens --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lead:
    token: bytes  # 16 raw bytes
    found_by: str  # TOKEN, PREFIX, RECEIPT, ACCOUNT, EMAIL


Source = Callable[[Event, Query], Iterable[Lead]]


def by_token(event: Event, query: Query) -> list[Lead]:
    return [Lead(query.token, TOKEN)] if query.token else []


def by_token_prefix(event: Event, query: Query) -> list[Lead]:
    """The line's places whose token begins with the digits typed: the numbers whose
    random bytes are the digits' (read from `nonces`, a chunk at a time), each
    token rebuilt and compared. At most MAX_FOUND + 1 (more are said to be there)."""
    if not query.prefix:
        return []
    head = bytes.fromhex(query.prefix[:8])
    gen = _generation(event.event_id)
    if gen is None or head[:2] != gen:
        return []  # not a token of this line (of one rebuilt since, say): reservations may know it
    # The random bytes' top bit says the priority lane's (or a token issued before
    # the event had a lane): docs/modes.md.
    found, c = [], store.client()
    for lane in (True, False) if head[2] & 0x80 else (False,):
        k = store.event_keys(event.event_id, lane)
        for number in _numbers_with(k.nonces, head[2:4], int(c.get(k.seq) or 0)):
            found += [
                Lead(token, PREFIX)
                for token in tokens.reissued(event.event_id, number, head, lane)
                if token.hex().startswith(query.prefix)
            ]
            if len(found) > MAX_FOUND:
                return found
    return found


def _numbers_with(nonces: str, nonce: bytes, last: int) -> Iterator[int]:
    """The arrival numbers whose random bytes are `nonce` (2 bytes a number, from 1)."""
    c = store.client()
    for start in range(0, 2 * last, NONCE_CHUNK):
        chunk = c.getrange(nonces, start, min(start + NONCE_CHUNK, 2 * last) - 1)
        at = chunk.find(nonce)
        while at != -1:
            if at % 2 == 0:  # a number's own two bytes, not the end of one and the start of the next
                yield (start + at) // 2 + 1
            at = chunk.find(nonce, at + 1)


def _generation(event_id: str) -> bytes | None:
    """The line's generation (meta gen), or None for an event without a line."""
    gen = store.client().hget(store.event_keys(event_id).meta, "gen")
    if gen is None or len(gen) != 4 or not set(gen.decode()) <= _HEX:
        return None
    return bytes.fromhex(gen.decode())


def by_receipt(event: Event, query: Query) -> list[Lead]:
    """A scheduled start's pre-queue place by its receipt: before the draw, the token
    kept in `pre` whose receipt it is; after it, the published list's index is the
    arrival number, whose token is rebuilt from the line."""
    if query.receipt is None or event.opens_at is None:
        return []
    found = Draw.objects.filter(event=event).first()
    if found is None:
        return []
    if found.drawn_at is None:
        token = _pre_queue_token(event.event_id, query.receipt)
        return [Lead(token, RECEIPT)] if token else []
    index = draw.drawn_list(found).index_of(query.receipt)
    gen = _generation(event.event_id)
    if index is None or gen is None:
        return []
    number = index + 1
    nonce = store.client().getrange(store.event_keys(event.event_id).nonces, 2 * number - 2, 2 * number - 1)
    return [
        Lead(token, RECEIPT)
        # (No priority lane with a scheduled start: the drawn places are the general line's.)
        for token in tokens.reissued(event.event_id, number, gen + nonce, lane=False)
        if draw.receipt(event.event_id, token) == query.receipt
    ][:1]


def _pre_queue_token(event_id: str, receipt: bytes) -> bytes | None:
    """The pre-queue's token with this receipt (about a second per 1,000,000 places)."""
    pre, c, at = store.event_keys(event_id).pre, store.client(), 0
    while chunk := c.getrange(pre, 16 * at, 16 * (at + draw.CHUNK) - 1):
        each = [chunk[i : i + 16] for i in range(0, len(chunk) - 15, 16)]
        listed = draw.receipts(event_id, each)
        if receipt in listed:
            return each[listed.index(receipt)]
        at += draw.CHUNK
    return None


def accounts(query: Query) -> list:
    """The accounts a query names: by username, or by email address (either spelled
    in any case)."""
    if not query.name:
        return []
    user = get_user_model()
    named = Q(**{f"{user.USERNAME_FIELD}__iexact": query.name})
    if "@" in query.name:
        named |= Q(**{f"{user.get_email_field_name()}__iexact": query.name})
    return list(user.objects.filter(named).order_by("pk")[:MAX_ACCOUNTS])


def by_account(event: Event, query: Query) -> list[Lead]:
    """An account's places on an event that counts places per account: its tokens in
    the owner hash its id picks (lua/join.lua; other owners share the hash)."""
    k, c, found = store.event_keys(event.event_id), store.client(), []
    for user in accounts(query):
        owner = b"u" + str(user.pk).encode()
        entries = c.hgetall(k.owned(owner))
        found += [Lead(token, ACCOUNT) for token, who in entries.items() if who == owner and len(token) == 16]
    return found


def by_notify_email(event: Event, query: Query) -> list[Lead]:
    """The places whose person left this email address for a notify-me mail
    (queue_app/notify.py): the token while the request keeps it, else rebuilt from
    its arrival number and the random bytes the line keeps for it."""
    if not query.email:
        return []
    rows = NotifyRequest.objects.filter(event=event, email__iexact=query.email)
    gen, found = _generation(event.event_id), []
    for token, number, place in rows.values_list("token", "number", "place")[: MAX_FOUND + 1]:
        if token:
            found.append(Lead(tokens.parse_token(token).raw, NOTIFY))
        elif gen is not None:
            # The number's token in either line (the general one, the priority lane):
            # the one whose hash the request kept.
            for lane in (False, True):
                k = store.event_keys(event.event_id, lane)
                nonce = store.client().getrange(k.nonces, 2 * number - 2, 2 * number - 1)
                if len(nonce) != tokens.NONCE_BYTES:
                    continue  # not a number this line has issued
                found += [
                    Lead(t, NOTIFY)
                    for t in tokens.reissued(event.event_id, number, gen + nonce, lane)
                    if hashlib.sha256(t).hexdigest() == place
                ][:1]
    return found


def sources() -> list[Source]:
    return [import_string(path) for path in settings.SUPPORT_SOURCES]


# --- A place, read ----------------------------------------------------------------


class PlaceState(NamedTuple):
    """lua/place_state.lua's answer (its header names these fields in this order)."""

    state: bytes
    of_line: int = 0
    number: int = 0
    place: int = 0
    rank: int | None = None
    waiting: int = 0
    head: int = 0
    status: bytes = b""
    prequeue: int = 0
    entry: bytes | None = None
    window_seconds: bytes | None = None
    claim: bytes | None = None
    came_back: int = 0
    booked_place: int = 0
    mark: bytes | None = None
    now: int = 0


_PLACE_STATE = store.Caller("place_state", passes="booked token", reply=PlaceState)


def place_state(event_id: str, token: bytes) -> PlaceState:
    k = tokens.line_keys(event_id, token)  # the general line's, or the priority lane's
    return store.run(_PLACE_STATE.call(k, booked=k.booked(Token.of(token).text), token=token))


@dataclass(frozen=True, slots=True)
class Booked:
    """A reservation of the token, as the booking app tells it."""

    pk: int
    reservation_id: str
    status: str
    status_label: str
    seat_count: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Admission:
    """The admission log's entry that admitted a place (lua/lib/line.lua)."""

    first: int  # the places it admitted, first to last
    last: int
    admitted: int  # how many people (the places between that had left were passed)
    window_ends_at: datetime  # recorded
    # Derived, not recorded: the window's end less the event's active window as it is
    # now. Off by the change if the operator changed the window since, and up to a
    # second early for a safety-net arrival let in later in the same second.
    admitted_at: datetime | None


@dataclass(frozen=True, slots=True)
class Claim:
    """An admitted place's claim time (docs/modes.md)."""

    deadline: datetime
    outcome: str  # CLAIMED (came back in time), PASSED (did not: the slot went on), PENDING (may still)


@dataclass(frozen=True, slots=True)
class Place:
    token: str
    found_by: tuple[str, ...]
    status: str  # lua/place_state.lua's state
    signed: bool  # signed by this service for the event (tokens.verify): else nothing else is known
    of_line: bool  # and issued by the line as it is (its generation and random bytes)
    number: int | None  # the arrival number
    lane: bool  # of the priority lane (docs/modes.md): numbers count in each line apart
    place: int | None  # in line: the number, or its drawn position (None until drawn)
    rank: int | None  # while WAITING
    waiting: int | None  # people waiting in the line
    event_status: str
    prequeue: bool
    receipt: str | None  # a pre-queue place's
    admitted: bool  # taken off the head of the line as a person (not as a hole)
    admission: Admission | None  # its log entry, while the log keeps it
    claim: Claim | None  # when a claim time applied
    booked_place: bool  # Redis' bit: the place booked (even if the booking was cancelled since)
    booking_mark: str | None  # the reservation Redis' mark names
    bookings: tuple[Booked, ...]  # Postgres' reservations of the token, oldest first


@dataclass(frozen=True, slots=True)
class Lookup:
    query: Query
    places: list[Place]
    more: bool  # more places matched than are shown (MAX_FOUND): type more of the query


def place_lookup(event: Event, query: object) -> Lookup:
    """The places the query names on this event, each with its number, status and
    history, read without changing anything. VALIDATION_ERROR for a query no source
    can read; EVENT_NOT_FOUND when the event has no line in Redis."""
    parsed = parse_query(query)
    found: dict[bytes, list[str]] = {}
    for source in sources():
        for lead in source(event, parsed):
            ways = found.setdefault(lead.token, [])
            if lead.found_by not in ways:
                ways.append(lead.found_by)
    shown = list(found.items())[:MAX_FOUND]
    texts = {token: Token.of(token).text for token, _ in shown}
    booked = import_string(settings.SUPPORT_BOOKINGS)(event.event_id, list(texts.values()))
    places = [
        _place(event.event_id, token, tuple(ways), tuple(booked.get(texts[token], ())))
        for token, ways in shown
    ]
    places.sort(key=lambda p: (not p.signed, p.number or 0))
    return Lookup(parsed, places, more=len(found) > MAX_FOUND)


def _place(event_id: str, token: bytes, found_by: tuple[str, ...], bookings: tuple[Booked, ...]) -> Place:
    text, signed = Token.of(token).text, tokens.place_of(event_id, token)
    if signed is None:
        # Not signed for this event (or by a key past its grace): its digits mean nothing.
        return Place(
            text, found_by, "NOT_FOUND", False, False, None, False, None, None, None, "", False, None, False,
            None, None, False, None, bookings,
        )  # fmt: skip
    s = place_state(event_id, token)
    state = s.state.decode()
    if state == "EVENT_NOT_FOUND":
        raise DomainError("EVENT_NOT_FOUND")
    of_line = bool(s.of_line)
    mark = s.mark.decode() if s.mark else None
    return Place(
        token=text,
        found_by=found_by,
        status=state,
        signed=True,
        of_line=of_line,
        number=s.number,
        lane=signed[1],
        place=s.place or None,
        rank=s.rank,
        waiting=s.waiting,
        event_status=s.status.decode(),
        prequeue=bool(s.prequeue),
        receipt=draw.receipt(event_id, token).hex() if s.prequeue else None,
        admitted=of_line and 0 < s.place <= s.head and state != "LEFT",
        admission=_admission(s),
        claim=_claim(s),
        booked_place=bool(s.booked_place),
        booking_mark=mark.lstrip("-") if mark else None,
        bookings=bookings,
    )


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _admission(s: PlaceState) -> Admission | None:
    if not s.entry:
        return None
    to, first, ends, admitted = (int(part) for part in s.entry.split(b":"))
    window = int(s.window_seconds) if s.window_seconds and s.window_seconds.isdigit() else None
    return Admission(
        first, to, admitted, _at(ends), _at(ends - window * 1000) if window is not None else None
    )


def _claim(s: PlaceState) -> Claim | None:
    if not s.claim:
        return None
    deadline, counted, _unclaimed = s.claim.decode().partition(":")  # ":" once the tick counted it
    if s.came_back:
        outcome = "CLAIMED"
    elif counted or s.now > int(deadline):
        outcome = "PASSED"
    else:
        outcome = "PENDING"
    return Claim(_at(int(deadline)), outcome)
