"""The fault-injection suite (booking_app/tests/chaos.py): one run per scenario in CI;
`make chaos` runs many seeds (CHAOS_RUNS), or replays one (CHAOS_SEED, CHAOS_SCENARIO)."""

import os
import random

import pytest

from booking_app.tests.chaos import SCENARIOS, run_once

_RUNS = int(os.environ.get("CHAOS_RUNS", "0"))
_SEED = os.environ.get("CHAOS_SEED")
if _SEED:  # a replay
    CASES = [(int(_SEED), os.environ.get("CHAOS_SCENARIO", "everything"))]
elif _RUNS:  # a soak: random seeds over every scenario
    _pick = random.Random()
    CASES = [(_pick.randrange(10**6), _pick.choice(sorted(SCENARIOS))) for _ in range(_RUNS)]
else:  # CI: each scenario once, with fixed seeds
    CASES = [(1000 + i, name) for i, name in enumerate(sorted(SCENARIOS))]


@pytest.mark.single_redis  # a redis-server of its own behind a fault proxy, crashed and restored
@pytest.mark.parametrize(("seed", "scenario"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
@pytest.mark.django_db(transaction=True)
def test_no_fault_sells_a_seat_twice_or_loses_a_confirmed_booking(postgres, tmp_path, seed, scenario):
    print(run_once(seed, scenario, tmp_path))
