import pytest
from django.core.management import CommandError, call_command

from queue_app.models import Event
from ticketing import store


@pytest.fixture
def event_id(db):
    from queue_app import events

    event_id = "cmd-test-event"
    yield event_id
    events.event_wipe(event_id)
    store.client().srem(store.EVENTS_KEY, event_id)


def _meta(rc, event_id):
    return {k.decode(): v.decode() for k, v in rc.hgetall(store.EventKeys(event_id).meta).items()}


def test_init_event_creates_the_event_and_its_redis_state(event_id, rc, capsys):
    call_command(
        "init_event",
        event_id,
        "--seats",
        "30",
        "--batch",
        "5",
        "--ttl",
        "60",
        "--max-active",
        "12",
        "--name",
        "Chuseok KTX",
    )
    event = Event.objects.get(event_id=event_id)
    assert (
        event.total_seats,
        event.admit_per_second,
        event.active_window_seconds,
        event.max_active_users,
        event.name,
        event.status,
    ) == (30, 5, 60, 12, "Chuseok KTX", "OPEN")
    meta = _meta(rc, event_id)
    assert meta["status"] == "OPEN"
    assert (meta["totalSeats"], meta["admitPerSecond"], meta["windowSeconds"], meta["maxActive"]) == (
        "30",
        "5",
        "60",
        "12",
    )
    assert int(meta["openedAt"]) > 0
    assert rc.get(store.EventKeys(event_id).seats) == b"30"
    assert rc.sismember(store.EVENTS_KEY, event_id)
    assert "Created event" in capsys.readouterr().out


def test_init_event_never_overwrites_seats_left(event_id, rc):
    call_command("init_event", event_id, "--seats", "100")
    rc.decrby(store.EventKeys(event_id).seats, 7)  # seven seats sold
    call_command("init_event", event_id, "--seats", "100", "--batch", "9")
    assert rc.get(store.EventKeys(event_id).seats) == b"93"
    assert _meta(rc, event_id)["admitPerSecond"] == "9"
    # A new total moves seats left by the difference: the sold ones stay sold.
    call_command("init_event", event_id, "--seats", "110")
    assert rc.get(store.EventKeys(event_id).seats) == b"103"


def test_init_event_refuses_a_total_below_what_is_sold(event_id, rc):
    call_command("init_event", event_id, "--seats", "10")
    rc.decrby(store.EventKeys(event_id).seats, 8)
    with pytest.raises(CommandError, match="fewer than already sold"):
        call_command("init_event", event_id, "--seats", "5")
    assert rc.get(store.EventKeys(event_id).seats) == b"2"


def test_init_event_reset_starts_the_event_over(event_id, rc, api):
    call_command("init_event", event_id, "--seats", "50")
    api.token(event_id)
    rc.decrby(store.EventKeys(event_id).seats, 5)
    call_command("init_event", event_id, "--reset")
    assert rc.get(store.EventKeys(event_id).seats) == b"50"
    assert api.poll(api.token(event_id), event_id)[1]["data"]["totalWaiting"] == 1


def test_init_event_batch_zero_is_valid(event_id, rc):
    call_command("init_event", event_id, "--batch", "0")
    assert Event.objects.get(event_id=event_id).admit_per_second == 0
    assert _meta(rc, event_id)["admitPerSecond"] == "0"


def test_init_event_uses_the_configured_defaults(event_id, settings):
    settings.TOTAL_SEATS = 77
    settings.ENTRY_BATCH_SIZE = 33
    call_command("init_event", event_id)
    event = Event.objects.get(event_id=event_id)
    assert (event.total_seats, event.admit_per_second) == (77, 33)


def test_init_event_names_the_default_event(event_id, settings):
    """`make run` creates the default event with `init_event EVENT_ID --if-missing`:
    the event list then shows its name, not its id. Other events are named by --name."""
    settings.EVENT_ID, settings.EVENT_NAME = event_id, "KTX Chuseok 2026"
    call_command("init_event", event_id, "--if-missing")
    assert str(Event.objects.get(event_id=event_id)) == "KTX Chuseok 2026"
    settings.EVENT_ID = "another-default"
    call_command("init_event", event_id, "--name", "Spring concert")
    assert str(Event.objects.get(event_id=event_id)) == "Spring concert"


def test_an_event_without_a_name_reads_as_words(db):
    assert str(Event(event_id="spring-gala_2026")) == "Spring gala 2026"
    assert str(Event(event_id="v1.2-encore", name="Encore")) == "Encore"


def test_init_event_if_missing_leaves_an_existing_event(event_id):
    call_command("init_event", event_id, "--seats", "10")
    call_command("init_event", event_id, "--seats", "20", "--if-missing")
    assert Event.objects.get(event_id=event_id).total_seats == 10


@pytest.mark.parametrize(
    "args",
    [
        ["--seats", "-1"],
        ["--ttl", "0"],
        ["--batch", "-5"],
        ["--max-per-booking", "0"],
        ["--proof-of-work", "-1"],
        ["--max-places-per-address", "-2"],
    ],
)
def test_init_event_refuses_bad_values(event_id, args):
    with pytest.raises(CommandError):
        call_command("init_event", event_id, *args)
    assert not Event.objects.filter(event_id=event_id).exists()


@pytest.mark.parametrize("bad", ["{bad}:id", "trailing-newline\n", "\nleading", "x" * 65])
def test_init_event_refuses_a_bad_id(db, bad):
    with pytest.raises(CommandError, match="event_id"):
        call_command("init_event", bad)
    assert not Event.objects.filter(event_id=bad).exists()


def test_event_status_pause_and_close(event_id, rc, api):
    call_command("init_event", event_id)
    call_command("event_status", event_id, "PAUSED")
    assert _meta(rc, event_id)["status"] == "PAUSED"
    token = api.token(event_id)  # PAUSED still accepts joins
    call_command("event_status", event_id, "CLOSED")
    assert Event.objects.get(event_id=event_id).status == "CLOSED"
    assert api.join(event_id)[1]["error"]["code"] == "EVENT_CLOSED"
    assert api.poll(token, event_id)[1]["data"]["status"] == "EXPIRED"
    call_command("event_status", event_id, "OPEN")
    assert api.poll(token, event_id)[1]["data"]["status"] == "WAITING"


def test_event_status_unknown_event(db):
    with pytest.raises(CommandError, match="No event"):
        call_command("event_status", "nope", "OPEN")


def test_init_event_sets_the_protections(event_id, rc, capsys):
    call_command(
        "init_event",
        event_id,
        "--proof-of-work",
        "20000",
        "--require-account",
        "--max-places-per-address",
        "3",
        "--max-seats-per-buyer",
        "6",
    )
    event = Event.objects.get(event_id=event_id)
    assert (event.proof_of_work, event.require_account, event.max_places_per_address) == (20_000, True, 3)
    assert event.max_seats_per_buyer == 6
    meta = _meta(rc, event_id)
    assert (meta["proofOfWork"], meta["requireAccount"], meta["maxPerAddress"]) == ("20000", "1", "3")
    assert (
        "protections: proof of work 20,000, accounts, 3 places/address, 6 seats/buyer"
        in capsys.readouterr().out
    )
    call_command("init_event", event_id, "--no-require-account", "--proof-of-work", "0")
    assert _meta(rc, event_id)["requireAccount"] == "0" and _meta(rc, event_id)["proofOfWork"] == "0"


def test_init_event_hot_sale_keeps_what_the_operator_chose(event_id, rc):
    from queue_app.models import HOT_SALE_PLACES_PER_ADDRESS, SUGGESTED_PROOF_OF_WORK

    call_command(
        "init_event", event_id, "--hot-sale", "--max-per-booking", "3", "--max-places-per-address", "5"
    )
    event = Event.objects.get(event_id=event_id)
    assert (event.proof_of_work, event.max_places_per_address, event.max_seats_per_buyer) == (
        SUGGESTED_PROOF_OF_WORK,
        5,
        3,
    )
    assert HOT_SALE_PLACES_PER_ADDRESS == 2 and not event.require_account
