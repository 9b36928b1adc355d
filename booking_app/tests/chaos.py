"""The fault-injection run: many buyers against a small event, faults at every step.

One run, for one seed (the seed picks its scenario, see `scenario_of`):

- a Redis server of its own, and app servers (gunicorn, 2 workers x 8 threads) that
  reach Postgres and Redis through `FaultProxy`s, so connections can be cut before a
  command reaches the server or after it applied (a lost acknowledgement);
- buyers (threads, real HTTP) book 1-3 seats of an event with fewer seats than they
  want, retrying as a client would on a 503 or a broken connection; some cancel;
- the scenario's faults, at times drawn from the seed: cuts at every Postgres and
  Redis step of booking, cancellation, reconcile and recovery; a gunicorn worker
  SIGKILLed mid-request; Redis SIGKILLed and restarted from an older snapshot;
  FLUSHALL followed by `recover_event`; reconciles running in parallel, and a
  reconcile SIGKILLed while it holds the event, at one of its Redis steps;
- checkout (the scenarios `checkout` and `checkout-restore`): a priced event whose
  holds last HOLD_SEC, paid through Toss Payments' API (a local stand-in,
  testsupport/toss.py, that the app servers' real client code calls); buyers pay,
  are declined, give up or walk away; the app servers are SIGKILLed between Toss'
  confirmation and the commit, confirm answers are lost, Toss is down for a while,
  payments are in flight when their hold ends (applied just before, or just after),
  Toss' notifications come twice and out of order; the beat's sweep and refund
  retries run every second;
- then the checks, once when the load has stopped and again after reconcile: every
  fault the scenario planned fired (counted when it happened, not when planned), the
  run sold seats, the invariants hold, and every answer a buyer got agrees with the
  row it implies; with checkout, every payment Toss took is a confirmed booking or
  refunded, and no payment confirms two bookings.

The seed fixes the buyers, the fault probabilities and the schedule; threads make the
exact interleaving differ between replays, so a failing seed is replayed with
`CHAOS_SEED=<seed> make chaos`.
"""

import base64
import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import requests
from django.conf import settings
from django.db import DatabaseError, connection, connections
from django.db.models import Sum
from django.test import override_settings

from booking_app import checkout, reconcile
from booking_app.models import GIVEN_BACK, TAKEN, Reservation, TakenSeat
from queue_app import admission, events, seating
from queue_app import services as queue
from queue_app.models import Event, Section
from testsupport import CheckedThread
from testsupport.servers import RedisServer, start_gunicorn
from testsupport.toss import TossStandIn
from ticketing import store
from ticketing.errors import REDIS_ERRORS
from ticketing.tests.faultproxy import Action, FaultProxy, Message

SCENARIOS = {
    "cuts": {"cuts"},
    "kill": {"cuts", "kill"},
    "restore": {"cuts", "restore"},
    "flush": {"cuts", "flush"},
    "reconcile": {"cuts", "reconcile"},
    "everything": {"cuts", "kill", "restore", "flush", "reconcile"},
    "checkout": {"cuts", "checkout"},
    "checkout-restore": {"cuts", "checkout", "restore"},
    # The event has a seat map (SEAT_MAP): buyers hold numbered seats by id or the
    # best free ones, or places of its floor, and pay, as in checkout; reconciles race
    # the sale's give-backs (`seats`), or Redis comes back from a snapshot.
    "seats": {"cuts", "checkout", "seats", "reconcile"},
    "seats-restore": {"cuts", "checkout", "seats", "restore"},
}


def scenario_of(seed: int) -> str:
    """Each seed has its scenario, so a seed alone names a run (and a range of seeds
    spreads evenly over the scenarios)."""
    names = sorted(SCENARIOS)
    return names[seed % len(names)]


# The Redis scripts of booking, cancellation and reconcile: each may be cut.
BOOKING_SCRIPTS = ("reserve", "release", "outbox_done", "cancel", "seats_heal", "retake")
# Chance that an eligible message is cut before / after the server got it.
CUT_BEFORE, CUT_AFTER = 0.05, 0.05
# Besides those odds, the seed picks one booking INSERT and one `reserve` among the first
# five of the run to cut before, and one among the next five to cut after: both kinds fire
# on both servers in every run with cuts, so a run can insist that they did (a rule that
# stopped matching, say after the SQL changed, fails the run instead of passing it).
FORCED = {("postgres", "INSERT"), ("redis", "reserve")}
# Answers whose outcome the buyer cannot know.
UNKNOWN = {"REDIS_UNAVAILABLE", "NO_ANSWER"}
# Answers a buyer tries again after a pause, as a person does whose page shows an error.
TRANSIENT = {*UNKNOWN, "DATABASE_UNAVAILABLE", "BOOKING_NOT_SAVED"}
# Answers that mean the line was lost (a FLUSHALL): the event is being rebuilt
# (EVENT_NOT_FOUND: try again), or the place is gone (join again, wait to be admitted).
LINE_LOST = {"EVENT_NOT_FOUND", "NOT_ACTIVE", "INVALID_TOKEN"}
# Buyers arrive within SALE_SEC and keep trying (book, or join again) for PATIENCE_SEC
# after they arrived; then they give up, answered or not.
SALE_SEC, PATIENCE_SEC = 4.0, 30.0
GRACE_SEC = 2  # reconcile decides outbox entries this old (production: 30 s)
STARTED = "[INFO] Application startup complete"  # what a gunicorn worker logs once it serves
# A killed reconcile's lock expires after this (production: 5 min, so the run would
# wait that long); the next reconcile finishes its work.
KILLED_LOCK_MS = 500
# Seats a run must have sold (confirmed, then kept or cancelled) after the final
# reconcile. 200 buyers ask for about 400 seats of 100 within 4 s and keep trying
# through the faults (after a FLUSHALL they join the line again): a run sells out but
# for seats that cannot be resold in time, a remainder smaller than every later request
# and the seats of a refused booking whose give-back was cut (reconcile returns them
# after the sale), a few seats each.
MIN_SOLD = 90
# Checkout: a seat's price, and how long a hold lasts. Fewer seats are paid for than
# held (some buyers are declined, give up or walk away, and their seats sell again
# only to those still trying): a run must have had this many seats paid for, and
# this many released.
PRICE, HOLD_SEC = 1000, 3
MIN_PAID, MIN_RELEASED = 30, 5
# The seats scenarios' map: 60 numbered seats (6 rows of 10, an aisle after each
# row's fifth seat) and a floor of 40 places, the run's 100 seats. A buyer asks for
# seats by id (some of them taken, as on a busy map), for the best free ones (side by
# side, sometimes), or for places on the floor.
SEAT_MAP = {
    "sections": [
        {
            "id": "R",
            "name": "Numbered",
            "rows": [
                {"row": r, "seats": ["1", "2", "3", "4", "5", None, "6", "7", "8", "9", "10"]}
                for r in "ABCDEF"
            ],
        },
        {"id": "GA", "name": "Floor", "places": 40},
    ]
}
NUMBERED = [f"R-{r}-{n}" for r in "ABCDEF" for n in range(1, 11)]
# Refusals after which a buyer on a map chooses again (other seats, or elsewhere).
CHOOSE_AGAIN = {"SEAT_TAKEN", "NO_ADJACENT_SEATS", "SECTION_SOLD_OUT", "INSUFFICIENT_SEATS", "SOLD_OUT"}
# Seconds Toss' API may take before the app servers give up on it (past the longest
# delay the run's confirm hook makes).
TOSS_TIMEOUT_SEC = 8
# A hold's statuses: from what a buyer was told, the row's status at the end must be
# one of these (RELEASED or CANCELLED become REFUNDED when money goes back).
REACHABLE = {
    "HELD": {"HELD", "CONFIRMED", "RELEASED", "REFUNDED", "CANCELLED"},
    "CONFIRMED": {"CONFIRMED", "CANCELLED", "REFUNDED"},
    "CANCELLED": {"CANCELLED", "REFUNDED"},
    "RELEASED": {"RELEASED", "REFUNDED"},
    "REFUNDED": {"REFUNDED"},
}

# A management command in a process of its own, started before the sale: Django takes
# seconds to start on a busy machine, so a command started at its planned time would
# run long after it. It runs when told "go".
_WARM = """\
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")
import django
django.setup()
print("ready", flush=True)
if sys.stdin.readline().strip() == "go":
    from django.core.management import execute_from_command_line
    execute_from_command_line(["manage.py", *sys.argv[1:]])
"""


class Warm:
    """A management command's process, started early (_WARM); `go()` runs it."""

    def __init__(self, args: list[str], env: dict) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WARM, *args],
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.started = False
        self.killed = False

    def ready(self) -> None:
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"{self.args} did not start: {line!r}, exit {self.proc.poll()}"

    def go(self) -> None:
        self.started = True
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Answer:
    what: str  # "book" or "cancel"
    token: str
    status: int | None
    code: str  # CONFIRMED, CANCELLED, or the error code; NO_ANSWER for a broken connection
    reservation_id: str | None  # the id the answer names (for a failed cancel, the id asked about)
    seats: int | None  # the seatCount the answer names
    asked_id: str | None = None  # a cancel: the reservation it asked to cancel
    data: dict | None = None  # the answer's data, when it succeeded
    payment_key: str | None = None  # a payment: the key Toss' widget gave its buyer


@dataclass(frozen=True)
class Row:
    token: str
    seats: int
    status: str
    payment_id: str | None = None
    section: str = ""
    seat_ids: tuple[str, ...] = ()


@dataclass
class Run:
    seed: int
    scenario: str
    workdir: Path
    buyers: int = 200
    seats: int = 100
    answers: list[Answer] = field(default_factory=list)
    asked: dict[str, int] = field(default_factory=dict)  # token -> seats its buyer asks for
    cancels_asked: set[tuple[str, str]] = field(default_factory=set)  # (token, reservation id)
    planned: collections.Counter = field(default_factory=collections.Counter)
    faults: collections.Counter = field(default_factory=collections.Counter)  # fired
    eligible: collections.Counter = field(default_factory=collections.Counter)  # messages the rule could cut
    log: list[str] = field(default_factory=list)
    result: str = "running"  # then "load stopped", and "passed" or "FAILED"
    sold: int = 0  # confirmed seats when last summed up

    def __post_init__(self) -> None:
        self.flags = SCENARIOS[self.scenario]
        self.event_id = f"chaos-{self.seed}-{uuid.uuid4().hex[:6]}"
        self.redis = RedisServer(self.workdir)
        self.redis_lost_data = False
        self.lock = threading.Lock()
        self.cutting = False
        self.kills_due = 0
        self.joined_again = 0  # joins of buyers whose place a FLUSHALL took
        self.plan: list[tuple[float, str]] = []
        self.proxies: list[FaultProxy] = []
        self.kill_messages: list[Message] = []
        self.warm: list[Warm] = []
        self.checkout = "checkout" in self.flags
        self.mapped = "seats" in self.flags
        # checkout-restore's event confirms a payment that came after its hold was
        # released while the seats are free (lua/retake.lua); checkout's refunds it.
        self.late = self.checkout and "restore" in self.flags
        self.toss: TossStandIn | None = None
        self.hold_ends: dict[str, float] = {}  # reservation id -> its hold's end (epoch seconds)
        self.tokens: dict[str, str] = {}  # reservation id -> its buyer's token

    # --- the stack ---------------------------------------------------------------

    def _env(self, redis_proxy: FaultProxy | None = None) -> dict:
        """What app servers and management commands of the run change in their
        environment: Postgres and Redis through the fault proxies."""
        db_name = settings.DATABASES["default"]["NAME"]
        return {
            "DATABASE_URL": self.pg_proxy.postgres_url(db_name),
            "REDIS_URL": (redis_proxy or self.redis_proxy).redis_url(),
            "REDIS_CLUSTER": "false",  # the proxy stands before one server of its own
            "BOOKING_RECONCILE_GRACE_SEC": str(GRACE_SEC),
            "LOG_LEVEL": "CRITICAL",
            "RATE_LIMIT_JOIN": "0",  # every buyer is 127.0.0.1
            **({k: str(v) for k, v in self._toss_settings().items()} if self.toss else {}),
        }

    def _warm(self, *args: str, redis_proxy: FaultProxy | None = None) -> Warm:
        process = Warm(list(args), {**os.environ, **self._env(redis_proxy)})
        self.warm.append(process)
        return process

    def _workers(self) -> list[int]:
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.app.pid:
                children.append(int(stat.parent.name))
        return children

    # --- faults --------------------------------------------------------------------

    def _step(self, m: Message) -> str:
        if m.protocol == "postgres":
            return m.text.lstrip().split(" ", 1)[0].upper()
        return self.names.get(m.args[0], m.kind) if m.kind == "EVALSHA" and m.args else m.kind

    def _eligible(self, m: Message) -> bool:
        if m.protocol == "postgres":
            text = m.text.lstrip().upper()
            return m.kind == "Q" and (
                text.startswith("COMMIT")
                or text.startswith('INSERT INTO "BOOKING_APP_RESERVATION"')
                or text.startswith('UPDATE "BOOKING_APP_RESERVATION"')
            )
        return m.kind == "EVALSHA" and bool(m.args) and m.args[0] in self.names

    def _cut(self, m: Message) -> Action:
        """The rule of every proxy: seeded odds, and the forced cuts (see FORCED)."""
        if not self.cutting or not self._eligible(m):
            return Action.PASS
        step = (m.protocol, self._step(m))
        with self.lock:
            self.eligible[step] += 1
            nth = self.eligible[step]
            roll = self.dice.random()
        if step in FORCED and nth == self.forced[step][0]:
            return Action.CUT_BEFORE
        if step in FORCED and nth == self.forced[step][1]:
            return Action.CUT_AFTER
        if roll < CUT_BEFORE:
            return Action.CUT_BEFORE
        if roll < CUT_BEFORE + CUT_AFTER:
            return Action.CUT_AFTER
        return Action.PASS

    def _reconcile_rule(self, process: list, after: int, action: Action):
        """A reconcile's own Redis proxy: the cuts, and its SIGKILL when a kill is due
        and it holds the event's reconcile lock, at its `after`-th command since it took
        it (the command is cut before or after it applied, as `action` says)."""
        lock_key = store.EventKeys(self.event_id).reconciling.encode()
        state = {"token": None, "sent": 0}

        def rule(m: Message) -> Action:
            if m.kind == "SET" and m.args[:1] == (lock_key,) and b"NX" in m.args:
                state["token"], state["sent"] = m.args[1], 0
                return self._cut(m)
            if state["token"] is None:
                return self._cut(m)
            state["sent"] += 1
            if state["sent"] < after or not self._kill_reconcile(process[0], state["token"]):
                return self._cut(m)
            self.kill_messages.append(m)  # the proxy records it as a cut: it is the kill's
            return action

        return rule

    def _kill_reconcile(self, warm: Warm, token: bytes) -> bool:
        k = store.EventKeys(self.event_id)
        client = self.redis.client()
        with self.lock:
            if not self.kills_due or warm.killed or client.get(k.reconciling) != token:
                return False  # no kill due, or this one does not hold the event
            try:
                os.kill(warm.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                return False
            warm.killed = True
            self.kills_due -= 1
            self.faults["reconcile killed"] += 1
        self._expire_locks()
        return True

    def _expire_locks(self) -> None:
        """A killed reconcile's lock and recount mark expire as they would, only sooner
        (KILLED_LOCK_MS): called once it is dead, when nobody else can hold them."""
        k = store.EventKeys(self.event_id)
        client = self.redis.client()
        for key in (k.reconciling, k.recount):
            if client.pttl(key) > KILLED_LOCK_MS:
                client.pexpire(key, KILLED_LOCK_MS)

    def _kill_worker(self, rng: random.Random) -> None:
        """SIGKILL a gunicorn worker that serves (a child of the master whose start-up
        its log shows complete, not one still booting): counted once delivered."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            log = (self.workdir / "gunicorn.log").read_text(errors="replace")
            serving = [pid for pid in self._workers() if f"[{pid}] {STARTED}" in log]
            if serving:
                try:
                    os.kill(rng.choice(sorted(serving)), signal.SIGKILL)
                except ProcessLookupError:
                    continue  # it had just exited; pick again
                self.faults["kill worker"] += 1
                return
            time.sleep(0.05)  # both being replaced: wait for a new one to serve

    def _plan(self, rng: random.Random) -> list[tuple[float, str]]:
        plan: list[tuple[float, str]] = []
        if "kill" in self.flags:
            plan += [(rng.uniform(0.5, 4.0), "kill worker") for _ in range(2)]
        if "restore" in self.flags:
            plan += [(0.3, "snapshot"), (rng.uniform(1.5, 3.5), "restore")]
        if "flush" in self.flags:
            plan.append((rng.uniform(1.0, 3.5), "flush"))
            self.planned["recover_event"] += 1
        if "reconcile" in self.flags:
            # Six pairs at once, 0.7 s apart; one or two of the first four arm a kill:
            # the next reconcile that holds the event is SIGKILLed at one of its steps.
            armed = set(rng.sample(range(4), rng.choice([1, 2])))
            plan += [(0.6 + 0.7 * i, "reconcile kill" if i in armed else "reconcile") for i in range(6)]
            self.planned["reconcile killed"] += len(armed)
            self.planned["reconcile"] += 12 - len(armed)
        if "checkout" in self.flags:
            plan.append((rng.uniform(1.0, 3.0), "toss down"))
        self.planned.update(what for _, what in plan if what in ("kill worker", "restore", "flush"))
        return sorted(plan)

    def _monkey(self, rng: random.Random, plan: list[tuple[float, str]], started: float) -> None:
        """The scenario's big faults, at their planned times, each counted once it fired."""
        snapshot = None
        pairs = [self.reconcilers[i : i + 2] for i in range(0, len(self.reconcilers), 2)]
        for at, what in plan:
            time.sleep(max(0.0, at - (time.monotonic() - started)))
            if what == "kill worker":
                self._kill_worker(rng)
            elif what == "snapshot":
                snapshot = self.redis.snapshot()
            elif what == "restore":
                self.redis.crash()
                self.redis.restart(snapshot)
                self.redis_lost_data = True
                self.faults["restore"] += 1
            elif what == "flush":
                self.redis.client().flushall()
                self.redis_lost_data = True
                self.faults["flush"] += 1
                self._recover()
            elif what == "toss down":
                self._toss_down()
            elif what.startswith("reconcile"):
                if what == "reconcile kill":
                    with self.lock:
                        self.kills_due += 1
                for warm in pairs.pop(0):
                    warm.go()

    def _recover(self) -> None:
        """recover_event through the faulty connections, until it succeeds."""
        for _ in range(20):
            if not self.recoverers:
                self.recoverers.append(self._warm("recover_event", self.event_id))
                self.recoverers[0].ready()
            process = self.recoverers.pop(0)
            process.go()
            if process.wait() == 0:
                self.faults["recover_event"] += 1
                return
            self.faults["recover_event retried"] += 1
        raise AssertionError("recover_event never succeeded")

    # --- buyers ----------------------------------------------------------------------

    def _call(
        self, what: str, token: str, method: str, path: str, asked: str | None = None, payment_key=None, **kw
    ) -> Answer:
        status, code, rid, seats, kept = None, "NO_ANSWER", asked, None, None
        try:
            resp = requests.request(method, f"{self.base}{path}", timeout=60, **kw)
            status = resp.status_code
            body = resp.json()
            if body["success"]:
                data = body["data"]
                code, rid, seats = data["status"], data["reservationId"], data["seatCount"]
                kept = data
            else:
                code, rid = body["error"]["code"], body["error"].get("reservationId", asked)
        except requests.RequestException:
            pass  # a broken connection: NO_ANSWER
        except (ValueError, KeyError, TypeError):
            code = f"HTTP {status} without the envelope"
        answer = Answer(what, token, status, code, rid, seats, asked, kept, payment_key)
        self.answers.append(answer)
        return answer

    def _buyer(self, i: int, token: str) -> None:
        rng = random.Random(self.seed * 100_003 + i)
        time.sleep(rng.uniform(0.0, SALE_SEC))
        seats = rng.randint(1, 3)
        give_up = time.monotonic() + PATIENCE_SEC
        # With checkout, seats come back (holds released): a buyer told there are none
        # tries again for a while, as a person watching "may come back" does.
        hope = time.monotonic() + 3 * HOLD_SEC
        answer = None
        while True:
            self.asked[token] = seats
            payload = {
                "token": token,
                "seatCount": seats,
                "eventId": self.event_id,
                "buyerName": f"buyer {i}",
                "buyerEmail": f"buyer{i}@example.com",
                **(self._where(rng, seats, answer) if self.mapped else {}),
            }
            answer = self._call("book", token, "POST", "/api/booking", json=payload)
            lost = "flush" in self.flags and answer.code in LINE_LOST
            hoping = (
                self.checkout
                and answer.code in (CHOOSE_AGAIN if self.mapped else {"SOLD_OUT", "INSUFFICIENT_SEATS"})
                and time.monotonic() < hope
            )
            if time.monotonic() > give_up or not (answer.code in TRANSIENT or lost or hoping):
                break
            if answer.code in ("NOT_ACTIVE", "INVALID_TOKEN") and lost:
                token = self._join_again(rng, give_up)
                if token is None:
                    break
            else:
                time.sleep(rng.uniform(0.1, 0.4))
        if answer.code == "HELD":
            self._checkout(rng, token, answer)
        elif answer.code == "CONFIRMED" and rng.random() < 0.15:
            time.sleep(rng.uniform(0.0, 1.0))
            self._end(rng, token, answer.reservation_id)

    def _where(self, rng: random.Random, seats: int, refused: Answer | None) -> dict:
        """Where a buyer on the map asks for its seats: by id (chosen among the seats
        the map shows free, now and then stale, or taken by another meanwhile), the
        best free ones, or the floor; after SECTION_SOLD_OUT, elsewhere."""
        if refused is not None and refused.code == "SECTION_SOLD_OUT":
            return {"section": "GA"} if rng.random() < 0.5 else {"section": "R", "together": False}
        roll = rng.random()
        if roll < 0.45:
            shown = self._ask("GET", f"/api/events/{self.event_id}/seats")
            free = NUMBERED
            if shown is not None:
                raw = base64.b64decode(shown["sections"][0]["state"])
                free = [
                    s for s, state in zip(NUMBERED, seating.seat_states(raw), strict=False) if not state
                ] or NUMBERED
            return {
                "seats": rng.sample(free, min(seats, len(free))) if len(free) >= seats else NUMBERED[:seats]
            }
        if roll < 0.75:
            return {"section": "R", "together": rng.random() < 0.5}
        return {"section": "GA"}

    def _end(self, rng: random.Random, token: str, rid: str) -> None:
        """Cancel a booking, or give a hold up (the same DELETE)."""
        self.cancels_asked.add((token, rid))
        for _ in range(4):
            cancel = self._call(
                "cancel", token, "DELETE", f"/api/booking/{rid}", asked=rid, params={"token": token}
            )
            if cancel.code not in TRANSIENT:
                break
            time.sleep(rng.uniform(0.1, 0.4))

    # --- checkout ----------------------------------------------------------------------

    def _checkout(self, rng: random.Random, token: str, held: Answer) -> None:
        """A buyer with a hold: walks away (the hold runs out), gives it up, or pays
        through Toss' widget (declined by the card issuer, sometimes), coming back to
        the checkout page until it answers; then reads the booking, and sometimes
        cancels a paid one (refunded)."""
        rid, data = held.reservation_id, held.data
        self.hold_ends[rid] = data["holdExpiresAt"] / 1000
        self.tokens[rid] = token
        roll = rng.random()
        if roll < 0.10:
            return
        if roll < 0.25:
            time.sleep(rng.uniform(0.0, 1.0))
            self._end(rng, token, rid)
            return
        time.sleep(rng.uniform(0.0, 1.2))
        key = self.toss.authorize(rid, data["amount"], decline="REJECT_CARD_PAYMENT" if roll < 0.33 else "")
        back = {"paymentKey": key, "orderId": rid, "amount": data["amount"]}
        for _ in range(8):
            try:
                page = requests.get(
                    data["checkoutUrl"],
                    params=back,
                    timeout=60,
                    allow_redirects=False,
                )
                if page.status_code in (200, 302):
                    break  # decided, or the page says what happened
            except requests.RequestException:
                pass  # the process was killed, or a fault: the buyer reloads
            time.sleep(rng.uniform(0.2, 0.5))
        for _ in range(6):
            read = self._call(
                "pay",
                token,
                "GET",
                f"/api/booking/{rid}",
                asked=rid,
                payment_key=key,
                params={"token": token},
            )
            if read.code not in TRANSIENT:
                break
            self.answers.remove(read)  # only what the buyer finally read counts
            time.sleep(rng.uniform(0.2, 0.5))
        if read.code == "CONFIRMED" and rng.random() < 0.2:
            time.sleep(rng.uniform(0.0, 1.0))
            self._end(rng, token, rid)

    def _join_again(self, rng: random.Random, give_up: float) -> str | None:
        """After the line was lost: join it again and poll until admitted (the tick
        runs every second, see `_beat`). The new token, or None when time ran out."""
        while time.monotonic() < give_up:
            joined = self._ask("POST", "/api/queue/join", json={"eventId": self.event_id})
            if joined is None:
                time.sleep(rng.uniform(0.2, 0.5))  # the event is being rebuilt, or a fault
                continue
            token = joined["token"]
            with self.lock:
                self.joined_again += 1
            while time.monotonic() < give_up:
                query = {"token": token, "eventId": self.event_id}
                polled = self._ask("GET", "/api/status/poll", params=query)
                if polled is not None and polled["status"] == "ACTIVE":
                    return token
                if polled is None or polled["status"] in ("NOT_FOUND", "EXPIRED"):
                    break  # lost again (Redis restored from before this join), or a fault
                time.sleep(rng.uniform(0.2, 0.4))
        return None

    def _ask(self, method: str, path: str, **kw) -> dict | None:
        """A call of the line's API: its data, or None for any failure."""
        try:
            body = requests.request(method, f"{self.base}{path}", timeout=60, **kw).json()
        except (requests.RequestException, ValueError):
            return None
        return body["data"] if body.get("success") else None

    def _beat(self, stop: threading.Event) -> None:
        """The admission tick, every second of the sale, as beat runs it."""
        try:
            while not stop.wait(1.0):
                try:
                    admission.event_admit(self.event_id)
                except REDIS_ERRORS:
                    pass  # Redis is being restarted: the next tick admits
                if self.checkout:  # the beat's checkout sweeps
                    try:
                        checkout.holds_expire()
                        checkout.refunds_retry()
                    except (DatabaseError, *REDIS_ERRORS):
                        pass  # the next second's sweep ends them
        finally:
            connections.close_all()

    def _toss_settings(self) -> dict:
        return {
            "PAYMENTS_PROVIDER": "toss",
            "TOSS_SECRET_KEY": self.toss.secret,
            "TOSS_CLIENT_KEY": "test_ck_chaos",
            "TOSS_API_URL": self.toss.url,
            "PAYMENTS_TIMEOUT_SEC": TOSS_TIMEOUT_SEC,
        }

    def _start_toss(self, rng: random.Random) -> None:
        """Toss' stand-in and its faults. Confirms are numbered as they arrive; the
        seed picks among the first ten which lose their answer, which one's process
        is killed once Toss took the money, and which are in flight when their hold
        ends (a fault waits for a confirm it can act on: one whose hold has not ended)."""
        self.toss = TossStandIn().start()
        self.toss.knobs.confirm_hook = self._confirm_hook
        self.toss.knobs.on_change = self._notify
        at = rng.sample(range(1, 11), 6)
        kinds = ["toss answer lost", "toss answer lost", "killed after the charge"]
        kinds += ["hold ended with its answer in flight", "hold ended before its charge"]
        kinds += ["hold given up while its payment was in flight"]
        self.confirm_faults = sorted(zip(at, kinds, strict=True))
        self.confirm_acting: dict[str, str] = {}  # paymentKey -> its fault
        self.confirms = 0
        self.planned.update(kinds)
        self.planned.update(["toss down", "notification repeated", "notification out of order"])
        self.notifier = ThreadPoolExecutor(8, thread_name_prefix="toss-notifications")
        self.notices: list = []
        self.notified_first = False

    def _confirm_hook(self, key: str, when: str) -> str:
        """Around each confirm Toss receives (testsupport/toss.py), in its thread."""
        order = self.toss.payments.get(key, {}).get("orderId")
        end = self.hold_ends.get(order or "")
        if when == "before":
            with self.lock:
                self.confirms += 1
                fault = None
                for i, (at, kind) in enumerate(self.confirm_faults):
                    usable = end is not None and time.time() < end - 0.1
                    if at <= self.confirms and (usable or not kind.startswith("hold")):
                        fault = self.confirm_faults.pop(i)[1]
                        break
                if fault:
                    self.confirm_acting[key] = fault
            if fault == "hold ended before its charge":
                # Toss takes the money only once the hold has ended and the sweep has run:
                # the sweep finds it not taken and releases the seats; the charge, taken
                # too late, is refunded.
                time.sleep(end - time.time() + 1.5)
                self.faults[fault] += 1
            elif fault == "hold given up while its payment was in flight":
                # Two tabs: the buyer gives the hold up in one while paying in the other.
                # The release wins; the charge, taken in time but for seats given back,
                # is refunded.
                token = self.tokens[order]
                self.cancels_asked.add((token, order))
                for _ in range(4):
                    answer = self._call(
                        "cancel",
                        token,
                        "DELETE",
                        f"/api/booking/{order}",
                        asked=order,
                        params={"token": token},
                    )
                    if answer.code not in TRANSIENT:
                        break
                    time.sleep(0.1)
                if answer.code == "RELEASED":
                    self.faults[fault] += 1
                else:  # a cut failed it: the next confirm tries again
                    with self.lock:
                        self.confirm_faults.insert(0, (0, fault))
            return ""
        fault = self.confirm_acting.pop(key, None)
        if fault == "toss answer lost":
            self.faults[fault] += 1
            return "lose"
        if fault == "killed after the charge":
            killed = 0
            for pid in self._workers():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            self.faults[fault] += bool(killed)
            return "lose"
        if fault == "hold ended with its answer in flight":
            # Taken in time, answered after the hold's end, once the sweep has run: the
            # sweep confirms it from Toss' record, or the answer does; never both.
            if time.time() < end:
                self.faults[fault] += 1
            time.sleep(max(0.0, end - time.time()) + 1.5)
        return ""

    def _notify(self, payment: dict) -> None:
        """Toss' PAYMENT_STATUS_CHANGED for a change of a payment: sent after a while,
        sometimes twice; the first one is sent twice and then followed by a stale one
        (the status it had before), out of order."""
        rng = random.Random(f"{self.seed} {payment['paymentKey']} {payment['status']}")
        notice = {
            "eventType": "PAYMENT_STATUS_CHANGED",
            "data": {"paymentKey": payment["paymentKey"], "status": payment["status"]},
        }
        stale = {**notice, "data": {**notice["data"], "status": "READY"}}
        with self.lock:
            first, self.notified_first = not self.notified_first, True
        if first:
            sends = [(notice, None), (notice, "notification repeated"), (stale, "notification out of order")]
        else:
            sends = [(notice, None)] * (2 if rng.random() < 0.2 else 1)
        self.notices.append(self.notifier.submit(self._deliver, sends, rng.uniform(0.0, 1.0)))

    def _deliver(self, sends: list[tuple[dict, str | None]], delay: float) -> None:
        """Each notification in turn, sent again until the app answers 200 (as Toss
        does, for a while)."""
        time.sleep(delay)
        for notice, fault in sends:
            for _ in range(40):
                try:
                    if (
                        requests.post(
                            f"{self.base}/payments/toss/webhook", json=notice, timeout=30
                        ).status_code
                        == 200
                    ):
                        if fault:
                            self.faults[fault] += 1
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.5)

    def _toss_down(self) -> None:
        """Toss down for a second at least, and until it has refused a call."""
        refused = self.toss.refused
        self.toss.knobs.down = True
        deadline = time.monotonic() + 10
        time.sleep(1.0)
        while self.toss.refused == refused and time.monotonic() < deadline:
            time.sleep(0.1)
        self.toss.knobs.down = False
        self.faults["toss down"] += self.toss.refused > refused

    def _settle_checkouts(self) -> None:
        """After the load: Toss' notifications delivered, every hold ended (paid or
        released) and every refund owed made, by the sweeps the beat runs."""
        self.notifier.shutdown(wait=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            checkout.holds_expire()
            checkout.refunds_retry()
            rows = Reservation.objects.filter(event_id=self.event_id)
            owed = rows.filter(status__in=("RELEASED", "CANCELLED"), refunded_at=None).exclude(
                payment_id=None
            )
            if not rows.filter(status="HELD").exists() and not owed.exists():
                return
            time.sleep(0.5)
        self.log.append("holds or refunds still open a minute after the load")

    # --- the run -----------------------------------------------------------------------

    def execute(self) -> None:
        caches = {"default": {**settings.CACHES["default"], "LOCATION": self.redis.url}}
        try:
            with override_settings(CACHES=caches, REDIS_CLUSTER=False, BOOKING_RECONCILE_GRACE_SEC=GRACE_SEC):
                if self.checkout:
                    self._start_toss(random.Random(self.seed + 3))
                    with override_settings(**self._toss_settings()):
                        self._execute()
                else:
                    self._execute()
        finally:
            self.redis.stop()
            if self.toss:
                self.toss.stop()

    def _proxy(self, protocol: str) -> FaultProxy:
        if protocol == "postgres":
            db = settings.DATABASES["default"]
            proxy = FaultProxy("postgres", int(db["PORT"] or 5432), db["HOST"] or "127.0.0.1")
        else:
            proxy = FaultProxy("redis", self.redis.port)
        self.proxies.append(proxy.start())
        return proxy

    def _execute(self) -> None:
        self.pg_proxy, self.redis_proxy = self._proxy("postgres"), self._proxy("redis")
        self.names = {store.script(name).sha.encode(): name for name in BOOKING_SCRIPTS}
        self.dice = random.Random(self.seed + 1)
        self.forced = {step: (self.dice.randint(1, 5), self.dice.randint(6, 10)) for step in sorted(FORCED)}
        self.pg_proxy.rule = self.redis_proxy.rule = self._cut
        rng = random.Random(self.seed + 2)
        self.plan = plan = self._plan(rng)
        try:
            event = Event.objects.create(
                event_id=self.event_id,
                total_seats=self.seats,
                admit_per_second=self.buyers,
                active_window_seconds=600,
                max_seats_per_booking=3,
                **({"price": PRICE, "currency": "KRW", "hold_seconds": HOLD_SEC} if self.checkout else {}),
                late_confirmation=self.late,
            )
            if self.mapped:
                assert seating.seat_map_apply(event, SEAT_MAP) == self.seats
            events.event_publish(event)
            tokens = [queue.queue_join(event_id=self.event_id).token for _ in range(self.buyers)]
            tick = admission.event_admit(self.event_id)
            assert tick.admitted == self.buyers, tick
            self._start_commands(plan, rng)
            self.app_log = open(self.workdir / "gunicorn.log", "w")  # noqa: SIM115 - closed in finally
            self.base, self.app = start_gunicorn(self._env(), workers=2, stderr=self.app_log)

            self.cutting = "cuts" in self.flags
            monkey = CheckedThread(
                target=self._monkey,
                args=(rng, plan, time.monotonic()),
                name=f"faults of seed {self.seed}, scenario {self.scenario}",
            )
            monkey.start()
            stop = threading.Event()
            beat = CheckedThread(target=self._beat, args=(stop,), name="the admission tick")
            beat.start()
            try:
                with ThreadPoolExecutor(self.buyers) as pool:
                    list(pool.map(self._buyer, range(self.buyers), tokens))
            finally:
                monkey.join()  # a fault that could not be made fails the run here, naming it
                if self.checkout:
                    self._settle_checkouts()
                stop.set()
                beat.join()
            for warm in self.warm:
                if warm.started:
                    code = warm.wait()
                    if warm.args[0] == "reconcile" and not warm.killed:
                        self.faults["reconcile"] += 1
                        self.faults[f"reconcile exit {code}"] += 1
            if self.faults["reconcile killed"]:
                self._expire_locks()  # in case Redis was away when it was killed
            self.cutting = False
            self._count_cuts()
            self.result = "load stopped"
            self.log.append(self.summary())

            problems = self.check_faults() + self.check(after_reconcile=False)
            assert not problems, self._report("when the load stopped", problems)
            time.sleep(GRACE_SEC + 0.5)
            reports = self._reconcile_in_parallel()
            final = reconcile.booking_reconcile(self.event_id)
            problems = self.check(after_reconcile=True)
            if not self.redis_lost_data:
                # Redis kept its data: every give-back happened once, so no recount
                # may find seats to correct (a HEALED would hide a double give-back).
                healed = [r.lines()[0] for r in reports if r.healed]
                if self.faults["reconcile exit 2"] or healed:
                    problems.append(
                        f"reconcile corrected Redis though it lost nothing: {self.faults['reconcile exit 2']}"
                        f" run(s) during the load exited HEALED; after it: {healed}"
                    )
            if not final.consistent:
                problems.append(f"a further reconcile did not find everything consistent: {final.lines()}")
            if self.checkout:
                rows = Reservation.objects.filter(event_id=self.event_id)
                paid = rows.exclude(paid_at=None).aggregate(n=Sum("seat_count"))["n"] or 0
                released = rows.exclude(released_at=None).count()
                if paid < MIN_PAID or released < MIN_RELEASED:
                    problems.append(
                        f"only {paid} seats paid for ({MIN_PAID} at least) and {released} holds"
                        f" released ({MIN_RELEASED} at least)"
                    )
            else:
                taken = self._sold(Reservation.Status.CONFIRMED, Reservation.Status.CANCELLED)
                if taken < MIN_SOLD:
                    problems.append(
                        f"only {taken} seats sold (kept, or cancelled since); {MIN_SOLD} at least"
                    )
            assert not problems, self._report("after reconcile", problems)
            self.result = "passed"
        finally:
            if self.result != "passed":
                self.result = "FAILED"
            self.sold = self._sold()
            self.cutting = False
            if getattr(self, "app", None) is not None and self.app.poll() is None:
                os.killpg(self.app.pid, signal.SIGKILL)
                self.app.wait()
            for warm in self.warm:
                warm.stop()
            for proxy in self.proxies:
                proxy.close()
            if getattr(self, "app_log", None) is not None:
                self.app_log.close()

    def _start_commands(self, plan: list[tuple[float, str]], rng: random.Random) -> None:
        """The management commands the plan runs, started now and ready to go."""
        self.reconcilers: list[Warm] = []
        for _ in range(2 * sum(1 for _, what in plan if what.startswith("reconcile"))):
            # Each reconcile reaches Redis through a proxy of its own, which knows whom to kill.
            proxy = self._proxy("redis")
            process: list[Warm] = []
            action = rng.choice([Action.CUT_BEFORE, Action.CUT_AFTER])
            proxy.rule = self._reconcile_rule(process, rng.randint(1, 8), action)
            process.append(self._warm("reconcile", self.event_id, redis_proxy=proxy))
            self.reconcilers.append(process[0])
        # recover_event and two spares for its retries (when a cut fails it).
        spares = 3 if "flush" in self.flags else 0
        self.recoverers = [self._warm("recover_event", self.event_id) for _ in range(spares)]
        for warm in self.warm:
            warm.ready()

    def _count_cuts(self) -> None:
        for proxy in self.proxies:
            for m, action in proxy.cuts:
                if any(m is killed for killed in self.kill_messages):
                    continue  # counted as "reconcile killed"
                when = "before" if action is Action.CUT_BEFORE else "after"
                self.faults[f"{m.protocol} {self._step(m)} cut {when}"] += 1

    def _reconcile_in_parallel(self) -> list[reconcile.Report]:
        barrier = threading.Barrier(4)
        reports: list[reconcile.Report] = []

        def one() -> None:
            barrier.wait()
            try:
                reports.append(reconcile.booking_reconcile(self.event_id))
            finally:
                connections.close_all()

        threads = [CheckedThread(target=one, name=f"reconcile {n} after the load") for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return reports

    # --- the checks ----------------------------------------------------------------------

    def check_faults(self) -> list[str]:
        """Every fault the scenario planned fired, as often as planned; with cuts, both
        kinds of cut fired on both servers, the forced ones included."""
        problems = []
        for kind, n in sorted(self.planned.items()):
            if self.faults[kind] != n:
                problems.append(f"fault {kind!r} planned {n} times, fired {self.faults[kind]}")
        if "cuts" in self.flags:
            for protocol, step in sorted(FORCED):
                for when in ("before", "after"):
                    if not self.faults[f"{protocol} {step} cut {when}"]:
                        problems.append(
                            f"no {protocol} {step} was cut {when} it reached the server:"
                            f" {self.eligible[(protocol, step)]} matched the cut rule (did its text change?)"
                        )
        return problems

    def _sold(self, *statuses: str) -> int:
        rows = Reservation.objects.filter(event_id=self.event_id, status__in=statuses or ["CONFIRMED"])
        return rows.aggregate(n=Sum("seat_count"))["n"] or 0

    def check(self, *, after_reconcile: bool) -> list[str]:
        problems: list[str] = []
        rows = {
            str(rid): Row(str(token), seats, status, payment, section, tuple(ids))
            for rid, token, seats, status, payment, section, ids in Reservation.objects.filter(
                event_id=self.event_id
            ).values_list("reservation_id", "token", "seat_count", "status", "payment_id", "section", "seats")
        }
        # Seats taken: confirmed, or held by a buyer paying.
        sold = sum(row.seats for row in rows.values() if row.status in TAKEN)
        ledger = Event.objects.values_list("seats_sold", flat=True).get(event_id=self.event_id)
        if sold > self.seats:
            problems.append(f"OVERSOLD: {sold} confirmed or held seats of {self.seats}")
        if ledger != sold:
            problems.append(f"the seat ledger says {ledger}, the rows {sold}")
        confirmed = collections.Counter(row.token for row in rows.values() if row.status in TAKEN)
        doubles = [token for token, n in confirmed.items() if n > 1]
        if doubles:
            problems.append(f"tokens with two confirmed or held reservations: {doubles}")
        problems += self._check_rows(rows)
        problems += self._check_answers(rows, after_reconcile=after_reconcile)
        if self.checkout:
            problems += self._check_payments()

        k = store.EventKeys(self.event_id)
        client = self.redis.client()
        left = int(client.get(k.seats) or 0)
        entries = client.xrange(k.outbox)
        durable = {rid for rid, row in rows.items() if row.status != "VOID"}
        pending = sum(int(f[b"seats"]) for _, f in entries if f[b"reservationId"].decode() not in durable)
        returned = {rid.decode() for rid in client.hkeys(k.returned)}
        unreturned = sum(
            row.seats for rid, row in rows.items() if row.status in GIVEN_BACK and rid not in returned
        )
        if after_reconcile or not self.redis_lost_data:
            if left + sold + pending + unreturned != self.seats:
                problems.append(
                    f"Redis {left} left + {sold} confirmed or held + {pending} pending + {unreturned} being"
                    f" returned != {self.seats}"
                )
        if self.mapped:
            problems += self._check_map(rows, entries, returned, after_reconcile=after_reconcile)
        if after_reconcile:
            if entries:
                problems.append(f"{len(entries)} entries left in the outbox")
            if unreturned:
                problems.append(f"{unreturned} cancelled or released seats never returned")
            for rid, row in rows.items():
                mark = client.get(k.booked(row.token)) if row.status in TAKEN else None
                if row.status in TAKEN and (mark is None or mark.decode() != rid):
                    problems.append(f"token {row.token} holds {rid} but its booking mark is {mark}")
        return problems

    def _check_map(
        self, rows: dict[str, Row], entries: list, returned: set[str], *, after_reconcile: bool
    ) -> list[str]:
        """Per seat and per section (an event with a map): no seat in two live rows,
        Postgres' taken seats are exactly the live rows' and each section's ledger
        their count; Redis' places left per section add up as seats left do; and
        once reconciled, Redis shows taken exactly the seats live rows hold."""
        problems = []
        live = [row for row in rows.values() if row.status in TAKEN]
        held = [seat for row in live for seat in row.seat_ids]
        doubles = sorted(seat for seat, n in collections.Counter(held).items() if n > 1)
        if doubles:
            problems.append(f"SOLD TWICE: seats in two live reservations: {doubles}")
        taken = sorted(TakenSeat.objects.filter(event_id=self.event_id).values_list("seat_id", flat=True))
        if taken != sorted(held):
            problems.append(f"Postgres' taken seats {taken} are not the live rows' {sorted(held)}")
        k = store.EventKeys(self.event_id)
        client = self.redis.client()
        durable = {rid for rid, row in rows.items() if row.status != "VOID"}
        pending = collections.Counter()
        for _, f in entries:
            if f[b"reservationId"].decode() not in durable:
                pending[f.get(b"section", b"").decode()] += int(f[b"seats"])
        for code, places, sold in Section.objects.filter(event__event_id=self.event_id).values_list(
            "code", "places", "sold"
        ):
            mine = sum(row.seats for row in live if row.section == code)
            if sold != mine:
                problems.append(f"section {code}'s ledger says {sold}, its live rows {mine}")
            if sold > places:
                problems.append(f"OVERSOLD: section {code} has {sold} of {places} taken")
            unreturned = sum(
                row.seats
                for rid, row in rows.items()
                if row.section == code and row.status in GIVEN_BACK and rid not in returned
            )
            left = int(client.hget(k.section_left, code) or 0)
            if (after_reconcile or not self.redis_lost_data) and left + mine + pending[
                code
            ] + unreturned != places:
                problems.append(
                    f"section {code}: Redis {left} left + {mine} taken + {pending[code]} pending"
                    f" + {unreturned} being returned != {places}"
                )
        if after_reconcile:
            raw = client.get(k.seat_state) or b""
            shown = {s for s, state in zip(NUMBERED, seating.seat_states(raw), strict=False) if state}
            if shown != set(held):
                problems.append(
                    f"Redis shows taken {sorted(shown - set(held))} that no live row holds, and free"
                    f" {sorted(set(held) - shown)} that one does"
                )
        return problems

    def _check_rows(self, rows: dict[str, Row]) -> list[str]:
        """Every row is a buyer's, with the seats that buyer asked for; a cancelled one
        was cancelled by its buyer; one that holds seats was either named to its buyer
        (CONFIRMED, ALREADY_BOOKED, BOOKING_PENDING) or comes from a request whose answer
        never came (NO_ANSWER, REDIS_UNAVAILABLE): nobody told "no" holds seats."""
        problems = []
        named = {(a.token, a.reservation_id) for a in self.answers if a.what == "book" and a.reservation_id}
        unknown = {a.token for a in self.answers if a.what == "book" and a.code in UNKNOWN}
        for rid, row in rows.items():
            if row.token not in self.asked:
                problems.append(f"row {rid} of a token no buyer had: {row}")
                continue
            if row.seats != self.asked[row.token]:
                problems.append(f"row {rid} has {row.seats} seats, its buyer asked {self.asked[row.token]}")
            if row.status == "CANCELLED" and (row.token, rid) not in self.cancels_asked:
                problems.append(f"row {rid} is CANCELLED, but its buyer never asked to cancel it")
            if row.status != "VOID" and (row.token, rid) not in named:
                if row.token not in unknown:
                    problems.append(f"row {rid} is {row.status}, but its buyer was never told of it: {row}")
        return problems

    def _check_answers(self, rows: dict[str, Row], *, after_reconcile: bool) -> list[str]:
        """Every answer against the row it implies (docs/reliability.md, invariant 6).
        Before reconcile, a booking still in the outbox may have no row yet."""
        problems = []
        k = store.EventKeys(self.event_id)
        client = self.redis.client()
        lost_line = "flush" in self.flags  # a FLUSHALL took the line (LINE_LOST)
        unknown: set[str] = set()  # tokens with a book answer so far whose outcome is unknown

        def is_row(a: Answer, rid: str | None, *statuses: str) -> bool:
            row = rows.get(rid or "")
            return (
                row is not None
                and row.token == a.token
                and row.seats == self.asked[a.token]
                and row.status in statuses
            )

        def lost_with_redis(a: Answer) -> bool:
            """A booking only Redis held (its request never reached Postgres, or reconcile
            was to decide it), lost or refused because Redis lost its data, Postgres being
            unreachable or the count too high; then its token must not poll BOOKED for it."""
            row = rows.get(a.reservation_id or "")
            if row is not None and (row.status != "VOID" or row.token != a.token):
                return False
            mark = client.get(k.booked(a.token))
            return self.redis_lost_data and not (mark and mark.decode() == a.reservation_id)

        def ended_hold(a: Answer) -> bool:
            """A hold of the token's that ended (released, refunded or cancelled): its
            place has booked, so the token is no longer active."""
            return any(row.token == a.token and row.status in GIVEN_BACK for row in rows.values())

        ended = self.cancels_asked
        for n, a in enumerate(self.answers):
            rid = a.reservation_id
            row = rows.get(rid or "")
            kept = ("CONFIRMED", "CANCELLED") if (a.token, rid) in ended else ("CONFIRMED",)
            if self.checkout:  # a hold: paid, or released (and refunded if paid too late)
                kept = (
                    "CONFIRMED",
                    "RELEASED",
                    "REFUNDED",
                    *(("CANCELLED",) if (a.token, rid) in ended else ()),
                )
            wrong = None
            if a.what == "book":
                if a.code == "CONFIRMED":
                    if not is_row(a, rid, *kept) or a.seats != self.asked[a.token]:
                        wrong = "its row is missing, another's, or not confirmed"
                    else:
                        wrong = self._other_seats(a, rows[rid])
                elif a.code == "HELD":
                    if not is_row(a, rid, *REACHABLE["HELD"]) or a.seats != self.asked[a.token]:
                        wrong = "its row is missing, another's, or never held"
                    else:
                        wrong = self._other_seats(a, rows[rid])
                elif a.code in ("ALREADY_BOOKED", "BOOKING_PENDING"):
                    # The token's confirmed row, or a booking of it that waited in the outbox
                    # for reconcile (ALREADY_BOOKED: the retry of a request whose Redis step
                    # applied; BOOKING_PENDING: Postgres could not be asked).
                    if row is not None and (row.token != a.token or row.seats != self.asked[a.token]):
                        wrong = "it names another token's row"
                    elif after_reconcile and not is_row(a, rid, *kept) and not lost_with_redis(a):
                        wrong = f"it names no confirmed row of it (mark {client.get(k.booked(a.token))})"
                    elif not after_reconcile and row is not None and row.status == "CANCELLED":
                        if "CANCELLED" not in kept:
                            wrong = "its row was cancelled by nobody"
                elif a.code in ("SOLD_OUT", "INSUFFICIENT_SEATS") or (self.mapped and a.code in CHOOSE_AGAIN):
                    # That request wrote nothing, or a VOID row. A row that holds seats can
                    # only come from an earlier request whose answer never came, and only
                    # when Redis lost the mark: a token with a mark is answered ALREADY_BOOKED.
                    held = [x for x, row in rows.items() if row.token == a.token and row.status != "VOID"]
                    # With checkout, seats came back and the buyer tried again: a later
                    # answer may name a hold of the token.
                    later = {b.reservation_id for b in self.answers[n + 1 :] if b.token == a.token}
                    held = [x for x in held if x not in later]
                    # Or from a later request whose answer never came (it took seats,
                    # its hold ran out): with seats coming back, a buyer told no tries again.
                    if self.checkout and any(
                        b.token == a.token and b.code in UNKNOWN for b in self.answers[n + 1 :]
                    ):
                        held = []
                    if held and not (a.token in unknown and self.redis_lost_data):
                        wrong = f"the token holds {held}"
                elif a.code == "BOOKING_NOT_SAVED":
                    if not is_row(a, rid, "VOID"):
                        wrong = "its id is not a VOID row of this token"
                elif a.code in LINE_LOST and lost_line:
                    pass
                elif a.code == "NOT_ACTIVE" and a.token in unknown and ended_hold(a):
                    pass  # an earlier request, unanswered, held seats; the hold ended, and a place books once
                elif a.code not in UNKNOWN:
                    wrong = "not an answer this run can give"
                if a.code in UNKNOWN:
                    unknown.add(a.token)
            elif a.what == "pay":
                # What the buyer read after paying: the row went on from there, and a
                # booking confirmed by the buyer's payment holds that payment.
                reach = REACHABLE.get(a.code, set())
                if a.code == "RELEASED" and self.late:
                    reach = {*reach, "CONFIRMED", "CANCELLED"}  # paid late, its seats still free
                if a.code == "CONFIRMED" and (a.token, rid) not in ended:
                    reach = {"CONFIRMED"}  # kept: only its buyer cancels it
                if a.code not in REACHABLE:
                    wrong = "not an answer this run can give"
                elif not is_row(a, rid, *reach):
                    wrong = f"its row is not one of {sorted(reach)}"
                elif a.code == "CONFIRMED" and rows[rid].payment_id != a.payment_key:
                    wrong = f"its row holds payment {rows[rid].payment_id}"
            elif a.code in ("CANCELLED", "RELEASED", "REFUNDED", "ALREADY_CANCELLED"):
                statuses = REACHABLE.get(a.code, GIVEN_BACK)
                if a.code in ("RELEASED", "ALREADY_CANCELLED") and self.late:
                    statuses = {*statuses, "CONFIRMED"}  # a hold whose payment, in flight, came late
                if rid != a.asked_id or not is_row(a, rid, *statuses):
                    wrong = f"its id is not a row of this token in {sorted(statuses)}"
                elif a.code != "ALREADY_CANCELLED" and a.seats != self.asked[a.token]:
                    wrong = "it names other seats"
            elif a.code not in ("DATABASE_UNAVAILABLE", "NO_ANSWER"):
                wrong = "not an answer this run can give"
            if wrong:
                problems.append(f"answered {a.what} {a.code} but {wrong}: {a}, row {row}")
        return problems

    def _other_seats(self, a: Answer, row: Row) -> str | None:
        """On a map: what is wrong when a booking's answer names other seats than its row's."""
        if not self.mapped:
            return None
        named = (a.data["section"], tuple(a.data["seats"]))
        return None if named == (row.section, row.seat_ids) else f"it names {named}, its row {row}"

    def _check_payments(self) -> list[str]:
        """Money follows seats (docs/reliability.md, invariant 4): every payment Toss
        took is its order's confirmed booking, or given back in full and the booking
        REFUNDED; no payment is two bookings'; a booking refunded after it was
        confirmed was cancelled by its buyer; no hold is left and no refund owed."""
        problems = []
        rows = {str(r.reservation_id): r for r in Reservation.objects.filter(event_id=self.event_id)}
        by_payment = collections.Counter(r.payment_id for r in rows.values() if r.payment_id)
        problems += [f"payment {key} is on {n} bookings" for key, n in by_payment.items() if n > 1]
        for key, payment in sorted(self.toss.payments.items()):
            row = rows.get(payment["orderId"])
            if payment["status"] in ("READY", "ABORTED"):
                if row is not None and row.payment_id == key:
                    problems.append(f"booking {row.reservation_id} holds payment {key}, which took nothing")
                continue
            if row is None or row.payment_id != key:
                problems.append(
                    f"payment {key} ({payment['status']}) is not its order's: {row and row.payment_id}"
                )
            elif payment["status"] == "DONE" and row.status != "CONFIRMED":
                problems.append(f"payment {key} kept, its booking {row.reservation_id} is {row.status}")
            elif payment["status"] != "DONE" and (row.status != "REFUNDED" or payment["balanceAmount"]):
                problems.append(
                    f"payment {key} {payment['status']} with {payment['balanceAmount']} kept,"
                    f" its booking {row.reservation_id} {row.status}"
                )
            elif row is not None and payment["totalAmount"] != row.amount:
                problems.append(
                    f"payment {key} took {payment['totalAmount']}, its booking costs {row.amount}"
                )
        for rid, row in rows.items():
            if row.status == "HELD":
                problems.append(f"hold {rid} never ended (due {row.hold_expires_at})")
            if row.status == "CONFIRMED" and not row.payment_id:
                problems.append(f"booking {rid} confirmed without a payment")
            if row.status == "REFUNDED" and row.paid_at and (str(row.token), rid) not in self.cancels_asked:
                problems.append(f"booking {rid} was paid, then refunded, but its buyer never cancelled it")
        return problems

    def summary(self) -> str:
        """One line: seed, scenario, result, seats sold, answers, the faults that fired,
        and the plan's times (seconds into the sale)."""
        codes = dict(sorted(collections.Counter(f"{a.what} {a.code}" for a in self.answers).items()))
        faults = {kind: n for kind, n in sorted(self.faults.items()) if "exit" not in kind}
        exits = {kind: n for kind, n in sorted(self.faults.items()) if "exit" in kind}
        plan = ", ".join(f"{what} {at:.1f}" for at, what in self.plan if what != "reconcile")
        self.sold = self._sold()
        money = ""
        if self.checkout:
            rows = Reservation.objects.filter(event_id=self.event_id)
            paid, refunded = rows.exclude(paid_at=None).count(), rows.filter(status="REFUNDED").count()
            late = rows.exclude(paid_at=None).exclude(released_at=None).count()
            money = f"; {paid} paid ({late} after their hold was released), {refunded} refunded"
        return (
            f"chaos seed={self.seed} scenario={self.scenario}: {self.result}; {self.buyers} buyers,"
            f" {self.seats} seats, {self.sold} sold{money}; answers {codes}"
            + (f"; {self.joined_again} joined the line again" if self.joined_again else "")
            + f"; faults {faults}"
            + (f"; {exits}" if exits else "")
            + (f"; plan {plan}" if plan else "")
        )

    def _report(self, when: str, problems: list[str]) -> str:
        head = f"seed {self.seed}, scenario {self.scenario}: checks failed {when}"
        log = (self.workdir / "gunicorn.log").read_text(errors="replace").splitlines()[-15:]
        return "\n".join([head, *self.log, *problems[:30], "the app server's log ends:", *log])


def run_once(seed: int, scenario: str, workdir: Path, runs: list[Run] | None = None) -> str:
    """Run one seed; raises AssertionError naming the seed when a check fails. `runs`
    collects the run, passed or not, for a soak's totals."""
    print(f"chaos: seed {seed}, scenario {scenario}", flush=True)
    run = Run(seed, scenario, workdir)
    if runs is not None:
        runs.append(run)
    try:
        run.execute()
        return run.summary()
    finally:
        connection.close()
