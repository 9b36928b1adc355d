"""Server-rendered pages and the operator's admin, through Django's test client."""

import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client, override_settings

from queue_app import admission, events, services
from queue_app.models import Event
from queue_app.views import token_cookie
from testsupport.booking import book
from testsupport.line import admit_all
from ticketing import store

HTML = {"HTTP_ACCEPT": "text/html"}


def test_the_list_shows_open_and_paused_events_then_those_closed_lately(client, make_event, settings):
    shown = [make_event(name="Open sale"), make_event(name="Paused sale", status="PAUSED")]
    closed = make_event(name="Closed sale", status="CLOSED")
    long_closed = make_event(name="Closed long ago", status="CLOSED")
    Event.objects.filter(pk=long_closed.pk).update(
        closed_at=closed.closed_at - timedelta(seconds=settings.EVENT_PURGE_AFTER_SECONDS + 1)
    )
    html = client.get("/").content.decode()
    assert all(e.name in html and f"/events/{e.event_id}/" in html for e in shown)
    # Closed lately: said so, after the sales on offer, with no way into its line.
    assert html.index("Paused sale") < html.index("Closed sale")
    assert f"/events/{closed.event_id}/" not in html
    assert "Closed long ago" not in html


def test_the_list_counts_seats_left_from_the_ledger_without_redis_state(client, make_event, api):
    """An event whose Redis state is gone (purged, or lost before a recover) still
    shows what Postgres knows: total seats less those sold."""
    event = make_event(name="Ledger sale", total_seats=5)
    token = api.token(event.event_id)
    admit_all(event.event_id)
    assert book(api, token, event.event_id, 2)[0] == 200
    assert "3 seats left" in client.get("/").content.decode()
    events.event_wipe(event.event_id)
    assert "3 seats left" in client.get("/").content.decode()


def test_pages_speak_korean_when_asked(client, make_event):
    event = make_event()
    html = client.get(f"/events/{event.event_id}/", HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert '<html lang="ko">' in html
    assert "이 화면을 닫지 마세요" in html
    html = client.get(f"/events/{event.event_id}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Keep this page open" in html


def test_the_language_switcher_sticks(client, make_event):
    event = make_event()
    client.get("/")
    resp = client.post("/i18n/setlang/", {"language": "ko", "next": "/"})
    assert resp.status_code == 302
    assert "대기실 입장" in client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert event.event_id in client.get("/").content.decode()


def test_the_waiting_room_is_one_page_for_everyone_not_signed_in(make_event, django_user_model):
    """An arrival costs no render where a cache stands: every anonymous visitor gets
    the same bytes (per language), public for a few seconds, with no cookie set and
    nothing of the visitor's in it; a signed-in person's page is private."""
    event = make_event()
    url = f"/events/{event.event_id}/"
    pages = [Client().get(url, HTTP_ACCEPT_LANGUAGE="ko", REMOTE_ADDR=f"10.0.0.{n}") for n in (1, 2)]
    assert pages[0].content == pages[1].content
    for page in pages:
        assert page.status_code == 200 and not page.cookies
        assert page["Cache-Control"] == f"public, max-age={settings.WAITING_ROOM_MAX_AGE}"
        assert "Accept-Language" in page["Vary"]
    assert Client().get(url, HTTP_ACCEPT_LANGUAGE="en").content != pages[0].content
    person = Client()
    person.force_login(django_user_model.objects.create_user("fan", "fan@example.org", "pw"))
    mine = person.get(url)
    assert mine["Cache-Control"] == "private" and b"fan" in mine.content


def test_an_unknown_page_is_an_html_404_for_browsers_and_json_for_clients(client, db):
    resp = client.get("/events/nope/", **HTML)
    assert resp.status_code == 404
    assert resp["Content-Type"].startswith("text/html")
    assert b"This page does not exist." in resp.content
    assert client.get("/events/nope/").json()["error"]["code"] == "NOT_FOUND"


def test_the_booking_page_sends_people_who_are_not_active_back(client, make_event):
    event = make_event()
    assert client.get(f"/events/{event.event_id}/book/").url == f"/events/{event.event_id}/"
    token = services.queue_join(event_id=event.event_id).token
    client.cookies[token_cookie(event.event_id)] = token
    assert client.get(f"/events/{event.event_id}/book/").url == f"/events/{event.event_id}/"


def test_the_booking_form_is_csrf_protected(make_event):
    event = make_event()
    token = services.queue_join(event_id=event.event_id).token
    admit_all(event.event_id)
    browser = Client(enforce_csrf_checks=True)
    browser.cookies[token_cookie(event.event_id)] = token
    assert browser.get(f"/events/{event.event_id}/book/").status_code == 200
    resp = browser.post(
        f"/events/{event.event_id}/book/",
        {"seat_count": 1, "buyer_name": "A", "buyer_email": "a@example.com"},
        **HTML,
    )
    assert resp.status_code == 403
    assert int(store.client().get(store.EventKeys(event.event_id).seats)) == 100


def test_the_booking_form_books_and_validates(client, make_event):
    event = make_event(total_seats=3, max_seats_per_booking=4)
    token = services.queue_join(event_id=event.event_id).token
    admit_all(event.event_id)
    client.cookies[token_cookie(event.event_id)] = token
    page = client.get(f"/events/{event.event_id}/book/").content.decode()
    assert '<option value="3">' in page and '<option value="4">' not in page  # no more than left
    bad = client.post(
        f"/events/{event.event_id}/book/", {"seat_count": 1, "buyer_name": "A", "buyer_email": "not-an-email"}
    )
    assert bad.status_code == 200 and b"Enter a valid email address." in bad.content
    resp = client.post(
        f"/events/{event.event_id}/book/",
        {"seat_count": 2, "buyer_name": "Park", "buyer_email": "park@example.com"},
    )
    assert resp.status_code == 302 and "/reservations/" in resp.url
    confirmation = client.get(resp.url).content.decode()
    assert "Reservation confirmed" in confirmation and "Park" in confirmation
    # Only the browser that booked sees it.
    assert Client().get(resp.url, **HTML).status_code == 404
    other = Client()
    other.cookies[token_cookie(event.event_id)] = str(uuid.uuid4())
    assert other.get(resp.url, **HTML).status_code == 404


@pytest.fixture
def operator(client, db):
    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw-for-tests"))
    return client


def test_the_admin_shows_live_numbers(operator, make_event, api):
    event = make_event(name="Live", admit_per_second=2, total_seats=10)
    tokens = [api.token(event.event_id) for _ in range(5)]
    admit_all(event.event_id)
    book(api, tokens[0], event.event_id, 3)
    assert api.rejoin(str(uuid.uuid4()), event.event_id)[1]["error"]["code"] == "INVALID_TOKEN"
    html = operator.get("/admin/queue_app/event/").content.decode()
    row = html[html.index(event.event_id) :]
    row = row[: row.index("</tr>")]
    cells = [c.split(">")[-1] for c in row.split("</td>")[:-1]]
    # live page, status, waiting, active, seats left, admitted in the last minute,
    # joins refused, protections, bookings
    assert cells[1:10] == ["Live", "Open", "3", "1", "7", "2", "forged token 1", "–", "1"], cells


def test_admin_actions_open_pause_close(operator, make_event, api):
    event = make_event()
    for action, status in (("pause_events", "PAUSED"), ("close_events", "CLOSED"), ("open_events", "OPEN")):
        resp = operator.post("/admin/queue_app/event/", {"action": action, "_selected_action": [event.pk]})
        assert resp.status_code == 302
        assert Event.objects.get(pk=event.pk).status == status
        assert store.client().hget(store.EventKeys(event.event_id).meta, "status").decode() == status
        if status == "CLOSED":
            assert api.join(event.event_id)[1]["error"]["code"] == "EVENT_CLOSED"


def _change_event(operator, event, **changes):
    """Submit the admin's change form for the event, with `changes` over its values."""
    fields = (
        "event_id",
        "name",
        "status",
        "mode",
        "total_seats",
        "admit_per_second",
        "active_window_seconds",
        "max_active_users",
        "claim_seconds",
        "max_seats_per_booking",
        "proof_of_work",
        "max_places_per_address",
        "max_seats_per_buyer",
        "price",
        "currency",
        "hold_seconds",
        "refund_percent",
        "priority_share",
    )
    data = {f: getattr(event, f) for f in fields} | changes
    if not data.pop("require_account", event.require_account):
        data.pop("require_account", None)  # an unticked checkbox sends nothing
    else:
        data["require_account"] = "on"
    # The presale allow-list's inline (queue_app/admin_presale.py), as the form sends it: no rows
    # unless `changes` give some.
    data = {"presale_allows-TOTAL_FORMS": 0, "presale_allows-INITIAL_FORMS": 0} | data
    return operator.post(f"/admin/queue_app/event/{event.pk}/change/", data)


def test_admin_changes_the_rate_live(operator, make_event, api):
    event = make_event(admit_per_second=1)
    for _ in range(10):
        api.token(event.event_id)
    resp = _change_event(operator, event, admit_per_second=4)
    assert resp.status_code == 302
    admit_all(event.event_id)
    assert events.event_live_numbers(event.event_id)["active"] == 4  # the next tick used it


def test_admin_refuses_fewer_seats_than_sold(operator, make_event, api):
    event = make_event(total_seats=10)
    token = api.token(event.event_id)
    admit_all(event.event_id)
    book(api, token, event.event_id, 4)
    resp = _change_event(operator, event, total_seats=3)
    assert resp.status_code == 200
    assert b"4 seats are already sold" in resp.content
    assert Event.objects.get(pk=event.pk).total_seats == 10
    assert int(store.client().get(store.EventKeys(event.event_id).seats)) == 6


def test_a_page_is_a_503_while_redis_is_away(client, make_event):
    event = make_event()
    client.cookies[token_cookie(event.event_id)] = services.queue_join(event_id=event.event_id).token
    nowhere = {"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=nowhere):
        resp = client.get(f"/events/{event.event_id}/book/", **HTML)
        assert resp.status_code == 503
        assert b"briefly unavailable" in resp.content
        resp = client.get(f"/events/{event.event_id}/book/")
    assert (resp.status_code, resp.json()["error"]["code"]) == (503, "REDIS_UNAVAILABLE")


def test_a_booking_still_being_decided_has_a_page_that_says_so(client, make_event):
    event = make_event()
    token = services.queue_join(event_id=event.event_id).token
    admission.event_admit(event.event_id)
    client.cookies[token_cookie(event.event_id)] = token
    rid = str(uuid.uuid4())
    # What BOOKING_PENDING leaves: seats held and the mark set in Redis, no row yet.
    store.client().set(store.EventKeys(event.event_id).booked(token), rid)
    resp = client.get(f"/events/{event.event_id}/reservations/{rid}/", **HTML)
    assert resp.status_code == 202
    assert b"Booking being confirmed" in resp.content and b'http-equiv="refresh"' in resp.content
    assert client.get(f"/events/{event.event_id}/reservations/{uuid.uuid4()}/", **HTML).status_code == 404


def test_admin_hot_sale_and_protections_off(operator, make_event, api):
    from queue_app.models import HOT_SALE_PLACES_PER_ADDRESS, SUGGESTED_PROOF_OF_WORK

    event = make_event(max_seats_per_booking=3)
    resp = operator.post("/admin/queue_app/event/", {"action": "hot_sale", "_selected_action": [event.pk]})
    assert resp.status_code == 302
    event.refresh_from_db()
    assert (event.proof_of_work, event.max_places_per_address, event.max_seats_per_buyer) == (
        SUGGESTED_PROOF_OF_WORK,
        HOT_SALE_PLACES_PER_ADDRESS,
        3,
    )
    assert api.join(event.event_id)[1]["error"]["code"] == "PROOF_OF_WORK"  # live at once
    html = operator.get("/admin/queue_app/event/").content.decode()
    assert f"proof of work {SUGGESTED_PROOF_OF_WORK:,}, 2 places/address, 3 seats/buyer" in html
    assert "proof of work 1" in html  # the refused join, counted by reason
    operator.post("/admin/queue_app/event/", {"action": "protections_off", "_selected_action": [event.pk]})
    event.refresh_from_db()
    assert event.protections() == []
    assert api.join(event.event_id)[0] == 200


def test_admin_change_form_sets_the_protections(operator, make_event, api):
    event = make_event()
    resp = _change_event(operator, event, require_account=True, max_places_per_address=4)
    assert resp.status_code == 302
    meta = store.client().hgetall(store.EventKeys(event.event_id).meta)
    assert (meta[b"requireAccount"], meta[b"maxPerAddress"]) == (b"1", b"4")
    from testsupport.clients import Api

    assert Api(Client()).join(event.event_id)[1]["error"]["code"] == "ACCOUNT_REQUIRED"  # signed out
    page = operator.get(f"/admin/queue_app/event/{event.pk}/change/").content.decode()
    assert "Against scripts and bots" in page


def _start_fields(when) -> dict:
    """The admin's split date and time widgets, in the server's time zone."""
    from django.utils import timezone

    local = timezone.localtime(when)
    return {"opens_at_0": local.strftime("%Y-%m-%d"), "opens_at_1": local.strftime("%H:%M:%S")}


def test_admin_schedules_a_start_and_shows_its_commitment(operator, make_event, api):
    from datetime import timedelta

    from django.utils import timezone

    event = make_event()
    when = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    resp = _change_event(operator, event, **_start_fields(when))
    assert resp.status_code == 302, resp.content.decode()[:2000]
    event.refresh_from_db()
    assert event.opens_at == when
    meta = store.client().hgetall(store.EventKeys(event.event_id).meta)
    assert (meta[b"draw"], int(meta[b"opensAt"])) == (b"PENDING", int(when.timestamp() * 1000))
    page = operator.get(f"/admin/queue_app/event/{event.pk}/change/").content.decode()
    assert "Scheduled start" in page and event.draw.commitment[:16] in page
    token = api.token(event.event_id)
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "PRE_QUEUE"


def test_admin_refuses_a_start_in_the_past_or_for_a_line_under_way(operator, make_event, api):
    from datetime import timedelta

    from django.utils import timezone

    event = make_event(admit_per_second=1)
    resp = _change_event(operator, event, **_start_fields(timezone.now() - timedelta(hours=1)))
    assert resp.status_code == 200 and b"The start must be in the future" in resp.content
    api.token(event.event_id)
    admit_all(event.event_id)
    resp = _change_event(operator, event, **_start_fields(timezone.now() + timedelta(hours=1)))
    assert resp.status_code == 200 and b"can no longer get a start time" in resp.content
    assert Event.objects.get(pk=event.pk).opens_at is None
    assert store.client().hget(store.EventKeys(event.event_id).meta, "draw") is None


def test_the_draw_page_before_and_after_the_draw(client, make_event, api):
    from datetime import timedelta

    from django.utils import timezone

    from queue_app import draw

    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    page = client.get(f"/events/{event.event_id}/draw", **HTML).content.decode()
    assert event.draw.commitment in page and 'data-status="SCHEDULED"' in page
    receipts = [api.join(event.event_id)[1]["data"]["receipt"] for _ in range(3)]
    Event.objects.filter(pk=event.pk).update(opens_at=timezone.now())
    event.refresh_from_db()
    events.event_publish(event)
    assert 'data-status="DRAWING"' in client.get(f"/events/{event.event_id}/draw", **HTML).content.decode()
    draw.run(event.event_id)
    page = client.get(f"/events/{event.event_id}/draw?receipt={receipts[1]}", **HTML).content.decode()
    position = draw.published(event_id=event.event_id, receipt=bytes.fromhex(receipts[1])).position
    assert f"Receipt {receipts[1]} was drawn at position {position} of 3." in page
    assert draw.published(event_id=event.event_id).seed in page
    page = client.get(f"/events/{event.event_id}/draw?receipt=nonsense", **HTML).content.decode()
    assert "A receipt is 16 characters" in page
    page = client.get(f"/events/{event.event_id}/draw?receipt={'0' * 16}", HTTP_ACCEPT_LANGUAGE="ko").content
    assert "이 추첨에는 이 접수 번호가 없습니다." in page.decode()
    plain = make_event()
    assert "no scheduled start" in client.get(f"/events/{plain.event_id}/draw", **HTML).content.decode()
    assert client.get("/events/nope-404/draw", **HTML).status_code == 404
    script = client.get("/verify_draw.py")
    assert b"def drawn_positions" in b"".join(script.streaming_content)


def test_the_pre_queue_page_shows_the_commitment_to_keep(client, make_event):
    """Before the start the waiting room shows the draw's commitment, for the person
    to keep: the draw page's own copy, after the start, is the service's word."""
    from datetime import timedelta

    from django.utils import timezone

    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    page = client.get(f"/events/{event.event_id}/", **HTML).content.decode()
    assert f'<code id="prequeue-commitment">{event.draw.commitment}</code>' in page
    assert "Keep the commitment with your receipt now, before the start" in page
    page = client.get(f"/events/{event.event_id}/", HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "추첨 커밋먼트 (비밀 시드의 SHA-256):" in page and event.draw.commitment in page
    plain = make_event()
    page = client.get(f"/events/{plain.event_id}/", **HTML).content.decode()
    assert '<code id="prequeue-commitment"></code>' in page


def _drawn(make_event, api) -> Event:
    from datetime import timedelta

    from django.utils import timezone

    from queue_app import draw

    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    for _ in range(2):
        api.join(event.event_id)
    Event.objects.filter(pk=event.pk).update(opens_at=timezone.now())
    event.refresh_from_db()
    events.event_publish(event)
    assert draw.run(event.event_id).outcome == "DONE"
    return event


def test_the_draw_page_shows_both_commitments_and_asks_for_the_kept_one(client, make_event, api):
    """After the draw: the commitment published before the start beside the one the
    revealed seed hashes to, whether they match, and a command that asks for the
    person's own copy (the page's would check the page against itself)."""
    import hashlib
    from datetime import timedelta

    from django.utils import timezone

    from queue_app import draw

    event = _drawn(make_event, api)
    shown = draw.published(event_id=event.event_id)
    page = client.get(f"/events/{event.event_id}/draw", **HTML).content.decode()
    assert f'<code id="commitment">{shown.commitment}</code>' in page
    seed_hash = hashlib.sha256(bytes.fromhex(shown.seed)).hexdigest()
    assert f'<code id="seed-commitment">{seed_hash}</code>' in page
    assert 'data-match="yes"' in page and "The two commitments match" in page
    assert "Compare both values with the commitment you saved from the waiting room" in page
    assert "--commitment &lt;the commitment you saved&gt;</code>" in page
    assert f"--commitment {shown.commitment}" not in page
    page = client.get(f"/events/{event.event_id}/draw", HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "시작 전에 공개한 커밋먼트" in page and "공개된 시드로 계산한 커밋먼트" in page
    assert "두 커밋먼트가 일치합니다." in page
    assert "--commitment &lt;저장해 둔 커밋먼트&gt;</code>" in page
    # Before the draw there is no seed to hash: the one commitment, to keep.
    scheduled = make_event(opens_at=timezone.now() + timedelta(hours=1))
    page = client.get(f"/events/{scheduled.event_id}/draw", **HTML).content.decode()
    assert 'id="seed-commitment"' not in page and 'id="commitment-match"' not in page


def test_the_draw_page_says_when_the_seed_is_not_the_one_committed_to(client, make_event, api, monkeypatch):
    """A seed that is not the one committed to is called out, not shown as if it were."""
    import dataclasses

    from queue_app import draw

    event = _drawn(make_event, api)
    real = draw.published

    def other_commitment(**kwargs):
        return dataclasses.replace(real(**kwargs), commitment="ab" * 32)

    monkeypatch.setattr(draw, "published", other_commitment)
    page = client.get(f"/events/{event.event_id}/draw", **HTML).content.decode()
    assert 'data-match="no"' in page and "The two commitments do not match" in page
    assert f'<code id="commitment">{"ab" * 32}</code>' in page
