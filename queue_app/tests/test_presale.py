"""Presales (docs/presale.md): before an event's public start only holders join: a
code with a use left, spent with the place in one Redis step, or a signed-in account
on the event's allow-list (by account, or by its confirmed email's domain). A refused
join changes nothing; a place kept needs no code; after the presale anyone joins.
Codes are made by `manage.py presale_codes` or the admin, shown once, kept hashed."""

import asyncio
import csv
import io
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from accounts_app.models import ConfirmedEmail
from booking_app.buyers import email_key
from queue_app import admission, events, presale, services
from queue_app.models import Event, PresaleAllow, PresaleCode
from queue_app.tokens import parse_token
from testsupport.clients import Api
from testsupport.line import end_windows, event_state, refusals
from ticketing import store


@pytest.fixture
def presale_event(make_event):
    """An event whose public start is an hour away: in its presale."""

    def make(**fields) -> Event:
        return make_event(public_from=timezone.now() + timedelta(hours=1), **fields)

    return make


def join(api, event_id: str, code: str | None = None, **extra) -> tuple[int, dict]:
    body = {"eventId": event_id} | ({"presaleCode": code} if code is not None else {})
    return api.call("post", "/api/queue/join", body, **extra)


def uses_left(event: Event, code: str) -> int | None:
    left = store.client().hget(store.event_keys(event.event_id).codes, presale.code_key(event.event_id, code))
    return None if left is None else int(left)


def refused(event: Event, total: int = 0) -> dict:
    return refusals(event.event_id, total)


# --- Codes at join -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the server reads what this test commits
def test_a_code_of_3_uses_tried_by_20_concurrent_clients_gives_exactly_3_places(
    production_server, presale_event
):
    """20 clients, released together, each POST the same code to the production
    server: exactly 3 get a place, the other 17 are told the code is used up, and
    Redis agrees (3 numbers issued, 0 uses left, 3 waiting in order)."""
    event = presale_event()
    (code,) = presale.codes_create(event, count=1, uses=3)
    barrier, answers, errors = threading.Barrier(20), [], []

    def attempt() -> None:
        try:
            barrier.wait()
            answer = requests.post(
                f"{production_server}/api/queue/join",
                json={"eventId": event.event_id, "presaleCode": presale.shown(code)},
                timeout=30,
            )
            answers.append((answer.status_code, answer.json()))
        except Exception as exc:  # noqa: BLE001 (any failure in a thread fails the test below)
            errors.append(repr(exc))

    threads = [threading.Thread(target=attempt) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    joined = [body["data"]["token"] for status, body in answers if status == 200]
    used_up = [body["error"]["code"] for status, body in answers if status == 409]
    assert (len(joined), used_up) == (3, ["PRESALE_CODE_USED_UP"] * 17), answers
    k = store.event_keys(event.event_id)
    assert int(store.client().get(k.seq)) == 3
    assert uses_left(event, code) == 0
    assert events.event_live_numbers(event.event_id)["waiting"] == 3
    ranks = sorted(services.queue_poll(event_id=event.event_id, token=parse_token(t)).rank for t in joined)
    assert ranks == [1, 2, 3]
    assert refused(event, 17) == {"presale_code": 17}


def test_without_a_code_a_presale_join_is_refused_and_changes_nothing(api, presale_event):
    event = presale_event()
    presale.codes_create(event, count=2, uses=1)
    before = event_state(event.event_id)
    status, body = join(api, event.event_id)
    assert (status, body["error"]["code"]) == (403, "PRESALE_CODE_REQUIRED")
    assert "presale" in body["error"]["message"]
    assert event_state(event.event_id) == before
    assert store.client().get(store.event_keys(event.event_id).seq) is None  # no number issued
    assert refused(event, 1) == {"presale": 1}


def test_an_unknown_code_is_refused_and_changes_nothing(api, presale_event):
    """Well formed, but not a code of this event (one of another event, for one)."""
    event, other = presale_event(), presale_event()
    (theirs,) = presale.codes_create(other, count=1, uses=5)
    presale.codes_create(event, count=1, uses=5)
    before = event_state(event.event_id)
    for code in (theirs, presale.new_code()):
        status, body = join(api, event.event_id, code)
        assert (status, body["error"]["code"]) == (403, "PRESALE_CODE_INVALID")
    assert event_state(event.event_id) == before
    assert uses_left(other, theirs) == 5
    assert refused(event, 2) == {"presale_code": 2}


def test_a_code_gives_its_uses_then_is_refused_and_changes_nothing(api, presale_event):
    event = presale_event()
    (code,) = presale.codes_create(event, count=1, uses=2)
    assert [join(api, event.event_id, code)[0] for _ in range(2)] == [200, 200]
    before = event_state(event.event_id)
    status, body = join(api, event.event_id, code)
    assert (status, body["error"]["code"]) == (409, "PRESALE_CODE_USED_UP")
    assert event_state(event.event_id) == before
    assert uses_left(event, code) == 0


def test_a_code_is_read_as_printed_in_any_case(api, presale_event):
    event = presale_event()
    (code,) = presale.codes_create(event, count=1, uses=3)
    for typed in (presale.shown(code), presale.shown(code).lower(), f" {code[:5]} {code[5:]} "):
        status, body = join(api, event.event_id, typed)
        assert status == 200, (typed, body)
    assert uses_left(event, code) == 0


@pytest.mark.parametrize(
    "value",
    ["ABC", "ABCDE-FGHI1", "ABCDE-FGH0O", "A" * 11, "A" * 40, 42, ["ABCDEFGH23"], {"code": "x"}, True],
    ids=["short", "I-and-1", "0-and-O", "long", "huge", "number", "list", "object", "bool"],
)
def test_a_malformed_code_is_a_validation_error_and_changes_nothing(api, presale_event, value):
    event = presale_event()
    before = event_state(event.event_id)
    status, body = join(api, event.event_id, value)
    assert (status, body["error"]["code"]) == (400, "VALIDATION_ERROR")
    assert "presaleCode" in body["error"]["message"]
    assert event_state(event.event_id) == before


def test_an_empty_code_is_no_code(api, presale_event):
    event = presale_event()
    assert join(api, event.event_id, "")[1]["error"]["code"] == "PRESALE_CODE_REQUIRED"


def test_a_rejoin_that_keeps_its_place_needs_no_code_but_one_to_the_back_does(api, presale_event):
    event = presale_event(admit_per_second=10)
    (code,) = presale.codes_create(event, count=1, uses=2)
    token = join(api, event.event_id, code)[1]["data"]["token"]
    status, body = api.rejoin(token, event.event_id)
    assert (status, body["data"]["rejoined"]) == (200, True)
    assert uses_left(event, code) == 1
    # Admitted, and the window passed: a rejoin goes to the back, a new place.
    admission.event_admit(event.event_id)
    end_windows(event.event_id)
    status, body = api.rejoin(token, event.event_id)
    assert (status, body["error"]["code"]) == (403, "PRESALE_CODE_REQUIRED")
    status, body = api.call(
        "post", "/api/queue/rejoin", {"token": token, "eventId": event.event_id, "presaleCode": code}
    )
    assert (status, body["data"]["rejoined"]) == (200, False)
    assert uses_left(event, code) == 0


def test_after_the_presale_anyone_joins_and_a_code_is_ignored(api, presale_event):
    event = presale_event()
    (code,) = presale.codes_create(event, count=1, uses=1)
    assert join(api, event.event_id, code)[0] == 200
    event.public_from = timezone.now() - timedelta(seconds=1)
    event.save()
    events.event_publish(event)
    for sent in (None, code, presale.new_code()):
        status, body = join(api, event.event_id, sent)
        assert status == 200, (sent, body)
    assert uses_left(event, code) == 0  # nothing spent after the presale


def test_the_presale_ends_on_redis_clock_at_the_public_start(api, make_event):
    event = make_event(public_from=timezone.now() + timedelta(seconds=1.5))
    assert join(api, event.event_id)[1]["error"]["code"] == "PRESALE_CODE_REQUIRED"
    until = int(store.client().hget(store.event_keys(event.event_id).meta, "presaleUntil"))
    while store.now_ms(event.event_id) < until:
        time.sleep(0.05)
    assert join(api, event.event_id)[0] == 200


def test_an_event_without_a_presale_publishes_none(make_event, rc):
    event = make_event()
    assert rc.hget(store.event_keys(event.event_id).meta, "presaleUntil") == b""


def test_a_publish_never_gives_a_used_code_back_its_uses_and_drops_revoked_ones(api, presale_event):
    event = presale_event()
    kept, revoked = presale.codes_create(event, count=2, uses=2)
    assert join(api, event.event_id, kept)[0] == 200
    events.event_publish(event)
    assert uses_left(event, kept) == 1
    presale.codes_revoke(
        event, PresaleCode.objects.filter(code_hash=presale.code_hash(event.event_id, revoked))
    )
    assert uses_left(event, revoked) is None
    assert join(api, event.event_id, revoked)[1]["error"]["code"] == "PRESALE_CODE_INVALID"
    # A line rebuilt from nothing gets its codes back, with all their uses (docs/presale.md).
    events.event_wipe(event.event_id)
    events.event_publish(event)
    assert (uses_left(event, kept), uses_left(event, revoked)) == (2, None)


def test_concurrent_joins_through_the_service_spend_each_use_once(presale_event):
    """On one process's client pool: 2 codes of 3 uses, 10 threads each."""
    event = presale_event()
    codes = presale.codes_create(event, count=2, uses=3)
    outcomes, errors, barrier = [], [], threading.Barrier(20)

    def attempt(code: str) -> None:
        try:
            barrier.wait()
            outcomes.append((code, services.queue_join(event_id=event.event_id, presale_code=code).token))
        except services.DomainError as refusal:
            outcomes.append((code, refusal.code))
        except Exception as exc:  # noqa: BLE001 (fails the test below)
            errors.append(repr(exc))

    threads = [threading.Thread(target=attempt, args=(codes[i % 2],)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for code in codes:
        got = [outcome for sent, outcome in outcomes if sent == code]
        assert got.count("PRESALE_CODE_USED_UP") == 7
        assert len({outcome for outcome in got if outcome != "PRESALE_CODE_USED_UP"}) == 3  # 3 tokens
        assert uses_left(event, code) == 0
    assert int(store.client().get(store.event_keys(event.event_id).seq)) == 6


# --- The allow-list ---------------------------------------------------------------


def _account(email: str | None = None, *, confirmed: bool = True) -> User:
    user = get_user_model().objects.create_user(
        f"p{uuid.uuid4().hex[:12]}", email=email or "", password="pw-for-tests-1"
    )
    if email and confirmed:
        ConfirmedEmail.objects.create(user=user, email=email, mailbox=email_key(email))
    return user


def _as(user: User) -> services.Client:
    return services.Client(account=str(user.pk))


def test_a_listed_account_joins_without_a_code_and_spends_none(presale_event):
    event = presale_event()
    listed, other = _account(), _account()
    PresaleAllow.objects.create(event=event, account=listed)
    (code,) = presale.codes_create(event, count=1, uses=1)
    assert services.queue_join(event_id=event.event_id, client=_as(listed)).joined_at
    assert services.queue_join(event_id=event.event_id, client=_as(listed), presale_code=code).joined_at
    assert uses_left(event, code) == 1  # a listed account's code is not spent
    with pytest.raises(services.DomainError) as refusal:
        services.queue_join(event_id=event.event_id, client=_as(other))
    assert refusal.value.code == "PRESALE_CODE_REQUIRED"
    # An account not listed joins with a code, as anyone.
    assert services.queue_join(event_id=event.event_id, client=_as(other), presale_code=code).joined_at
    assert uses_left(event, code) == 0


def test_an_email_domain_lets_in_confirmed_addresses_at_it_and_its_subdomains(presale_event):
    event = presale_event()
    PresaleAllow.objects.create(event=event, email_domain="@Example.ORG ")
    assert PresaleAllow.objects.get(event=event).email_domain == "example.org"
    for email, confirmed, let_in in (
        ("kim@example.org", True, True),
        ("lee@Dept.Example.org", True, True),
        ("park@example.org", False, False),  # typed at sign-up, never confirmed
        ("choi@notexample.org", True, False),
        ("jung@example.org.evil.test", True, False),
    ):
        client = _as(_account(email, confirmed=confirmed))
        try:
            services.queue_join(event_id=event.event_id, client=client)
            outcome = True
        except services.DomainError as refusal:
            assert refusal.code == "PRESALE_CODE_REQUIRED"
            outcome = False
        assert outcome == let_in, email


@pytest.mark.django_db(transaction=True)  # the fast lane's threads read the session
def test_a_signed_in_listed_account_joins_over_http_on_either_lane(lane, presale_event):
    """The fast lane hands a request with a session to Django's lane, which knows
    the account."""
    event = presale_event()
    user = _account()
    PresaleAllow.objects.create(event=event, account=user)
    client = lane.django if hasattr(lane, "django") else lane
    client.force_login(user)
    client.cookies["csrftoken"] = csrf = "c" * 32
    status, body = join(Api(lane), event.event_id, HTTP_X_CSRFTOKEN=csrf)
    assert status == 200, body


@pytest.mark.django_db(transaction=True)  # the allow-list is read on another thread
def test_the_async_join_asks_the_allow_list_as_the_other_does(presale_event):
    """The fast lane's service: a signed-in account never reaches it over HTTP (the
    lane hands a session to Django's), but called with one it answers the same."""
    from testsupport.clients import LaneClient

    event = presale_event()
    listed, other = _account(), _account()
    PresaleAllow.objects.create(event=event, account=listed)

    def ajoin(user: User) -> services.Joined:
        joining = services.aqueue_join(event_id=event.event_id, client=_as(user))
        return asyncio.run_coroutine_threadsafe(joining, LaneClient.loop()).result(10)

    assert ajoin(listed).joined_at
    with pytest.raises(services.DomainError) as refusal:
        ajoin(other)
    assert refusal.value.code == "PRESALE_CODE_REQUIRED"


def test_an_entry_added_applies_once_the_process_copy_is_refreshed(presale_event, monkeypatch):
    event = presale_event()
    user = _account()
    with pytest.raises(services.DomainError):
        services.queue_join(event_id=event.event_id, client=_as(user))
    PresaleAllow.objects.create(event=event, account=user)
    monkeypatch.setattr(presale, "ALLOW_LIST_CACHE_SEC", 0.0)
    presale.forget()
    assert services.queue_join(event_id=event.event_id, client=_as(user)).joined_at


def test_an_allow_list_entry_names_an_account_or_a_domain(presale_event):
    from django.core.exceptions import ValidationError

    event = presale_event()
    for entry in (
        PresaleAllow(event=event),
        PresaleAllow(event=event, account=_account(), email_domain="a.kr"),
    ):
        with pytest.raises(ValidationError):
            entry.full_clean()
    with pytest.raises(ValidationError):
        PresaleAllow(event=event, email_domain="not a domain").full_clean()


def test_joins_outside_a_presale_read_no_postgres(make_event, presale_event, django_assert_num_queries):
    """The allow-list is read only for a signed-in account in a presale: the plain
    join, and a code's, stay on Redis alone."""
    plain, sale = make_event(), presale_event()
    (code,) = presale.codes_create(sale, count=1, uses=1)
    with django_assert_num_queries(0):
        services.queue_join(event_id=plain.event_id, client=services.Client(account="5"))
        services.queue_join(event_id=sale.event_id, presale_code=code)
        with pytest.raises(services.DomainError):
            services.queue_join(event_id=sale.event_id)


# --- Making codes: the command --------------------------------------------------------


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_command_makes_codes_prints_them_once_and_keeps_only_hashes(presale_event):
    event = presale_event()
    out = io.StringIO()
    call_command(
        "presale_codes", event.event_id, "--count", "5", "--uses", "2", "--note", "fan club", stdout=out
    )
    rows = _csv(out.getvalue())
    assert [(r["event"], r["uses"], r["note"]) for r in rows] == [(event.event_id, "2", "fan club")] * 5
    codes = [r["code"] for r in rows]
    assert len(set(codes)) == 5 and all(len(c) == 11 and c[5] == "-" for c in codes)
    stored = list(PresaleCode.objects.filter(event=event).values())
    assert {row["code_hash"] for row in stored} == {
        presale.code_hash(event.event_id, presale.parse_code(c)) for c in codes
    }
    kept = repr(stored)
    assert not any(c in kept or c.replace("-", "") in kept for c in codes)  # no plain code in the DB
    assert all(uses_left(event, presale.parse_code(c)) == 2 for c in codes)
    assert join(Api(Client()), event.event_id, codes[0])[0] == 200
    # Run again: new codes, never the old ones shown again.
    again = io.StringIO()
    call_command("presale_codes", event.event_id, "--count", "3", stdout=again)
    assert not {r["code"] for r in _csv(again.getvalue())} & set(codes)
    assert PresaleCode.objects.filter(event=event).count() == 8


def test_the_command_writes_a_new_file_for_its_owner_only(presale_event, tmp_path: Path):
    event = presale_event()
    target = tmp_path / "codes.csv"
    call_command(
        "presale_codes", event.event_id, "--count", "2", "--output", str(target), stderr=io.StringIO()
    )
    assert len(_csv(target.read_text())) == 2
    assert target.stat().st_mode & 0o777 == 0o600
    with pytest.raises(CommandError, match="exists"):
        call_command("presale_codes", event.event_id, "--count", "2", "--output", str(target))
    assert PresaleCode.objects.filter(event=event).count() == 2  # nothing made for the refused run


@pytest.mark.parametrize(
    "args",
    [
        ["--count", "0"],
        ["--count", "100001"],
        ["--count", "2", "--uses", "0"],
        ["--count", "1", "--note", "x" * 201],
    ],
)
def test_the_command_refuses_bad_numbers_and_makes_nothing(presale_event, args):
    event = presale_event()
    with pytest.raises(CommandError):
        call_command("presale_codes", event.event_id, *args)
    assert not PresaleCode.objects.filter(event=event).exists()


def test_the_command_refuses_an_unknown_event(db):
    with pytest.raises(CommandError, match="No event"):
        call_command("presale_codes", "no-such-event", "--count", "1")


def test_init_event_sets_and_clears_the_public_start(db, rc):
    event_id = f"t-{uuid.uuid4().hex[:12]}"
    try:
        call_command("init_event", event_id, "--public-from", "+3600", stdout=io.StringIO())
        event = Event.objects.get(event_id=event_id)
        assert event.public_from > timezone.now() + timedelta(minutes=59)
        meta = rc.hget(store.event_keys(event_id).meta, "presaleUntil")
        assert int(meta) == int(event.public_from.timestamp() * 1000)
        call_command("init_event", event_id, "--public-from", "none", stdout=io.StringIO())
        assert Event.objects.get(event_id=event_id).public_from is None
        assert rc.hget(store.event_keys(event_id).meta, "presaleUntil") == b""
    finally:
        events.event_wipe(event_id)
        rc.srem(store.EVENTS_KEY, event_id)


# --- Making codes: the admin ------------------------------------------------------------


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("op-presale", "op@example.com", "pw-for-tests"))
    return client


def test_the_admin_makes_a_batch_and_hands_it_over_once(operator, presale_event):
    event = presale_event()
    url = f"/admin/queue_app/event/{event.pk}/presale/"
    page = operator.get(url)
    assert page.status_code == 200 and "Make presale codes" in page.content.decode()
    answer = operator.post(url, {"count": "4", "uses": "3", "note": "press"})
    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/csv; charset=utf-8"
    assert answer["Content-Disposition"].startswith(f'attachment; filename="presale-codes-{event.event_id}-')
    assert "no-store" in answer["Cache-Control"]  # the only copy: no cache keeps one
    codes = [row["code"] for row in _csv(answer.content.decode())]
    assert len(codes) == 4
    assert all(uses_left(event, presale.parse_code(code)) == 3 for code in codes)
    shown = (
        operator.get(url).content.decode()
        + operator.get(f"/admin/queue_app/presalecode/?event__id__exact={event.pk}").content.decode()
    )
    assert "4 codes made, giving 12 places; 12 places not taken yet." in shown
    assert not any(code in shown or code.replace("-", "") in shown for code in codes)  # shown once only
    assert "Presale codes" in operator.get(f"/admin/queue_app/event/{event.pk}/change/").content.decode()


def test_the_admin_refuses_a_bad_batch_and_makes_nothing(operator, presale_event):
    event = presale_event()
    answer = operator.post(f"/admin/queue_app/event/{event.pk}/presale/", {"count": "0", "uses": "1"})
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/html")
    assert not PresaleCode.objects.filter(event=event).exists()


def test_deleting_a_code_in_the_admin_revokes_it(operator, api, presale_event):
    event = presale_event()
    (code,) = presale.codes_create(event, count=1, uses=2)
    row = PresaleCode.objects.get(event=event)
    answer = operator.post(
        "/admin/queue_app/presalecode/",
        {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"},
    )
    assert answer.status_code == 302
    assert not PresaleCode.objects.filter(event=event).exists()
    assert uses_left(event, code) is None
    assert join(api, event.event_id, code)[1]["error"]["code"] == "PRESALE_CODE_INVALID"


def test_a_viewer_may_not_make_codes(presale_event, db):
    from django.contrib.auth.models import Permission

    event = presale_event()
    viewer = User.objects.create_user("viewer-presale", password="pw-for-tests", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_event"))
    client = Client()
    client.force_login(viewer)
    url = f"/admin/queue_app/event/{event.pk}/presale/"
    assert client.get(url).status_code == 200
    assert client.post(url, {"count": "1", "uses": "1"}).status_code == 403
    assert not PresaleCode.objects.filter(event=event).exists()


def test_the_change_form_sets_the_presale_and_its_allow_list(operator, make_event, api):
    """The public start and the allow-list's inline, saved together and put in Redis
    at once: the next join is refused without a code, a listed account's is not."""
    from queue_app.tests.test_pages import _change_event

    event = make_event()
    user = _account()
    local = timezone.localtime(timezone.now() + timedelta(hours=2))
    answer = _change_event(
        operator,
        event,
        public_from_0=local.strftime("%Y-%m-%d"),
        public_from_1=local.strftime("%H:%M:%S"),
        **{
            "presale_allows-TOTAL_FORMS": 2,
            "presale_allows-0-account": user.pk,
            "presale_allows-1-email_domain": "@Fans.Example.com",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[-3000:]
    assert sorted(str(entry) for entry in PresaleAllow.objects.filter(event=event)) == sorted(
        [str(user), "fans.example.com"]
    )
    until = int(store.client().hget(store.event_keys(event.event_id).meta, "presaleUntil"))
    assert until == int(Event.objects.get(pk=event.pk).public_from.timestamp() * 1000)
    assert join(api, event.event_id)[1]["error"]["code"] == "PRESALE_CODE_REQUIRED"
    assert services.queue_join(event_id=event.event_id, client=_as(user)).joined_at
    page = operator.get(f"/admin/queue_app/event/{event.pk}/change/").content.decode()
    assert "fans.example.com" in page and "Presale" in page


def test_the_allow_list_form_keeps_a_domain_as_the_list_reads_it(presale_event):
    from queue_app.admin_presale import PresaleAllowForm

    event = presale_event()
    form = PresaleAllowForm({"email_domain": " @Uni.AC.kr"}, instance=PresaleAllow(event=event))
    assert form.is_valid(), form.errors
    assert form.save().email_domain == "uni.ac.kr"
