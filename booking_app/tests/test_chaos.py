"""The fault-injection suite (booking_app/tests/chaos.py). Each seed picks its scenario.

- CI (no CHAOS_* set): seeds 1000-1009, one of each scenario.
- A soak: CHAOS_SEEDS=1-50 (or "3,17,40-45") runs those seeds; CHAOS_RUNS=50 runs 50
  seeds from CHAOS_FIRST_SEED (random when unset). Either way the seeds are printed,
  with each run's summary and the soak's totals, so the soak is a command anyone can
  run again.
- A replay: CHAOS_SEED=<n>; CHAOS_SCENARIO=<name> runs every seed in that scenario.
"""

import collections
import os
import random

import pytest

from booking_app.tests.chaos import SCENARIOS, Run, run_once, scenario_of


def _seeds(spec: str) -> list[int]:
    seeds: list[int] = []
    for part in spec.replace(" ", "").split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def _cases() -> tuple[str, list[int]]:
    env = {name: os.environ.get(name, "").strip() for name in ("CHAOS_SEED", "CHAOS_SEEDS", "CHAOS_RUNS")}
    if env["CHAOS_SEED"] or env["CHAOS_SEEDS"]:
        spec = env["CHAOS_SEED"] or env["CHAOS_SEEDS"]
    elif env["CHAOS_RUNS"]:
        first = int(os.environ.get("CHAOS_FIRST_SEED", "").strip() or random.randrange(10**6))
        spec = f"{first}-{first + int(env['CHAOS_RUNS']) - 1}"
    else:
        spec = "1000-1009"
    return spec, _seeds(spec)


SPEC, SEEDS = _cases()
_FORCED = os.environ.get("CHAOS_SCENARIO", "").strip()
assert not _FORCED or _FORCED in SCENARIOS, f"CHAOS_SCENARIO={_FORCED!r}: one of {sorted(SCENARIOS)}"
CASES = [(seed, _FORCED or scenario_of(seed)) for seed in SEEDS]
RUNS: list[Run] = []


@pytest.fixture(scope="module", autouse=True)
def _totals():
    """The soak's totals once every run is done: what a report of it quotes."""
    yield
    if not RUNS:
        return
    passed = [run for run in RUNS if run.result == "passed"]
    faults: collections.Counter = collections.Counter()
    answers: collections.Counter = collections.Counter()
    for run in RUNS:
        faults.update({kind: n for kind, n in run.faults.items() if "exit" not in kind})
        answers.update(f"{a.what} {a.code}" for a in run.answers)
    scenario = _FORCED and f" CHAOS_SCENARIO={_FORCED}"
    print(
        f"\nchaos soak CHAOS_SEEDS={SPEC}{scenario}: {len(RUNS)} runs, {len(passed)} passed,"
        f" {len(RUNS) - len(passed)} failed"
        f" {[(run.seed, run.scenario) for run in RUNS if run.result != 'passed']};"
        f" scenarios {dict(sorted(collections.Counter(run.scenario for run in RUNS).items()))};"
        f" seats sold {sum(run.sold for run in RUNS)}; joined the line again"
        f" {sum(run.joined_again for run in RUNS)};\n  answers {dict(sorted(answers.items()))};"
        f"\n  faults fired {dict(sorted(faults.items()))}"
    )


@pytest.mark.single_redis  # a redis-server of its own behind a fault proxy, crashed and restored
@pytest.mark.parametrize(("seed", "scenario"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
@pytest.mark.django_db(transaction=True)
def test_no_fault_sells_a_seat_twice_or_loses_a_confirmed_booking(postgres, tmp_path, seed, scenario):
    print(run_once(seed, scenario, tmp_path, RUNS))
