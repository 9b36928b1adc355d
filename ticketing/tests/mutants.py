"""Proof that the suite can fail: break each safeguard, one at a time, and watch it fail.

A test suite that stays green whatever one changes proves nothing. Each mutant
below removes one safeguard the reliability argument rests on (docs/reliability.md)
by replacing an exact piece of the source. For each, a copy of the working tree is
made in a temporary directory (the real tree is never edited), the mutant is
applied there, and the whole suite runs in the copy with `-x`: the test files most
likely to catch it first, then (a second run of pytest) every other one, so that a
kill is found fast but any test of the suite may be the one that kills it. Then:

- KILLED: a test failed. To be sure the mutant failed it and not the machine, the
  mutation is undone in the copy and that one test runs again: it must pass.
- SURVIVED: the whole suite passed with the safeguard gone. That is a hole in the
  tests; the exit status is non-zero.
- INCONCLUSIVE: no test failed yet the run did (an error outside the tests), or the
  killing test fails without the mutant too. Also a non-zero exit.

A mutant whose original text is no longer in the tree (the code moved on) stops the
check before anything runs: it cannot silently turn into a mutant of nothing.
`ticketing/tests/test_mutants.py` checks the same on every `make test`.

Each run creates the test database afresh (`--create-db`): a mutant of a migration
changes the schema. The runs use the Redis of REDIS_URL (under `make mutants`, the
one `ticketing.devstack exec` starts for the check) and the DATABASE_URL given.

    make mutants                                    # every mutant
    make mutants MUTANTS="ledger-check give-back-release"
    python -m ticketing.tests.mutants --list
    python -m ticketing.tests.mutants outbox-hold -- \
        booking_app/tests/test_faults.py::test_recounts_during_a_rush_are_exact
        # one mutant against the tests named after `--` instead of the suite

Logs of each run are kept in var/mutants/<name>.log.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
LOG_DIR = BASE_DIR / "var" / "mutants"


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str  # the safeguard it removes, in a line
    path: str  # relative to the tree's root
    original: str  # exact text, found exactly once
    replacement: str
    first: tuple[str, ...]  # test files most likely to catch it: they run first

    def apply(self, text: str) -> str:
        found = text.count(self.original)
        if found != 1:
            raise MutantRotted(
                f"mutant {self.name}: its original text is found {found} times in {self.path}"
                " (expected once); the code changed: update the mutant in ticketing/tests/mutants.py"
            )
        return text.replace(self.original, self.replacement)


class MutantRotted(Exception):
    pass


MUTANTS = [
    Mutant(
        name="ledger-check",
        breaks="the seat ledger's CHECK (seats_sold <= total_seats): Postgres never gets it",
        path="queue_app/migrations/0002_seats_sold.py",
        # The models still declare it (makemigrations stays quiet); the database lacks it.
        original="""\
        migrations.AddConstraint(
            model_name="event",
            constraint=models.CheckConstraint(
                condition=models.Q(("seats_sold__lte", models.F("total_seats"))), name="never_oversold"
            ),
        ),
""",
        replacement="""\
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="event",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("seats_sold__lte", models.F("total_seats"))),
                        name="never_oversold",
                    ),
                )
            ]
        ),
""",
        first=("booking_app/tests/test_faults.py", "booking_app/tests/test_durability.py"),
    ),
    Mutant(
        name="outbox-hold",
        breaks="outbox_done.lua removes a committed booking's entry while a recount runs",
        path="lua/outbox_done.lua",
        # The recount mark is still read (a key of the wrong type still fails), then ignored.
        original="if redis.call('GET', recount) then return -1 end\n",
        replacement="redis.call('GET', recount)\n",
        # test_recounts_during_a_rush_are_exact catches it in a race; test_booking.py's
        # recount-mark test every time.
        first=("booking_app/tests/test_faults.py", "booking_app/tests/test_booking.py"),
    ),
    Mutant(
        name="cancel-hold",
        breaks="cancel.lua returns a cancellation's seats while a recount runs",
        path="lua/cancel.lua",
        original="if redis.call('GET', recount) then return -2 end\n",
        replacement="redis.call('GET', recount)\n",
        first=("booking_app/tests/test_cancel.py", "booking_app/tests/test_faults.py"),
    ),
    Mutant(
        name="give-back-release",
        breaks="release.lua gives a refused booking's seats back even when its XDEL removed nothing",
        path="lua/release.lua",
        original="if redis.call('XDEL', outbox, entry) == 0 then return 0 end\n",
        replacement="redis.call('XDEL', outbox, entry)\n",
        first=("booking_app/tests/test_durability.py", "booking_app/tests/test_faults.py"),
    ),
    Mutant(
        name="give-back-cancel",
        breaks="cancel.lua returns a cancellation's seats even when the `returned` hash already has it",
        path="lua/cancel.lua",
        original="if redis.call('HEXISTS', returned, reservation) == 1 then return -1 end\n",
        replacement="redis.call('HEXISTS', returned, reservation)\n",
        first=("booking_app/tests/test_cancel.py", "booking_app/tests/test_faults.py"),
    ),
    Mutant(
        name="retake-returned",
        breaks="a late confirmation takes its seats back but leaves them in the `returned` hash",
        path="lua/retake.lua",
        original="  redis.call('HDEL', returned, reservation)\n",
        replacement="",
        # Its cancellation then returns nothing, and reconcile's recount must heal.
        first=("booking_app/tests/test_late_confirmation.py",),
    ),
    Mutant(
        name="give-back-confirmed",
        breaks="a give-back read while the row was released returns seats a late payment has since confirmed",
        path="booking_app/services.py",
        original="pk=reservation.pk, status__in=GIVEN_BACK",
        replacement="pk=reservation.pk",
        first=("booking_app/tests/test_late_confirmation.py",),
    ),
    Mutant(
        name="refund-in-full",
        breaks="a refund gives back the whole payment, not the share its cancellation decided",
        path="booking_app/checkout.py",
        original="else min(row.refunded_amount, charge.amount)",
        replacement="else charge.amount",
        first=("booking_app/tests/test_refunds.py",),
    ),
    Mutant(
        name="purge-unlocked",
        breaks="a purge wipes the event without holding its row: a reopen meanwhile is wiped",
        path="booking_app/retention.py",
        original="        event = _closed(event_id, lock=True)\n",
        replacement="        event = _closed(event_id)\n",
        first=("booking_app/tests/test_retention.py",),
    ),
    Mutant(
        name="not-saved-untold",
        breaks="reconcile refuses a pending booking and its person polls ACTIVE again, never told",
        path="lua/release.lua",
        original="elseif mark == reservation and unheard == '1' then\n",
        replacement="elseif mark == reservation and unheard == 'never' then\n",
        first=("booking_app/tests/test_pending.py",),
    ),
    Mutant(
        name="unknown-commit-failed",
        breaks="a commit whose answer was lost is taken as failed: seats released, BOOKING_NOT_SAVED",
        path="booking_app/services.py",
        original="""\
            if not connection.in_atomic_block:
                connection.close()  # the next query opens a fresh one
""",
        # Only the unknown commit: with Postgres away the booking still waits (PENDING).
        replacement="""\
            if not connection.in_atomic_block:
                connection.close()
                try:
                    connection.ensure_connection()  # Postgres answers again: "so it failed"
                except DatabaseError:
                    continue
                return Decision(NOT_SAVED)
""",
        first=("booking_app/tests/test_faults.py", "booking_app/tests/test_durability.py"),
    ),
    Mutant(
        name="unknown-commit-succeeded",
        breaks="a commit whose answer was lost is taken as applied: CONFIRMED without asking",
        path="booking_app/services.py",
        original="""\
            if not connection.in_atomic_block:
                connection.close()  # the next query opens a fresh one
""",
        replacement="""\
            if not connection.in_atomic_block:
                connection.close()
                try:
                    connection.ensure_connection()  # Postgres answers again: "so it applied"
                except DatabaseError:
                    continue
                return Decision(CONFIRMED)
""",
        first=("booking_app/tests/test_faults.py", "booking_app/tests/test_durability.py"),
    ),
    Mutant(
        name="seat-unique",
        breaks="a reservation's seats take no rows of booking_app_takenseat: Postgres sells a seat twice",
        path="booking_app/migrations/0011_seats.py",
        original="""\
    INSERT INTO booking_app_takenseat (event_id, seat_id, reservation_id)
      SELECT event, seat, NEW.id FROM unnest(NEW.seats) AS seat;
""",
        replacement="",
        first=("booking_app/tests/test_seat_ledger.py", "booking_app/tests/test_seat_booking.py"),
    ),
    Mutant(
        name="seat-give-back",
        breaks="a cancellation returns its places but leaves its numbered seats taken on the map",
        path="lua/cancel.lua",
        original=(
            "seats_give_back(sections, seat_index, seat_state, section_left, section, seat_ids,"
            " tonumber(count))\n"
        ),
        replacement="redis.call('HINCRBY', section_left, section, count)\n",
        first=("booking_app/tests/test_seat_booking.py",),
    ),
    Mutant(
        name="seat-sold-again-freed",
        breaks="a give-back Redis forgot shows free a seat another buyer holds since",
        path="booking_app/services.py",
        original="        seats = [seat for seat in seats if seat not in taken]\n",
        replacement="",
        first=("booking_app/tests/test_seat_booking.py",),
    ),
    Mutant(
        name="safety-net-jumps-the-line",
        breaks="a safety-net arrival is admitted while earlier people wait",
        path="lua/join.lua",
        original="  elseif before == 0 and (cap == 0 or active_count < cap) and this_second < rate then\n",
        replacement="  elseif (cap == 0 or active_count < cap) and this_second < rate then\n",
        first=("queue_app/tests/test_modes.py",),
    ),
    Mutant(
        name="unclaimed-books",
        breaks="a person whose claim time ran out unclaimed still books",
        path="lua/reserve.lua",
        original="if claim == 'PASSED' then return {'NOT_ACTIVE'} end",
        replacement="if claim == 'PASSED' then claim = 'CLAIMED' end",
        first=("queue_app/tests/test_claim.py",),
    ),
    Mutant(
        name="lane-starves-the-general-line",
        breaks="the priority lane takes the whole rate while the general line waits",
        path="lua/admit.lua",
        original="      lane_want = math.floor(owed / 100)\n",
        replacement="      lane_want = want\n",
        first=("queue_app/tests/test_priority.py",),
    ),
    Mutant(
        name="lane-give-back-to-the-general-line",
        breaks="a lane token's booking is settled through the general line's keys",
        path="booking_app/services.py",
        original="                line_keys(k.event_id, b.token_raw),\n",
        replacement="                k,\n",
        first=("queue_app/tests/test_priority.py",),
    ),
]


@dataclass
class Result:
    mutant: Mutant
    verdict: str  # KILLED, SURVIVED or INCONCLUSIVE
    test: str  # the first failing test, or what went wrong
    seconds: float
    passed_before: int = 0  # tests that passed before the kill


def check_all_apply(mutants: list[Mutant], root: Path = BASE_DIR) -> None:
    """Every mutant's original text is in the tree, once: else stop before any run."""
    errors = []
    for m in mutants:
        try:
            m.apply((root / m.path).read_text())
        except (MutantRotted, FileNotFoundError) as exc:
            errors.append(str(exc))
    if errors:
        raise MutantRotted("\n".join(errors))


def copy_tree(dest: Path) -> None:
    """The working tree as it is (committed or not, ignored files left out)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=BASE_DIR,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = BASE_DIR / name
        if not src.is_file():  # deleted in the working tree
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)


def suite_phases(root: Path, first: tuple[str, ...]) -> list[list[str]]:
    """Two runs of pytest that make the whole suite: `first`, then every other test
    file of the suite's testpaths, those beside `first` leading. Two runs, because
    within one pytest-django runs every test that needs a transactional database
    after all the others, so a killer in `first` could wait for most of the suite.
    Files, not directories: pytest merges a file into a directory given beside it,
    and the order would be lost."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    files = [
        str(path.relative_to(root))
        for testpath in config["testpaths"]
        for path in sorted((root / testpath).rglob("test_*.py"))
    ]
    near = {str(Path(f).parent) for f in first}
    rest = sorted((f for f in files if f not in first), key=lambda f: str(Path(f).parent) not in near)
    return [list(first), rest]


# In pytest's short test summary (-rfE), after the captured logs (whose lines may
# start with ERROR too).
SUMMARY = re.compile(r"^=+ short test summary info =+$", re.M)
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+\.py(?:::.+?)?)(?: - .*)?$", re.M)
PASSED = re.compile(r"(\d+) passed")


def pytest(root: Path, args: list[str], log: Path) -> tuple[int, str]:
    """Run pytest in `root`; returns its exit status and output (also written to `log`)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-p", "no:randomly", "-rfE", "--create-db", *args]
    with log.open("a") as out:
        out.write(f"\n$ cd {root} && {' '.join(cmd)}\n")
        out.flush()
        start = log.stat().st_size
        # Straight into the log, for whoever watches it while the suite runs.
        status = subprocess.call(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT)
    with log.open("rb") as written:
        written.seek(start)
        return status, written.read().decode(errors="replace")


def run_mutant(m: Mutant, tests: list[str] | None) -> Result:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"{m.name}.log"
    log.write_text(f"mutant {m.name}: {m.breaks}\n{m.path}:\n- {m.original}+ {m.replacement}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{m.name}-") as tmp:
        root = Path(tmp)
        copy_tree(root)
        target = root / m.path
        original = target.read_text()
        target.write_text(m.apply(original))
        passed = 0
        for phase in [tests] if tests else suite_phases(root, m.first):
            status, output = pytest(root, phase, log)
            passed += int(PASSED.findall(output)[-1]) if PASSED.findall(output) else 0
            if status != 0:
                break
        seconds = time.monotonic() - started
        summary = SUMMARY.split(output)[-1] if SUMMARY.search(output) else ""
        failed = FAILED.findall(summary)
        if status == 0:
            return Result(m, "SURVIVED", "", seconds, passed)
        if not failed:
            return Result(m, "INCONCLUSIVE", f"pytest exited {status} with no failing test", seconds)
        # The control: the same test, the mutation undone, must pass.
        target.write_text(original)
        control, _ = pytest(root, [failed[0]], log)
        if control != 0:
            return Result(m, "INCONCLUSIVE", f"{failed[0]} fails without the mutant too", seconds)
        return Result(m, "KILLED", failed[0], seconds, passed)


def report(results: list[Result]) -> str:
    width = max(len(res.mutant.name) for res in results)
    head = f"{'mutant':<{width}}  {'verdict':<12}  {'minutes':>7}"
    lines = [f"{head}  first failing test (tests passed before)"]
    for res in results:
        detail = f"{res.test} ({res.passed_before})" if res.verdict == "KILLED" else res.test
        lines.append(f"{res.mutant.name:<{width}}  {res.verdict:<12}  {res.seconds / 60:>7.1f}  {detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tests = None
    if "--" in argv:
        at = argv.index("--")
        argv, tests = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m ticketing.tests.mutants", description=__doc__.split("\n")[0]
    )
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"no mutant named {', '.join(unknown)}; known: {', '.join(known)}")
    chosen = [known[n] for n in args.names] or MUTANTS
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.breaks} ({m.path})")
        return 0
    if (BASE_DIR / ".env").is_file():  # the settings the tree runs with, as ticketing.devstack reads them
        import environ

        environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
    try:
        check_all_apply(chosen)
    except MutantRotted as exc:
        print(exc, file=sys.stderr)
        return 2
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        print("run it with `make mutants`: it needs REDIS_URL and DATABASE_URL", file=sys.stderr)
        return 2
    results = []
    for m in chosen:
        print(f"mutant {m.name}: {m.breaks} ...", flush=True)
        res = run_mutant(m, tests)
        took = f"{res.seconds / 60:.1f} min"
        print(f"  {res.verdict} {res.test} in {took} (log: {LOG_DIR / m.name}.log)", flush=True)
        results.append(res)
    print()
    print(report(results))
    return 0 if all(res.verdict == "KILLED" for res in results) else 1


if __name__ == "__main__":
    sys.exit(main())
