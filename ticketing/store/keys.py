"""Every Redis key name of the project: one module owns them (DESIGN.md's naming rule).

Every key of an event carries the hash tag `{<eventId>}` so that all of them live in
one Redis Cluster slot and a script may touch them together. The names of
`EventKeys` are also the names the Lua scripts give their keys (lua/*.lua headers):
a script's key that the caller does not pass itself is the event's attribute of
that name (ticketing/store/scripts.py).
"""

import zlib
from functools import lru_cache

# Every known event id, so the admission tick can find them without the database.
EVENTS_KEY = "ticket:events"

# The tokens of an event that counts places per owner are kept in this many small
# hashes (by owner), which stay in Redis' compact listpack encoding.
OWNER_BUCKET_BYTES = 2


def ratelimit_key(scope: str, client: str) -> str:
    """A client's request counter for one scope (join, leave), shared by all events."""
    return f"ticket:ratelimit:{scope}:{client}"


def ratelimit_keys(scope: str, units: tuple[str, ...]) -> list[str]:
    """The counters of a client counted in several units, narrowest first (an IPv6
    /64, then its /48): under one hash tag, the widest unit, so that one script
    counts them together on a Redis Cluster. One unit: `ratelimit_key`."""
    if len(units) == 1:
        return [ratelimit_key(scope, units[0])]
    tagged = ratelimit_key(scope, f"{{{units[-1]}}}")
    return [f"{tagged}:{unit}" for unit in units[:-1]] + [tagged]


def proof_spent_key(purpose: str, mark: bytes) -> str:
    """A proof-of-work solution used outside an event's line (sign-up), kept until
    its challenge expires. (A join's are kept by the join script: EventKeys.proofs.)"""
    return f"ticket:proof:{purpose}:{mark.hex()}"


def test_payment_key(order_id: str) -> str:
    """The built-in test payment provider's record of an order's charge
    (booking_app/payments.py), kept as a provider keeps it: apart from our data."""
    return f"ticket:payments:test:{order_id}"


def key(event_id: str, *parts: str) -> str:
    """`ticket:{<eventId>}:<entity>[:<id>]`, the naming rule of DESIGN.md."""
    return f"ticket:{{{event_id}}}:" + ":".join(parts)


def _bucket(owner: bytes) -> str:
    """Which of the 65,536 owner hashes an owner's id picks."""
    return (zlib.crc32(owner) & 0xFFFF).to_bytes(OWNER_BUCKET_BYTES, "big").hex()


@lru_cache(maxsize=4096)
def event_keys(event_id: str, lane: bool = False) -> "EventKeys":
    """An event's key names, built once per process (a sale has few events); with
    `lane`, those of its priority lane (EventKeys.lane)."""
    return EventKeys(event_id).lane() if lane else EventKeys(event_id)


# The keys that make up one line (lua/lib/line.lua): an event's priority lane has
# its own of each, under `lane_<name>`, beside the general line's; everything else
# (the event's settings, seats, active count, outbox, admission tick) the two share.
LINE_KEY_NAMES = (
    "seq",
    "nonces",
    "popped",
    "left",
    "leftpre",
    "leftlog",
    "holes",
    "windows",
    "per_window",
    "claims",
    "claimed",
    "booked_places",
)


class EventKeys:
    """All key names of one event."""

    __slots__ = (
        "event_id",
        "meta",
        *LINE_KEY_NAMES,
        "blocks",
        "active",
        "seats",
        "sections",
        "seat_index",
        "seat_state",
        "section_left",
        "outbox",
        "returned",
        "recount",
        "reconciling",
        "tick",
        "admit_log",
        "refused",
        "live",
        "metrics",
        "bucket_prefix",
        "site_bucket_prefix",
        "proofs_prefix",
        "pre",
        "drawpos",
        "draw_claim",
        "codes",
        "is_lane",
        *(f"lane_{name}" for name in LINE_KEY_NAMES),
    )

    def __init__(self, event_id: str) -> None:
        self.event_id = event_id
        self.meta = key(event_id, "meta")
        # Arrival order: one counter for all app servers, so no server's clock decides.
        self.seq = key(event_id, "queue", "seq")
        # The random bytes of each number's token, 2 bytes a number: what tells a
        # token of this line from one of a number issued twice (lua/lib/line.lua).
        self.nonces = key(event_id, "queue", "nonces")
        # The line is counters (lua/lib/line.lua): places up to `popped` have been
        # taken off its head; a place is the arrival number a token carries.
        self.popped = key(event_id, "queue", "popped")
        # People who left while waiting: a bitmap by place; by pre-queue number
        # before a scheduled start's draw; 5 bytes each in the order they left (what
        # the web processes' caches read on); and how many are still ahead of the head.
        self.left = key(event_id, "queue", "left")
        self.leftpre = key(event_id, "queue", "leftpre")
        self.leftlog = key(event_id, "queue", "leftlog")
        self.holes = key(event_id, "queue", "holes")
        # The blocks of arrival numbers the web processes hold (lua/block.lua): the
        # tick admits nobody from an open one on.
        self.blocks = key(event_id, "queue", "blocks")
        # The admission log: which places each tick admitted and when their window
        # ends; bookings made per window; and how many people are active now.
        self.windows = key(event_id, "admit", "windows")
        self.per_window = key(event_id, "admit", "booked")
        self.active = key(event_id, "active", "count")
        # The claim time (docs/modes.md): per window entry (by `to`) the time its
        # people must come back by, and a bitmap of the places that came back.
        self.claims = key(event_id, "admit", "claims")
        self.claimed = key(event_id, "admit", "claimed")
        # The places whose token booked, a bitmap: no longer active, even once a
        # cancellation took the booking back.
        self.booked_places = key(event_id, "booking", "places")
        self.seats = key(event_id, "seats", "remaining")
        # The seat map, when the event has one (lua/lib/seats.lua): its sections, the
        # seat ids' positions, each numbered seat's state (2 bits), and each
        # section's places left (which add up to `seats`).
        self.sections = key(event_id, "seats", "sections")
        self.seat_index = key(event_id, "seats", "index")
        self.seat_state = key(event_id, "seats", "state")
        self.section_left = key(event_id, "seats", "left")
        # Bookings between their Redis step and their decision in Postgres.
        self.outbox = key(event_id, "booking", "outbox")
        # reservation id -> seats, for every cancellation whose seats are back on sale:
        # the guard that returns each exactly once.
        self.returned = key(event_id, "booking", "returned")
        # Held while reconcile recounts seats left from Postgres (lua/seats_heal.lua).
        self.recount = key(event_id, "seats", "recount")
        # Held by the one reconcile working on the event.
        self.reconciling = key(event_id, "booking", "reconciling")
        self.tick = key(event_id, "admit", "tick")
        self.admit_log = key(event_id, "admit", "log")
        # reason -> joins refused for it (lua/refused.lua), for the operator.
        self.refused = key(event_id, "refused")
        # "<second>:<waiting>:<admitted>" per tick, newest first (queue_app/live.py).
        self.live = key(event_id, "live")
        # The event's counters for /metrics (ticketing/metrics.py).
        self.metrics = key(event_id, "metrics")
        # A scheduled start's pre-queue (lua/join.lua): its tokens, 16 bytes each, by
        # arrival number, read by its draw (queue_app/draw.py); the drawn position of
        # each pre-queue number, 4 bytes big-endian at (number - 1) * 4; and the
        # claim of the one draw run under way.
        self.pre = key(event_id, "queue", "pre")
        self.drawpos = key(event_id, "queue", "drawpos")
        self.draw_claim = key(event_id, "queue", "draw", "claim")
        # A presale's codes (queue_app/presale.py): the first 16 bytes of a code's
        # hash -> its uses left, spent by the join script.
        self.codes = key(event_id, "presale", "codes")
        # The priority lane (docs/modes.md): a second line, admitted ahead of this
        # one at the event's priorityShare of the rate; the tick and the join
        # script take both, every other script the one line its token is of.
        self.is_lane = False
        for name in LINE_KEY_NAMES:
            setattr(self, f"lane_{name}", getattr(self, name).replace("}:", "}:lane:", 1))
        self.bucket_prefix = key(event_id, "tokens", "")
        self.site_bucket_prefix = key(event_id, "tokens", "site", "")
        self.proofs_prefix = key(event_id, "proofs", "")

    def lane(self) -> "EventKeys":
        """The same event's keys with the priority lane's line in place of the
        general one's: what a script about one token of the lane is handed, so that
        the script itself does not know which line it reads."""
        k = EventKeys(self.event_id)
        k.is_lane = True
        for name in LINE_KEY_NAMES:
            setattr(k, name, getattr(self, f"lane_{name}"))
        return k

    def owned(self, owner: bytes) -> str:
        """The hash of an owner's tokens (an account's, or a client address's), on
        an event that counts places per owner (lua/join.lua): small hashes, in
        Redis' compact encoding, whichever an owner's id picks."""
        return self.bucket_prefix + _bucket(owner)

    def site_owned(self, owner: bytes) -> str:
        """`owned`, for the tokens of an IPv6 /48: a family of hashes of its own, so
        that a token's entry for its /64 and for its /48 never meet in one hash."""
        return self.site_bucket_prefix + _bucket(owner)

    def proofs(self, mark: bytes, expires_at: int) -> str:
        """The set of the proof-of-work solutions used, of challenges expiring in the
        same minute as this one (the set expires with them)."""
        return f"{self.proofs_prefix}{expires_at // 60}:{mark[:2].hex()}"

    def draw_run(self, run: str) -> str:
        """One draw run's own positions, renamed into place by lua/draw_done.lua."""
        return key(self.event_id, "queue", "draw", run, "pos")

    def booked(self, token: str) -> str:
        return key(self.event_id, "booking", "done", token)

    def pattern(self) -> str:
        return key(self.event_id, "*")


# The attributes of EventKeys that are whole key names: what a script's key may be
# taken from when its caller does not pass it (ticketing/store/scripts.py).
EVENT_KEY_NAMES = frozenset(
    name
    for name in EventKeys.__slots__
    if name not in ("event_id", "is_lane") and not name.endswith("_prefix")
)
