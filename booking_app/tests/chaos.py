"""The fault-injection run: many buyers against a small event, faults at every step.

One run, for one seed and one scenario:

- a Redis server of its own, and app servers (gunicorn, 2 workers x 8 threads) that
  reach Postgres and Redis through `FaultProxy`s, so connections can be cut before a
  command reaches the server or after it applied (a lost acknowledgement);
- buyers (threads, real HTTP) book 1-3 seats of an event with fewer seats than they
  want, retrying as a client would on a 503 or a broken connection; some cancel;
- the scenario's faults, at times drawn from the seed: cuts at every Postgres and
  Redis step of booking, cancellation, reconcile and recovery; a gunicorn worker
  SIGKILLed mid-request; Redis SIGKILLed and restarted from an older snapshot;
  FLUSHALL followed by `recover_event`; reconciles running in parallel (some of them
  SIGKILLed too);
- then the invariants, once when the load has stopped and again after reconcile.

The seed fixes the buyers, the fault probabilities and the schedule; threads make the
exact interleaving differ between replays, so a failing seed is replayed with
`CHAOS_SEED=<seed> CHAOS_SCENARIO=<name> make chaos`.
"""

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
from django.db import connection, connections
from django.db.models import Count, Sum
from django.test import override_settings

from booking_app import reconcile
from booking_app.models import Reservation
from booking_app.tests.conftest import RedisServer
from conftest import start_gunicorn
from queue_app import services as queue
from queue_app.models import Event
from ticketing import redis as r
from ticketing.tests.faultproxy import Action, FaultProxy, Message

SCENARIOS = {
    "cuts": {"cuts"},
    "kill": {"cuts", "kill"},
    "restore": {"cuts", "restore"},
    "flush": {"cuts", "flush"},
    "reconcile": {"cuts", "reconcile"},
    "everything": {"cuts", "kill", "restore", "flush", "reconcile"},
}
# The Redis scripts of booking, cancellation and reconcile: each may be cut.
BOOKING_SCRIPTS = ("reserve", "release", "outbox_done", "cancel", "seats_heal")
# Chance that an eligible message is cut before / after the server got it.
CUT_BEFORE, CUT_AFTER = 0.05, 0.05
TRANSIENT = {"REDIS_UNAVAILABLE", "DATABASE_UNAVAILABLE", "BOOKING_NOT_SAVED", "NO_ANSWER"}
GRACE_SEC = 2  # reconcile decides outbox entries this old (production: 30 s)


@dataclass
class Answer:
    what: str  # "book" or "cancel"
    token: str
    status: int | None
    code: str  # CONFIRMED, CANCELLED, or the error code; NO_ANSWER for a broken connection
    reservation_id: str | None


@dataclass
class Run:
    seed: int
    scenario: str
    workdir: Path
    buyers: int = 200
    seats: int = 100
    answers: list[Answer] = field(default_factory=list)
    faults: collections.Counter = field(default_factory=collections.Counter)
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.flags = SCENARIOS[self.scenario]
        self.event_id = f"chaos-{self.seed}-{uuid.uuid4().hex[:6]}"
        self.redis = RedisServer(self.workdir)
        self.redis_lost_data = False

    # --- the stack ---------------------------------------------------------------

    def _env(self) -> dict:
        """What app servers and management commands of the run change in their
        environment: Postgres and Redis through the fault proxies."""
        db_name = settings.DATABASES["default"]["NAME"]
        return {
            "DATABASE_URL": self.pg_proxy.postgres_url(db_name),
            "REDIS_URL": self.redis_proxy.redis_url(),
            "REDIS_CLUSTER": "false",  # the proxy stands before one server of its own
            "BOOKING_RECONCILE_GRACE_SEC": str(GRACE_SEC),
            "LOG_LEVEL": "CRITICAL",
        }

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

    def _manage(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=settings.BASE_DIR,
            env={**os.environ, **self._env()},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    # --- faults --------------------------------------------------------------------

    def _rule(self, rng: random.Random, lock: threading.Lock, names: dict[bytes, str]):
        def rule(m: Message) -> Action:
            if m.protocol == "postgres":
                text = m.text.lstrip().upper()
                eligible = m.kind == "Q" and (
                    text.startswith("COMMIT")
                    or text.startswith('INSERT INTO "BOOKING_APP_RESERVATION"')
                    or text.startswith('UPDATE "BOOKING_APP_RESERVATION"')
                )
                step = text.split(" ", 1)[0]
            else:
                eligible = m.kind == "EVALSHA" and bool(m.args) and m.args[0] in names
                step = names.get(m.args[0], "") if eligible else ""
            if not eligible or not self.cutting:
                return Action.PASS
            with lock:
                roll = rng.random()
            if roll < CUT_BEFORE:
                self.faults[f"{m.protocol} {step} cut before"] += 1
                return Action.CUT_BEFORE
            if roll < CUT_BEFORE + CUT_AFTER:
                self.faults[f"{m.protocol} {step} cut after"] += 1
                return Action.CUT_AFTER
            return Action.PASS

        return rule

    def _monkey(self, rng: random.Random, stop: threading.Event) -> None:
        """The scenario's big faults, at seeded times while the buyers book."""
        plan: list[tuple[float, str]] = []
        if "kill" in self.flags:
            plan += [(rng.uniform(0.5, 4.0), "kill worker") for _ in range(2)]
        if "restore" in self.flags:
            plan += [(0.3, "snapshot"), (rng.uniform(1.5, 3.5), "restore")]
        if "flush" in self.flags:
            plan.append((rng.uniform(1.0, 3.5), "flush"))
        if "reconcile" in self.flags:
            plan += [(0.6 + 0.7 * i, "reconcile") for i in range(6)]
        started = time.monotonic()
        snapshot = None
        reconciles: list[subprocess.Popen] = []
        for at, what in sorted(plan):
            if stop.wait(max(0.0, at - (time.monotonic() - started))):
                break
            self.faults[what] += 1
            if what == "kill worker":
                workers = self._workers()
                if workers:
                    os.kill(rng.choice(workers), signal.SIGKILL)
            elif what == "snapshot":
                snapshot = self.redis.snapshot()
            elif what == "restore":
                self.redis.crash()
                self.redis.restart(snapshot)
                self.redis_lost_data = True
            elif what == "flush":
                self.redis.client().flushall()
                self.redis_lost_data = True
                self._recover()
            elif what == "reconcile":
                pair = [self._manage("reconcile", self.event_id) for _ in range(2)]
                reconciles += pair
                if rng.random() < 0.4:
                    time.sleep(rng.uniform(0.0, 0.3))
                    pair[0].kill()
                    self.faults["reconcile killed"] += 1
        for proc in reconciles:
            proc.wait()

    def _recover(self) -> None:
        """recover_event through the faulty connections, until it succeeds."""
        for _ in range(20):
            if self._manage("recover_event", self.event_id).wait() == 0:
                return
            self.faults["recover_event retried"] += 1
        raise AssertionError("recover_event never succeeded")

    # --- buyers ----------------------------------------------------------------------

    def _call(self, what: str, token: str, method: str, path: str, **kwargs) -> Answer:
        try:
            resp = requests.request(method, f"{self.base}{path}", timeout=60, **kwargs)
            body = resp.json()
        except (requests.RequestException, ValueError):
            answer = Answer(what, token, None, "NO_ANSWER", None)
        else:
            if body["success"]:
                data = body["data"]
                answer = Answer(what, token, resp.status_code, data["status"], data["reservationId"])
            else:
                err = body["error"]
                answer = Answer(what, token, resp.status_code, err["code"], err.get("reservationId"))
        self.answers.append(answer)
        return answer

    def _buyer(self, i: int, token: str) -> None:
        rng = random.Random(self.seed * 100_003 + i)
        time.sleep(rng.uniform(0.0, 4.0))
        payload = {
            "token": token,
            "seatCount": rng.randint(1, 3),
            "eventId": self.event_id,
            "buyerName": f"buyer {i}",
            "buyerEmail": f"buyer{i}@example.com",
        }
        for _ in range(4):
            answer = self._call("book", token, "POST", "/api/booking", json=payload)
            if answer.code not in TRANSIENT:
                break
            time.sleep(rng.uniform(0.1, 0.4))
        if answer.code == "CONFIRMED" and rng.random() < 0.15:
            time.sleep(rng.uniform(0.0, 1.0))
            for _ in range(4):
                cancel = self._call(
                    "cancel",
                    token,
                    "DELETE",
                    f"/api/booking/{answer.reservation_id}",
                    params={"token": token},
                )
                if cancel.code not in TRANSIENT:
                    break
                time.sleep(rng.uniform(0.1, 0.4))

    # --- the run -----------------------------------------------------------------------

    def execute(self) -> None:
        caches = {"default": {**settings.CACHES["default"], "LOCATION": self.redis.url}}
        try:
            with override_settings(CACHES=caches, REDIS_CLUSTER=False, BOOKING_RECONCILE_GRACE_SEC=GRACE_SEC):
                self._execute()
        finally:
            self.redis.stop()

    def _execute(self) -> None:
        db = settings.DATABASES["default"]
        self.pg_proxy = FaultProxy("postgres", int(db["PORT"] or 5432), db["HOST"] or "127.0.0.1").start()
        self.redis_proxy = FaultProxy("redis", self.redis.port).start()
        self.cutting = False
        names = {r.script(name).sha.encode(): name for name in BOOKING_SCRIPTS}
        rule = self._rule(random.Random(self.seed + 1), threading.Lock(), names)
        self.pg_proxy.rule = self.redis_proxy.rule = rule
        try:
            event = Event.objects.create(
                event_id=self.event_id,
                total_seats=self.seats,
                admit_per_second=self.buyers,
                active_window_seconds=600,
                max_seats_per_booking=3,
            )
            queue.event_publish(event)
            tokens = [queue.queue_join(event_id=self.event_id).token for _ in range(self.buyers)]
            tick = queue.event_admit(self.event_id)
            assert tick.admitted == self.buyers, tick
            self.base, self.app = start_gunicorn(self._env(), workers=2)

            self.cutting = "cuts" in self.flags
            stop = threading.Event()
            monkey = threading.Thread(target=self._monkey, args=(random.Random(self.seed + 2), stop))
            monkey.start()
            with ThreadPoolExecutor(self.buyers) as pool:
                list(pool.map(self._buyer, range(self.buyers), tokens))
            stop.set()
            monkey.join()
            self.cutting = False
            self.log.append(self.summary())

            problems = self.check(after_reconcile=False)
            assert not problems, self._report("when the load stopped", problems)
            time.sleep(GRACE_SEC + 0.5)
            self._reconcile_in_parallel()
            final = reconcile.booking_reconcile(self.event_id)
            problems = self.check(after_reconcile=True)
            if not final.consistent:
                problems.append(f"a further reconcile still found seats to heal: {final.lines()}")
            assert not problems, self._report("after reconcile", problems)
        finally:
            self.cutting = False
            if getattr(self, "app", None) is not None and self.app.poll() is None:
                os.killpg(self.app.pid, signal.SIGKILL)
                self.app.wait()
            self.pg_proxy.close()
            self.redis_proxy.close()

    def _reconcile_in_parallel(self) -> None:
        barrier = threading.Barrier(4)

        def one() -> None:
            barrier.wait()
            try:
                reconcile.booking_reconcile(self.event_id)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    # --- the invariants -----------------------------------------------------------------

    def check(self, *, after_reconcile: bool) -> list[str]:
        problems: list[str] = []
        rows = Reservation.objects.filter(event_id=self.event_id)
        status = {str(rid): s for rid, s in rows.values_list("reservation_id", "status")}
        sold = rows.filter(status="CONFIRMED").aggregate(n=Sum("seat_count"))["n"] or 0
        ledger = Event.objects.values_list("seats_sold", flat=True).get(event_id=self.event_id)
        if sold > self.seats:
            problems.append(f"OVERSOLD: {sold} confirmed seats of {self.seats}")
        if ledger != sold:
            problems.append(f"the seat ledger says {ledger}, the rows {sold}")
        doubles = rows.filter(status="CONFIRMED").values("token").annotate(n=Count("id")).filter(n__gt=1)
        if doubles:
            problems.append(f"tokens with two confirmed reservations: {list(doubles)}")
        for a in self.answers:
            if (
                a.what == "book"
                and a.code == "CONFIRMED"
                and status.get(a.reservation_id)
                not in (
                    "CONFIRMED",
                    "CANCELLED",
                )
            ):
                problems.append(f"answered CONFIRMED but the row is {status.get(a.reservation_id)}: {a}")
            if a.code == "BOOKING_NOT_SAVED" and status.get(a.reservation_id) != "VOID":
                problems.append(
                    f"answered BOOKING_NOT_SAVED but the row is {status.get(a.reservation_id)}: {a}"
                )
            if after_reconcile and a.code == "BOOKING_PENDING" and a.reservation_id not in status:
                # Postgres could not be asked, so the outbox in Redis was all that held
                # it: only a Redis that lost its data as well may lose it, and then its
                # token must not poll BOOKED for it.
                mark = self.redis.client().get(r.EventKeys(self.event_id).booked(a.token))
                if not self.redis_lost_data or (mark and mark.decode() == a.reservation_id):
                    problems.append(f"a pending booking was never decided: {a} (mark {mark})")

        k = r.EventKeys(self.event_id)
        client = self.redis.client()
        left = int(client.get(k.seats) or 0)
        entries = client.xrange(k.outbox)
        durable = {rid for rid, s in status.items() if s in ("CONFIRMED", "CANCELLED")}
        pending = sum(int(f[b"seats"]) for _, f in entries if f[b"reservationId"].decode() not in durable)
        returned = {rid.decode() for rid in client.hkeys(k.returned)}
        unreturned = (
            rows.filter(status="CANCELLED")
            .exclude(reservation_id__in=list(returned))
            .aggregate(n=Sum("seat_count"))["n"]
            or 0
        )
        if after_reconcile or not self.redis_lost_data:
            if left + sold + pending + unreturned != self.seats:
                problems.append(
                    f"Redis {left} left + {sold} confirmed + {pending} pending + {unreturned} being"
                    f" returned != {self.seats}"
                )
        if after_reconcile:
            if entries:
                problems.append(f"{len(entries)} entries left in the outbox")
            if unreturned:
                problems.append(f"{unreturned} cancelled seats never returned")
            for rid, token in rows.filter(status="CONFIRMED").values_list("reservation_id", "token"):
                mark = client.get(k.booked(str(token)))
                if mark is None or mark.decode() != str(rid):
                    problems.append(f"token {token} holds {rid} but its booking mark is {mark}")
        return problems

    def summary(self) -> str:
        codes = collections.Counter(f"{a.what} {a.code}" for a in self.answers)
        sold = (
            Reservation.objects.filter(event_id=self.event_id, status="CONFIRMED").aggregate(
                n=Sum("seat_count")
            )["n"]
            or 0
        )
        return (
            f"chaos seed={self.seed} scenario={self.scenario}: {self.buyers} buyers, {self.seats} seats,"
            f" {sold} sold; answers {dict(sorted(codes.items()))}; faults {dict(sorted(self.faults.items()))}"
        )

    def _report(self, when: str, problems: list[str]) -> str:
        head = f"seed {self.seed}, scenario {self.scenario}: invariants broken {when}"
        return "\n".join([head, *self.log, *problems[:30]])


def run_once(seed: int, scenario: str, workdir: Path) -> str:
    """Run one seed; raises AssertionError naming the seed when an invariant breaks."""
    print(f"chaos: seed {seed}, scenario {scenario}", flush=True)
    run = Run(seed, scenario, workdir)
    run.execute()
    connection.close()
    return run.log[-1]
