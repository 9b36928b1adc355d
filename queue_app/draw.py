"""The draw of a scheduled start's pre-queue: a random order anyone can check.

People who join before an event's start (`Event.opens_at`) enter the pre-queue:
their tokens carry arrival numbers 1..P as usual, but the order they are admitted
in is drawn at the start. The algorithm (docs/draw.md; docs/verify_draw.py restates
it without this project, for anyone to run):

    commitment  = SHA-256(seed)             shown from the moment the start is set
    receipt     = SHA-256("receipt" 0x00 eventId 0x00 token)[:8]
                                             each pre-queue place's public id
    list        = the P receipts sorted (as bytes): an order nobody chooses
    listDigest  = SHA-256(the list, concatenated)
    finalSeed   = SHA-256(seed || listDigest)
    words       = SHA-256(finalSeed || 0) || SHA-256(finalSeed || 1) || ...
                  (counters 8 bytes big-endian), read as 64-bit big-endian numbers
    order       = the list shuffled by Fisher-Yates: for i = P-1 down to 1, the
                  k-th step (k from 0) swaps places i and words[k] mod (i+1);
                  position 1 is place 0 afterwards

The seed is 32 random bytes chosen when the start is scheduled, kept secret until
the draw, then published with the list: each receipt with its drawn position. The
commitment stops the seed from being chosen after the entries are known; mixing
the list into the final seed stops anyone who knows the seed from knowing the order
before the pre-queue closes. The list is sorted, not in the order people joined,
because the service knows that order alone: a draw over it could be redone over
another order that suits the service, and nothing would show it.
(A shuffle, where a sort by per-receipt keys would be as fair, because it needs one
hash per four places, which keeps 2,000,000 places within seconds of Python. The
modulo's bias is below 2^-32 for any pre-queue this service can hold.)

The draw runs in a Celery task, off the request path: the admission tick reports
DRAW_DUE from LEAD_MS before the start on, and `dispatch` claims the event for one
run. Until the start, the run reads the pre-queue's tokens as it grows (they are
kept by arrival number in a string of their own, lua/join.lua), computes their
receipts and sorts them, so that at the start only the last arrivals are left to
read and sort in. Then it closes the pre-queue (lua/draw_close.lua), draws,
publishes the draw in the database, writes each number's position (4 bytes a
place) to a key of its own, and lua/draw_done.lua puts it in place at once.
Admission needs nothing more: it moves along places (lua/admit.lua), and a
pre-queue token's place is its number's drawn position. A run that dies is run
again by the next tick once its claim expires; every run computes the same order.
"""

import hashlib
import logging
import os
import sys
import time
from array import array
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from itertools import islice

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import timezone

from queue_app.models import Draw, Event
from ticketing import store
from ticketing.errors import DomainError, validation_error

log = logging.getLogger(__name__)

RECEIPT_BYTES = 8
# A run's claim on its event; renewed as the run goes, so that a run that died is
# replaced within this time.
CLAIM_MS = 30_000
# Tokens read per Redis command.
CHUNK = 50_000
# How long before the start a run begins reading the pre-queue: long enough to
# read 2,000,000 places, short enough not to hold a worker for long.
LEAD_MS = 30_000

_DRAW_CLOSE = store.Caller("draw_close")
_DRAW_DONE = store.Caller("draw_done", passes="runpos draw_size")


def receipt(event_id: str, token: bytes) -> bytes:
    """The public id of a pre-queue place: names it in the published list without
    revealing its token."""
    return receipts(event_id, [token])[0]


def receipts(event_id: str, tokens: list[bytes]) -> list[bytes]:
    prefix, sha256 = b"receipt\0" + event_id.encode() + b"\0", hashlib.sha256
    return [sha256(prefix + token).digest()[:RECEIPT_BYTES] for token in tokens]


def list_digest(receipts: list[bytes]) -> bytes:
    """SHA-256 of the receipts sorted, concatenated: the same whatever order they
    are given in."""
    return hashlib.sha256(b"".join(sorted(receipts))).digest()


def final_seed(seed: bytes, digest: bytes) -> bytes:
    return hashlib.sha256(seed + digest).digest()


def shuffled(seed: bytes, receipts: list[bytes], ordered: list[int] | None = None) -> list[int]:
    """The indices of `receipts` in drawn order. The shuffle runs over the receipts
    sorted, so the order they are given in (the order they joined, say) changes
    nothing: each receipt's position depends on the seed and the set of receipts.
    `ordered`: the indices sorted by receipt already, if the caller has them
    (shuffled in place)."""
    count = len(receipts)
    order = sorted(range(count), key=receipts.__getitem__) if ordered is None else ordered
    digest = hashlib.sha256(b"".join([receipts[i] for i in order])).digest()
    final, sha256 = final_seed(seed, digest), hashlib.sha256
    blocks = (count + 2) // 4  # count - 1 words of 8 bytes, four per hash
    words = array("Q", b"".join([sha256(final + c.to_bytes(8, "big")).digest() for c in range(blocks)]))
    if sys.byteorder == "little":
        words.byteswap()
    for i, word in zip(range(count - 1, 0, -1), words, strict=False):
        j = word % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def positions(seed: bytes, receipts: list[bytes]) -> array:
    """Each receipt's drawn position (1 is first), in the receipts' order."""
    return _positions(shuffled(seed, receipts))


def _positions(drawn: list[int]) -> array:
    table = array("I", bytes(4 * len(drawn)))  # 4 bytes on every platform CPython runs on
    for position, index in enumerate(drawn, 1):
        table[index] = position
    return table


# --- Running it ----------------------------------------------------------------


def dispatch(event_id: str) -> bool:
    """Claim the event's draw for one run; False while another run holds it."""
    return bool(
        store.client().set(store.event_keys(event_id).draw_claim, os.urandom(8).hex(), nx=True, px=CLAIM_MS)
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    event_id: str
    outcome: str  # DONE, ALREADY (another run finished first), NOT_DUE, NO_DRAW, EVENT_NOT_FOUND
    size: int = 0
    seconds: float = 0.0  # from the close of the pre-queue
    stages: dict[str, float] = field(default_factory=dict)  # seconds per step, for benchmarks


def run(event_id: str) -> Outcome:
    """Draw the event's pre-queue and put the order in place (see the module's
    docstring). Begun before the start, it reads ahead until the start. Safe to run
    again, or twice at once."""
    k = store.event_keys(event_id)
    client = store.client()
    draw = Draw.objects.get(event__event_id=event_id)
    tokens: list[bytes] = []
    listed: list[bytes] = []
    ordered: list[int] = []  # the indices of `listed`, sorted by receipt as far as read

    def read(upto: int) -> None:
        """The pre-queue's tokens up to number `upto`, and their receipts."""
        while len(tokens) < upto:
            got = client.getrange(k.pre, 16 * len(tokens), 16 * min(len(tokens) + CHUNK, upto) - 1)
            if not got or len(got) % 16:
                raise RuntimeError(f"{event_id}: the pre-queue holds {len(tokens)} of {upto} places")
            more = [got[at : at + 16] for at in range(0, len(got), 16)]
            tokens.extend(more)
            listed.extend(receipts(event_id, more))
            _renew(k)

    def sort_in() -> None:
        """Sort the receipts read since into `ordered`. Timsort merges the part
        already sorted with the rest in about one pass: sorting ahead of the start
        leaves only the last arrivals to sort at it (a second less at 2,000,000)."""
        ordered.extend(range(len(ordered), len(listed)))
        ordered.sort(key=listed.__getitem__)

    # Before the start: keep up with the pre-queue as it grows.
    while (reply := store.run(_DRAW_CLOSE.call(k)))[0] == b"NOT_DUE":
        until = reply[1] - store.now_ms(event_id)
        if until > LEAD_MS * 2:  # the start was moved later: a later tick comes back
            client.delete(k.draw_claim)
            return Outcome(event_id, "NOT_DUE")
        read(client.strlen(k.pre) // 16)
        if len(listed) - len(ordered) > len(ordered) // 8:  # by steps, not at every read
            sort_in()
        _renew(k)  # waiting is working: no second run while this one waits
        time.sleep(min(max(until, 10), 200) / 1000)
    if reply[0] != b"CLOSED":
        return Outcome(event_id, reply[0].decode())

    started = time.monotonic()
    stages: dict[str, float] = {}

    def stage(name: str) -> None:
        stages[name] = time.monotonic() - started - sum(stages.values())

    size = reply[1]
    try:
        read(size)
    except RuntimeError:
        # The other run of two at once finished first: its switch removed the
        # pre-queue this one was still reading.
        if client.hget(k.meta, "draw") == b"DONE":
            return Outcome(event_id, "ALREADY")
        raise
    stage("read")
    if len(ordered) < len(listed):
        sort_in()
    stage("sort")
    drawn = shuffled(bytes(draw.seed), listed, ordered)
    table = _positions(drawn)
    if sys.byteorder == "little":  # big-endian, as the scripts (and the published positions) read them
        table.byteswap()
    stage("order")

    # The run's positions are written to Redis (in a thread: mostly waiting on the
    # socket) while the draw is published in the database. Both are done before the
    # switch: once a poll shows a drawn position, the list that proves it is there.
    run_positions = k.draw_run(os.urandom(4).hex())
    with ThreadPoolExecutor(1) as pool:
        written = pool.submit(_write, run_positions, table.tobytes())
        Draw.objects.filter(pk=draw.pk, drawn_at__isnull=True).update(
            size=size, receipts=b"".join(listed), positions=table.tobytes(), drawn_at=timezone.now()
        )
        written.result()
    stage("publish and write")
    outcome = store.run(_DRAW_DONE.call(k, runpos=run_positions, draw_size=size))
    stage("switch")
    client.delete(k.draw_claim)
    result = Outcome(event_id, outcome.decode(), size, time.monotonic() - started, stages)
    log.info("draw %s: %s, %d in the pre-queue, %.2f s", event_id, result.outcome, size, result.seconds)
    return result


def _renew(k: store.EventKeys) -> None:
    store.client().pexpire(k.draw_claim, CLAIM_MS)


def _write(run_positions: str, positions: bytes) -> None:
    """The run's positions, expiring unless put in place (a run that dies leaves
    nothing behind for long)."""
    if positions:
        store.client().set(run_positions, positions, px=CLAIM_MS * 10)


# --- What is published ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    """An event's draw as anyone may see it: the commitment from the moment the
    start is scheduled; the seed and the order once drawn."""

    event_id: str
    opens_at: int  # ms
    commitment: str
    status: str  # SCHEDULED (before the start), DRAWING, DRAWN
    seed: str | None = None
    size: int | None = None
    list_digest: str | None = None
    final_seed: str | None = None
    receipt: str | None = None  # asked for, with its position
    position: int | None = None
    public_key: str = ""  # of the key that signs receipts (hex), shown with the commitment


def find(event_id: str) -> Draw:
    """The event's draw (EVENT_NOT_FOUND, or NO_DRAW for an event without a start)."""
    found = Draw.objects.select_related("event").filter(event__event_id=event_id).first()
    if found is None or found.event.opens_at is None:
        if found is None and not Event.objects.filter(event_id=event_id).exists():
            raise DomainError("EVENT_NOT_FOUND")
        raise DomainError("NO_DRAW")
    return found


def parse_receipt(value: object) -> bytes | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) != 2 * RECEIPT_BYTES:
        raise validation_error(f"receipt must be {2 * RECEIPT_BYTES} hexadecimal digits.")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise validation_error(f"receipt must be {2 * RECEIPT_BYTES} hexadecimal digits.") from None


def published(*, event_id: str, receipt: bytes | None = None) -> Published:
    """The event's draw; with a receipt, that place's position (RECEIPT_NOT_FOUND
    when the draw has no such place; NOT_DRAWN before the draw)."""
    found = find(event_id)
    seed = bytes(found.seed)
    opens_at = int(found.event.opens_at.timestamp() * 1000)
    if found.drawn_at is None:
        if receipt is not None:
            raise DomainError("NOT_DRAWN")
        status = "DRAWING" if found.event.opens_at <= timezone.now() else "SCHEDULED"
        return Published(event_id, opens_at, found.commitment, status, public_key=public_key())
    listed = drawn_list(found)
    position = None
    if receipt is not None:
        position = listed.position_of(receipt)
        if position is None:
            raise DomainError("RECEIPT_NOT_FOUND")
    digest = listed.digest
    return Published(
        event_id,
        opens_at,
        found.commitment,
        "DRAWN",
        seed=seed.hex(),
        size=found.size,
        list_digest=digest.hex(),
        final_seed=final_seed(seed, digest).hex(),
        receipt=None if receipt is None else receipt.hex(),
        position=position,
        public_key=public_key(),
    )


@dataclass(frozen=True, slots=True)
class Listed:
    """A drawn list as published: the receipts in the order they joined, 8 bytes
    each, and each one's drawn position, 4 bytes big-endian; and the list's digest
    (of the receipts sorted)."""

    receipts: bytes
    positions: bytes
    digest: bytes

    def index_of(self, receipt: bytes) -> int | None:
        """Where a receipt is in the list, which is the order they joined: its
        place's arrival number less one (a search at C speed, keeping only a match
        on an entry's boundary)."""
        at = self.receipts.find(receipt)
        while at != -1 and at % RECEIPT_BYTES:
            at = self.receipts.find(receipt, at + 1)
        return None if at == -1 else at // RECEIPT_BYTES

    def position_of(self, receipt: bytes) -> int | None:
        """A receipt's drawn position."""
        index = self.index_of(receipt)
        if index is None:
            return None
        return int.from_bytes(self.positions[4 * index : 4 * index + 4], "big")

    def entries(self) -> Iterator[tuple[bytes, int]]:
        """(receipt, position) of each place, in the order they joined."""
        receipts, positions = self.receipts, self.positions
        for i in range(len(receipts) // RECEIPT_BYTES):
            yield receipts[8 * i : 8 * i + 8], int.from_bytes(positions[4 * i : 4 * i + 4], "big")

    def lines(self) -> Iterator[bytes]:
        """ "<receipt> <position>", one line per place, 10,000 lines a chunk."""
        entries = self.entries()
        while chunk := list(islice(entries, 10_000)):
            yield "".join(f"{receipt.hex()} {position}\n" for receipt, position in chunk).encode()


_listed_cache: dict[tuple, Listed] = {}


def drawn_list(found: Draw) -> Listed:
    """The published list. Once drawn it never changes, so each process reads it
    from the database, and sorts it for its digest, once (24 MB and about a second
    for 2,000,000 places)."""
    cached = (found.pk, found.drawn_at)
    listed = _listed_cache.get(cached)
    if listed is None:
        receipts, positions = Draw.objects.values_list("receipts", "positions").get(pk=found.pk)
        receipts = bytes(receipts or b"")
        each = [receipts[at : at + RECEIPT_BYTES] for at in range(0, len(receipts), RECEIPT_BYTES)]
        listed = Listed(receipts, bytes(positions or b""), list_digest(each))
        if len(_listed_cache) >= 4:
            _listed_cache.pop(next(iter(_listed_cache)))
        _listed_cache[cached] = listed
    return listed


def receipts_lines(*, event_id: str) -> Iterator[bytes]:
    """The published list (`Listed.lines`); NOT_DRAWN before the draw."""
    found = find(event_id)
    if found.drawn_at is None:
        raise DomainError("NOT_DRAWN")
    return drawn_list(found).lines()


# --- Signed receipts ------------------------------------------------------------
#
# A receipt in the published list proves nothing to its holder: the service writes
# the list. So a person can have their receipt signed with the service's Ed25519
# key (settings.DRAW_SIGNING_KEY), whose public half every draw publishes: before
# the draw, the signature says "this receipt is a place of the draw with this
# commitment"; after it, also "drawn at this position of the list with this digest
# and size". A list that leaves a signed receipt out, or a seed and list that draw
# it elsewhere, is then refuted by anyone holding the file (docs/verify_draw.py
# --receipt-file), and the service cannot disown the file.

# What a signature covers, in this order (docs/draw.md; docs/verify_draw.py restates it).
STATEMENT = ("eventId", "receipt", "commitment", "size", "listDigest", "position")
STATEMENT_TITLE = "waiting room draw receipt v1"


def statement(fields: Mapping[str, object]) -> bytes:
    """The signed text: the title line, then "name value" for each field of
    STATEMENT that has a value (size, listDigest and position come with the draw)."""
    named = [f"{name} {fields[name]}" for name in STATEMENT if fields.get(name) is not None]
    return "".join(f"{line}\n" for line in (STATEMENT_TITLE, *named)).encode()


@cache
def _signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(settings.DRAW_SIGNING_KEY)


@receiver(setting_changed)
def _forget_signing_key(*, setting: str, **kwargs: object) -> None:
    if setting == "DRAW_SIGNING_KEY":
        _signing_key.cache_clear()
        public_key.cache_clear()


@cache
def public_key() -> str:
    """The public half of the key that signs receipts, 32 bytes in hex."""
    return _signing_key().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


@dataclass(frozen=True, slots=True)
class SignedReceipt:
    """A pre-queue place's receipt as the service signs it: the file its holder
    keeps (the fields of STATEMENT, the public key, the signature)."""

    event_id: str
    receipt: str
    commitment: str
    size: int | None
    list_digest: str | None
    position: int | None
    public_key: str
    signature: str


def signed_receipt(found: Draw, receipt: bytes) -> SignedReceipt:
    """The signed receipt of a place the line counts in the pre-queue (the caller
    checked that); after the draw, with its position in the published list."""
    size = digest = position = None
    if found.drawn_at is not None:
        listed = drawn_list(found)
        position = listed.position_of(receipt)
        if position is None:
            raise DomainError("NOT_IN_DRAW", "This place is not in the draw.")
        size, digest = found.size, listed.digest.hex()
    signed = {
        "eventId": found.event.event_id,
        "receipt": receipt.hex(),
        "commitment": found.commitment,
        "size": size,
        "listDigest": digest,
        "position": position,
    }
    return SignedReceipt(
        event_id=found.event.event_id,
        receipt=receipt.hex(),
        commitment=found.commitment,
        size=size,
        list_digest=digest,
        position=position,
        public_key=public_key(),
        signature=_signing_key().sign(statement(signed)).hex(),
    )
