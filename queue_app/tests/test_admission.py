"""Admission: the per-second tick (lua/admit.lua) through the service and the API."""

import threading
import time

import pytest
from django.core.management import call_command

from queue_app import admission, events, services
from testsupport.line import line_token, next_redis_second
from ticketing import store


def admit(event_id: str) -> admission.Tick:
    """One tick in a fresh second: the script runs at most once per Redis second."""
    tick = admission.event_admit(event_id)
    if tick.outcome == "ALREADY_TICKED":
        next_redis_second()
        tick = admission.event_admit(event_id)
    assert tick.outcome != "ALREADY_TICKED"
    return tick


def statuses(api, tokens, event_id) -> list[str]:
    return [api.poll(t, event_id)[1]["data"]["status"] for t in tokens]


def test_admission_order_equals_arrival_order(api, make_event):
    event = make_event(admit_per_second=3)
    tokens = [api.token(event.event_id) for _ in range(10)]
    tick = admit(event.event_id)
    assert (tick.outcome, tick.admitted, tick.waiting, tick.active) == ("ADMITTED", 3, 7, 3)
    assert statuses(api, tokens, event.event_id) == ["ACTIVE"] * 3 + ["WAITING"] * 7
    assert [api.poll(t, event.event_id)[1]["data"]["rank"] for t in tokens[3:]] == list(range(1, 8))
    admit(event.event_id)
    assert statuses(api, tokens, event.event_id) == ["ACTIVE"] * 6 + ["WAITING"] * 4


def test_people_who_left_are_skipped_and_the_order_holds(api, make_event):
    event = make_event(admit_per_second=3)
    tokens = [api.token(event.event_id) for _ in range(8)]
    for gone in (tokens[0], tokens[2], tokens[3]):
        api.leave(gone, event.event_id)
    back = api.rejoin(tokens[2], event.event_id)[1]["data"]["token"]  # behind tokens[7]
    expected_order = [tokens[1], tokens[4], tokens[5], tokens[6], tokens[7], back]
    assert api.poll(back, event.event_id)[1]["data"]["rank"] == 6
    tick = admit(event.event_id)
    assert (tick.admitted, tick.waiting) == (3, 3)
    assert statuses(api, expected_order, event.event_id) == ["ACTIVE"] * 3 + ["WAITING"] * 3
    assert [api.poll(t, event.event_id)[1]["data"]["rank"] for t in expected_order[3:]] == [1, 2, 3]
    admit(event.event_id)
    assert statuses(api, expected_order, event.event_id) == ["ACTIVE"] * 6
    assert statuses(api, [tokens[0], tokens[3]], event.event_id) == ["NOT_FOUND"] * 2
    assert int(store.client().get(store.EventKeys(event.event_id).holes)) == 0  # every hole passed


def test_active_poll_shows_the_window_end(api, make_event, rc):
    event = make_event(active_window_seconds=120)
    token = api.token(event.event_id)
    before = store.now_ms(event.event_id)
    admit(event.event_id)
    data = api.poll(token, event.event_id)[1]["data"]
    after = store.now_ms(event.event_id)
    assert data["status"] == "ACTIVE"
    # The window ends 120 s after the tick, on Redis' clock, read before and after it.
    assert before + 120_000 <= data["activeExpiresAt"] <= after + 120_000
    assert (data["rank"], data["ahead"], data["behind"]) == (None, None, None)
    assert 1600 <= data["nextPollMs"] <= 2400
    rejoined = api.rejoin(token, event.event_id)[1]["data"]
    assert (rejoined["rejoined"], rejoined["status"]) == (True, "ACTIVE")


def test_the_window_passes_and_the_token_polls_expired(api, make_event):
    event = make_event(active_window_seconds=1)
    token = api.token(event.event_id)
    admit(event.event_id)
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "ACTIVE"
    time.sleep(1.1)
    data = api.poll(token, event.event_id)[1]["data"]
    assert (data["status"], data["nextPollMs"], data["activeExpiresAt"]) == ("EXPIRED", 0, None)
    admit(event.event_id)  # the tick removes it from the active set...
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "EXPIRED"  # ...not forgotten
    rejoined = api.rejoin(token, event.event_id)[1]["data"]
    assert (rejoined["rejoined"], rejoined["status"]) == (False, "WAITING")
    assert api.poll(rejoined["token"], event.event_id)[1]["data"]["rank"] == 1
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "EXPIRED"  # still what it was


@pytest.mark.parametrize("status", ["PAUSED", "CLOSED"])
def test_paused_and_closed_events_admit_nobody(api, make_event, status):
    event = make_event()
    tokens = [api.token(event.event_id) for _ in range(3)]
    event.status = status
    events.event_publish(event)
    tick = admit(event.event_id)
    assert (tick.outcome, tick.admitted) == ("NOT_OPEN", 0)
    event.status = "OPEN"
    events.event_publish(event)
    assert statuses(api, tokens, event.event_id) == ["WAITING"] * 3
    assert admit(event.event_id).admitted == 3


def test_sold_out_admits_nobody_until_seats_come_back(api, make_event, rc):
    event = make_event(total_seats=2, admit_per_second=5)
    tokens = [api.token(event.event_id) for _ in range(3)]
    rc.set(store.EventKeys(event.event_id).seats, 0)
    tick = admit(event.event_id)
    assert (tick.outcome, tick.admitted) == ("SOLD_OUT", 0)
    data = api.poll(tokens[0], event.event_id)[1]["data"]
    assert (data["status"], data["soldOut"], data["remainingSeats"], data["etaSeconds"]) == (
        "WAITING",
        True,
        0,
        None,
    )
    rc.set(store.EventKeys(event.event_id).seats, 1)  # a cancellation
    assert admit(event.event_id).admitted == 3
    assert api.poll(tokens[0], event.event_id)[1]["data"]["soldOut"] is False


def test_never_more_active_than_the_cap(api, make_event):
    event = make_event(admit_per_second=3, max_active_users=5, active_window_seconds=2)
    tokens = [api.token(event.event_id) for _ in range(9)]
    assert admit(event.event_id).admitted == 3
    tick = admit(event.event_id)
    assert (tick.admitted, tick.active) == (2, 5)
    tick = admit(event.event_id)
    assert (tick.outcome, tick.admitted, tick.active) == ("FULL", 0, 5)
    time.sleep(2.1)  # the first windows end, making room
    tick = admit(event.event_id)
    assert tick.admitted == 3
    assert statuses(api, tokens, event.event_id)[5:8] == ["ACTIVE"] * 3


def test_batch_zero_admits_nobody(api, make_event):
    event = make_event(admit_per_second=0)
    token = api.token(event.event_id)
    assert admit(event.event_id).admitted == 0
    assert statuses(api, [token], event.event_id) == ["WAITING"]


def test_two_tickers_in_the_same_second_admit_once(api, make_event):
    event = make_event(admit_per_second=4)
    for _ in range(40):
        api.token(event.event_id)
    # Start right after a second turns, so all threads land in the same second.
    next_redis_second(margin=0.01)
    barrier = threading.Barrier(8)
    ticks: list[admission.Tick] = []

    def tick() -> None:
        barrier.wait()
        ticks.append(admission.event_admit(event.event_id))

    threads = [threading.Thread(target=tick) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(t.outcome for t in ticks) == ["ADMITTED"] + ["ALREADY_TICKED"] * 7
    assert sum(t.admitted for t in ticks) == 4


def test_settings_changes_take_effect_on_the_next_tick(api, make_event):
    event = make_event(admit_per_second=2)
    for _ in range(20):
        api.token(event.event_id)
    assert admit(event.event_id).admitted == 2
    call_command("init_event", event.event_id, "--batch", "5", "--max-active", "9")
    assert admit(event.event_id).admitted == 5
    assert admit(event.event_id).admitted == 2  # capped at 9 active


def test_eta_follows_the_observed_rate(api, make_event):
    event = make_event(admit_per_second=10)
    tokens = [api.token(event.event_id) for _ in range(100)]
    assert api.poll(tokens[-1], event.event_id)[1]["data"]["etaSeconds"] is None  # no rate yet
    admit(event.event_id)
    data = api.poll(tokens[-1], event.event_id)[1]["data"]
    assert data["ahead"] == 89
    assert data["etaSeconds"] == 9  # 89 ahead / 10 per second


def test_admit_command_prints_how_many(api, make_event, capsys):
    event = make_event(admit_per_second=2)
    for _ in range(3):
        api.token(event.event_id)
    next_redis_second()
    call_command("admit", event.event_id)
    assert capsys.readouterr().out.startswith("Admitted 2; 1 waiting, 2 active.")
    call_command("admit", event.event_id)  # the same second: the line as the tick left it
    assert capsys.readouterr().out == (
        "Admitted 0 (this second's tick already ran; try again in a second); 1 waiting, 2 active.\n"
    )


def test_the_tick_covers_every_event(api, make_event):
    sales = [make_event(admit_per_second=1) for _ in range(3)]
    for event in sales:
        api.token(event.event_id)
    next_redis_second()
    ticks = {t.event_id: t for t in admission.events_admit()}
    assert all(ticks[e.event_id].admitted == 1 for e in sales)


# Two million joins take minutes on a busy two-core machine: the timeout is there to
# stop a hang, and the test proves exactness and memory, not speed (docs/benchmarks.md).
# Slow: `make test-slow` runs it, not every `make test`.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_million_waiting_still_admit_exactly_the_batch(make_event, rc):
    event = make_event(admit_per_second=70)
    services.queue_join_many(event_id=event.event_id, count=2_000_000)
    k = store.EventKeys(event.event_id)
    for expected_waiting in (2_000_000 - 70, 2_000_000 - 140):
        tick = admit(event.event_id)
        assert (tick.admitted, tick.waiting) == (70, expected_waiting)
    assert int(rc.get(k.active)) == 140
    # The line is counters; per waiting person Redis holds only the 2-byte nonce
    # that tells a number's holder from a holder of the same number after a rollback.
    held = {name: rc.memory_usage(name, samples=0) for name in store.scan(k.pattern())}
    # (A growing string keeps up to 1 MiB spare, and the allocator rounds up.)
    nonces = held.pop(k.nonces.encode())
    assert nonces < 2.75 * 2_000_000
    assert sum(held.values()) < 4_000


def test_fifty_thousand_leavers_ahead_do_not_stall_the_next_tick(make_event):
    """Runs of holes are passed by BITPOS (lua/admit.lua), whatever their length."""
    event = make_event(admit_per_second=70)
    services.queue_join_many(event_id=event.event_id, count=50_100)
    store.load("leave")
    pipe = store.event_pipeline(event.event_id)
    for n in range(1, 50_001):
        store.run(services._leave_call(event.event_id, line_token(event.event_id, n)), on=pipe)
    assert sum(pipe.execute()) == 50_000
    first_behind = line_token(event.event_id, 50_001)
    assert services.queue_poll(event_id=event.event_id, token=first_behind).rank == 1

    tick = admit(event.event_id)
    assert (tick.outcome, tick.admitted, tick.waiting) == ("ADMITTED", 70, 30)
    assert services.queue_poll(event_id=event.event_id, token=first_behind).status == "ACTIVE"
    k = store.event_keys(event.event_id)
    assert int(store.client().get(k.holes)) == 0 and int(store.client().get(k.popped)) == 50_070


def _script_loads() -> int:
    """SCRIPT LOAD calls the server has counted (summed over every primary of a cluster)."""
    info = store.client().info("commandstats")
    nodes = info.values() if store.clustered() else [info]
    return sum(node.get("cmdstat_script|load", {}).get("calls", 0) for node in nodes)


def test_the_tick_loads_its_script_only_when_redis_has_lost_it(api, make_event):
    """After a restart or a SCRIPT FLUSH every event of the tick is admitted all the
    same (its script refused NOSCRIPT, loaded, and run again); otherwise a tick sends
    no SCRIPT LOAD."""
    sales = [make_event(admit_per_second=1) for _ in range(2)]
    for event in sales:
        api.token(event.event_id)
        api.token(event.event_id)
    store.client().script_flush()
    next_redis_second()
    ticks = {t.event_id: t for t in admission.events_admit()}
    assert [(ticks[e.event_id].outcome, ticks[e.event_id].admitted) for e in sales] == [("ADMITTED", 1)] * 2
    loads = _script_loads()
    next_redis_second()
    ticks = {t.event_id: t for t in admission.events_admit()}
    assert [ticks[e.event_id].admitted for e in sales] == [1, 1]
    assert _script_loads() == loads
