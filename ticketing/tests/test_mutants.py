"""`make mutants` (ticketing/tests/mutants.py) stays able to break what it claims to:
each mutant's original text is in the tree exactly once, so a change of the code
fails here, on every run, instead of leaving a mutant that breaks nothing."""

from pathlib import Path

import pytest

from ticketing.tests import mutants


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_still_finds_the_code_it_breaks(mutant):
    text = (mutants.BASE_DIR / mutant.path).read_text()
    changed = mutant.apply(text)
    assert changed != text
    assert mutant.breaks and mutant.first
    for path in mutant.first:
        assert (mutants.BASE_DIR / path).is_file(), path


def test_a_mutant_whose_code_moved_on_stops_the_check(tmp_path):
    stale = mutants.Mutant("stale", "nothing", "x.lua", "return 1\n", "return 2\n", ("x",))
    (tmp_path / "x.lua").write_text("return 3\n")
    with pytest.raises(mutants.MutantRotted, match="found 0 times"):
        mutants.check_all_apply([stale], tmp_path)


def test_the_suite_runs_the_likely_killers_first_then_every_test_file():
    first, rest = mutants.suite_phases(mutants.BASE_DIR, ("booking_app/tests/test_cancel.py",))
    assert first == ["booking_app/tests/test_cancel.py"]
    assert rest[0].startswith("booking_app/tests/")  # its neighbours next
    order = first + rest
    assert len(order) == len(set(order))
    every = {
        str(p.relative_to(mutants.BASE_DIR))
        for d in Path(mutants.BASE_DIR).glob("*/tests")
        for p in d.rglob("test_*.py")
    }
    assert {f.split("/")[0] for f in every} == {"accounts_app", "queue_app", "booking_app", "ticketing"}
    assert set(order) == every
