"""The capacity model's arithmetic (bench/capacity.py), and that docs/scaling.md quotes
what the committed unit costs give: the document and the model may not drift apart.
Nothing here is timed; the measurements are `make sale`'s."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from bench import capacity

DOC = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"


def test_the_poll_table_gives_a_line_its_polls() -> None:
    # 100 at 1 s, 900 at 2 s, 9,000 at 3 s, 90,000 at 5 s, the rest at 10 s.
    assert capacity.polls_for_line(100) == 100
    assert capacity.polls_for_line(1_000) == 100 + 450
    assert capacity.polls_for_line(2_000_000) == 100 + 450 + 3_000 + 18_000 + 190_000


def test_the_crowd_splits_its_polls_by_who_answers_them() -> None:
    rates = capacity.Crowd().rates()
    # Admitted people polling every 2 s go to Redis; every arrival's first poll is its
    # join's answer, from the process's copy of the line.
    head = 70 * (0.8 * 30 + 0.2 * 180) / 2
    assert rates["poll_redis"] == pytest.approx(head)
    assert rates["poll_wait"] + rates["poll_redis"] + rates["join"] == pytest.approx(300_000)
    assert rates["book"] == 56


def test_loads_are_rates_times_unit_costs() -> None:
    units = capacity.MEDIAN
    one = capacity.load({"join": 1_000}, units, web_processes=1)
    two = capacity.load({"join": 2_000}, units, web_processes=1)
    assert two.web_cores == pytest.approx(2 * one.web_cores)
    fixed = units.refresh_redis_us_per_proc_s + units.background_redis_us_per_s
    assert two.redis_cores * 1e6 - fixed == pytest.approx(2 * (one.redis_cores * 1e6 - fixed))


def test_more_web_processes_cost_the_event_node_their_refreshes() -> None:
    units = capacity.MEDIAN
    few = capacity.load({}, units, web_processes=10)
    many = capacity.load({}, units, web_processes=110)
    assert many.redis_cmds_per_s - few.redis_cmds_per_s == pytest.approx(100 * units.refresh_cmds_per_proc_s)


def test_the_event_node_seats_what_one_core_allows() -> None:
    cheap = replace(capacity.MEDIAN, join=replace(capacity.MEDIAN.join, redis_us=1.0))
    dear = capacity.plan(capacity.Crowd(), capacity.MEDIAN)
    assert capacity.plan(capacity.Crowd(), cheap).joins_per_s_event_node > dear.joins_per_s_event_node


def test_the_document_quotes_the_model() -> None:
    text = DOC.read_text()
    api = capacity.plan(capacity.Crowd(page_loads_per_arrival=0), capacity.MEDIAN)
    pages = capacity.plan(capacity.Crowd(), capacity.MEDIAN)
    assert re.search(rf"\| web processes \(one core each\) \| \d+ \| \*\*{api.web_processes}\*\* \|", text)
    assert re.search(rf"\| web processes \| [\d,]+ \| \*\*{pages.web_processes:,}\*\* \|", text)
    assert f"**{api.joins_per_s_event_node:,.0f}**" in text
