"""An operator's message to the crowd: posted in the admin (Korean and English), carried
by every poll on both lanes within one refresh of each process's copy of the line,
whether the copy or Redis answers; cleared, replaced, kept in the history; refused
when bad, changing nothing; decoded once per process, however many polls carry it;
shown by the booking page in its language."""

import asyncio
import logging
import time

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ValidationError
from django.test import Client

from queue_app import crowd_messages, events, line, services, tokens
from queue_app.models import MESSAGE_MAX_LENGTH, Event, EventMessage
from queue_app.tests.test_admin_ko import KO, visible
from queue_app.tests.test_admission import admit
from queue_app.views import token_cookie
from ticketing import store

KOREAN = "입장이 10분 늦어집니다."
ENGLISH = "Doors open 10 minutes late."


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("op-messages", "op@example.com", "pw-for-tests"))
    return client


@pytest.fixture
def crowd(make_event) -> tuple[Event, str, str]:
    """An event with one person admitted (their polls are Redis' to answer) and one
    waiting behind them (the copy's)."""
    event = make_event(admit_per_second=1)
    active = services.queue_join(event_id=event.event_id).token
    waiting = services.queue_join(event_id=event.event_id).token
    admit(event.event_id)
    return event, active, waiting


def url(event: Event) -> str:
    return f"/admin/queue_app/event/{event.pk}/messages/"


def post(operator: Client, event: Event, ko: str = KOREAN, en: str = ENGLISH, **extra):
    return operator.post(url(event), {"text_ko": ko, "text_en": en}, **extra)


def polled(api, event: Event, token: str) -> dict:
    status, body = api.poll(token, event.event_id)
    assert status == 200, body
    return body["data"]


def meta_message(event: Event) -> bytes | None:
    return store.client().hget(store.EventKeys(event.event_id).meta, "message")


def test_a_message_posted_in_the_admin_is_in_every_poll_within_one_refresh(api, operator, crowd, settings):
    """At the production refresh interval (200 ms): the copy answering the waiting
    person, and Redis the admitted one, both carry the message one interval after
    the operator posted it, on each lane."""
    event, active, waiting = crowd
    settings.QUEUE_LINE_REFRESH_MS = 200
    line.forget()  # the joins' copy of the line is from before the admission
    assert polled(api, event, active)["status"] == "ACTIVE"
    assert polled(api, event, waiting)["status"] == "WAITING"
    assert polled(api, event, waiting)["message"] is None  # the copy, read just now
    page = post(operator, event)
    assert page.status_code == 302, page.content
    posted = EventMessage.objects.get(event=event)
    time.sleep(0.2)
    expected = {
        "id": posted.pk,
        "ko": KOREAN,
        "en": ENGLISH,
        "at": int(posted.created_at.timestamp() * 1000),
    }
    assert polled(api, event, waiting)["message"] == expected
    assert polled(api, event, active)["message"] == expected
    assert (posted.created_by.username, posted.cleared_at) == ("op-messages", None)


def test_clearing_takes_the_message_off_every_poll_and_keeps_it_in_the_history(api, operator, crowd):
    event, active, waiting = crowd
    post(operator, event)
    assert polled(api, event, waiting)["message"]["en"] == ENGLISH
    page = operator.post(url(event), {"clear": "1"}, follow=True)
    assert [str(m) for m in page.context["messages"]][-1] == "The message is no longer shown."
    assert polled(api, event, waiting)["message"] is None
    assert polled(api, event, active)["message"] is None
    assert meta_message(event) == b""
    kept = EventMessage.objects.get(event=event)
    assert (kept.text_ko, kept.text_en, kept.cleared_by.username) == (KOREAN, ENGLISH, "op-messages")
    assert kept.cleared_at is not None
    shown = visible(page.content)
    assert "No message is shown." in shown and KOREAN in shown and ENGLISH in shown  # the history
    # Nothing shown: clearing again says so, and changes nothing.
    again = operator.post(url(event), {"clear": "1"}, follow=True)
    assert [str(m) for m in again.context["messages"]] == ["No message was shown."]
    assert EventMessage.objects.get(event=event).cleared_at == kept.cleared_at


def test_a_new_message_replaces_the_one_shown(api, operator, crowd):
    """Posting ends the message shown (in the history as cleared then): clearing the
    new one shows none, not the one before it."""
    event, _, waiting = crowd
    post(operator, event, ko="", en="Section B is sold out.")
    post(operator, event, ko="B구역이 매진되었습니다.", en="")
    first, second = EventMessage.objects.filter(event=event).order_by("pk")
    assert first.cleared_at is not None and second.cleared_at is None
    assert polled(api, event, waiting)["message"]["id"] == second.pk
    operator.post(url(event), {"clear": "1"})
    assert polled(api, event, waiting)["message"] is None
    assert EventMessage.objects.filter(event=event, cleared_at__isnull=True).count() == 0
    page = operator.get(url(event)).content.decode()
    assert page.count("data-message=") == 2


@pytest.mark.parametrize(
    ("ko", "en", "error"),
    [
        ("", "", "Write the message in Korean, in English, or in both."),
        ("  \r\n ", " ", "Write the message in Korean, in English, or in both."),
        ("가" * (MESSAGE_MAX_LENGTH + 1), "", "Ensure this value has at most 280 characters (it has 281)."),
        ("", "x" * (MESSAGE_MAX_LENGTH + 1), "Ensure this value has at most 280 characters (it has 281)."),
        ("\x00", "nul", "Null characters are not allowed."),
    ],
    ids=["empty", "blank", "ko-too-long", "en-too-long", "nul"],
)
def test_a_bad_message_is_refused_and_changes_nothing(api, operator, crowd, ko, en, error):
    event, _, waiting = crowd
    post(operator, event, ko="지금 보이는 안내", en="Shown now")
    shown = meta_message(event)
    page = post(operator, event, ko=ko, en=en)
    assert page.status_code == 200
    assert error in visible(page.content)
    assert EventMessage.objects.filter(event=event).count() == 1
    assert meta_message(event) == shown
    assert polled(api, event, waiting)["message"]["en"] == "Shown now"


def test_the_service_refuses_what_the_form_refuses(crowd):
    """Callers other than the admin get the model's refusal, and nothing changes."""
    event, _, _ = crowd
    with pytest.raises(ValidationError):
        crowd_messages.event_message_post(event_id=event.event_id, text_ko=" ", text_en="\r\n")
    with pytest.raises(ValidationError):
        crowd_messages.event_message_post(event_id=event.event_id, text_ko="가" * 281, text_en="")
    assert not EventMessage.objects.filter(event=event).exists()
    assert meta_message(event) == b""
    kept = crowd_messages.event_message_post(event_id=event.event_id, text_ko="", text_en=" two\r\nlines ")
    assert kept.text_en == "two\nlines"  # one character a line end, as the poll carries it


def test_a_message_redis_did_not_take_is_not_posted(operator, crowd, monkeypatch):
    event, _, _ = crowd

    def away(*args, **kwargs) -> None:
        raise redis.ConnectionError("Redis is away")

    monkeypatch.setattr(events, "event_publish", away)
    page = post(operator, event)
    assert page.status_code == 200
    assert [str(m) for m in page.context["messages"]] == [
        "Redis could not be reached, so nothing changed; try again."
    ]
    assert not EventMessage.objects.filter(event=event).exists()


def test_only_who_may_change_the_event_posts_or_clears(crowd):
    event, _, _ = crowd
    viewer = User.objects.create_user("viewer", "viewer@example.com", "pw-for-tests", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_event"))
    client = Client()
    client.force_login(viewer)
    page = client.get(url(event))
    assert page.status_code == 200
    assert 'id="message-form"' not in page.content.decode()
    assert post(client, event).status_code == 403
    assert client.post(url(event), {"clear": "1"}).status_code == 403
    assert not EventMessage.objects.filter(event=event).exists()
    assert Client().get(url(event)).status_code == 302  # to the admin's sign-in
    operator = Client()
    operator.force_login(User.objects.create_superuser("op-404", "op4@example.com", "pw-for-tests"))
    assert operator.get(f"/admin/queue_app/event/{event.pk + 10_000}/messages/").status_code == 404


def test_the_message_outlives_a_republish_and_a_rebuilt_line(api, operator, crowd):
    """The event's record carries it: an admin save, and a line rebuilt from Postgres
    (a wipe, then a publish, as recover_event does), show the same message."""
    event, _, waiting = crowd
    post(operator, event)
    events.event_publish(Event.objects.get(pk=event.pk))
    assert polled(api, event, waiting)["message"]["ko"] == KOREAN
    events.event_wipe(event.event_id)
    events.event_publish(Event.objects.get(pk=event.pk))
    line.forget()
    fresh = services.queue_join(event_id=event.event_id).token
    assert polled(api, event, fresh)["message"]["ko"] == KOREAN


def test_each_process_decodes_a_message_once(crowd, settings):
    """One parse for a text, whatever the polls: the copy's answers hand out the
    object it decoded at its refresh (no call at all between refreshes), and Redis'
    answers find the same object for the same bytes. Every Position carries that one
    object, on both lanes' services."""
    event, active, waiting = crowd
    crowd_messages.event_message_post(event_id=event.event_id, text_ko=KOREAN, text_en=ENGLISH)
    line.decoded_message.cache_clear()
    line.forget()
    active, waiting = tokens.parse_token(active), tokens.parse_token(waiting)

    async def apolls(token: tokens.Token, n: int) -> list:
        return [await services.aqueue_poll(event_id=event.event_id, token=token) for _ in range(n)]

    shown = [services.queue_poll(event_id=event.event_id, token=t) for t in (waiting, active) * 10]
    shown += asyncio.run(apolls(waiting, 10)) + asyncio.run(apolls(active, 10))
    assert {at.status for at in shown} == {"WAITING", "ACTIVE"}
    assert len({id(at.message) for at in shown}) == 1
    assert shown[0].message["ko"] == KOREAN
    assert line.decoded_message.cache_info().misses == 1
    # Between refreshes the copy's answers call nothing: a reference is all they carry.
    settings.QUEUE_LINE_REFRESH_MS = 60_000
    services.queue_poll(event_id=event.event_id, token=waiting)  # (the copy is fresh now)
    calls = line.decoded_message.cache_info()
    for _ in range(100):
        assert services.queue_poll(event_id=event.event_id, token=waiting).message is shown[0].message
    assert line.decoded_message.cache_info() == calls


def test_a_message_in_redis_that_is_not_one_is_shown_as_none(api, crowd, caplog):
    event, active, waiting = crowd
    store.client().hset(store.EventKeys(event.event_id).meta, "message", b'{"text": "not ours"}')
    line.decoded_message.cache_clear()
    with caplog.at_level(logging.WARNING, logger="queue_app.line"):
        assert polled(api, event, waiting)["message"] is None
        assert polled(api, event, active)["message"] is None
    assert "is not one" in caplog.text


@pytest.mark.parametrize(
    ("ko", "en", "language", "shown", "lang"),
    [
        (KOREAN, ENGLISH, "en", ENGLISH, "en"),
        (KOREAN, ENGLISH, "ko", KOREAN, "ko"),
        ("", ENGLISH, "ko", ENGLISH, "en"),  # only one text written: every page shows it
        (KOREAN, "", "en", KOREAN, "ko"),
    ],
)
def test_the_booking_page_shows_the_message_in_its_language(client, crowd, ko, en, language, shown, lang):
    event, active, _ = crowd
    client.cookies[token_cookie(event.event_id)] = active
    before = client.get(f"/events/{event.event_id}/book/").content.decode()
    assert 'id="crowd-message"' in before and 'class="crowd-message"' not in before
    crowd_messages.event_message_post(event_id=event.event_id, text_ko=ko, text_en=en)
    page = client.get(f"/events/{event.event_id}/book/", HTTP_ACCEPT_LANGUAGE=language)
    assert page.status_code == 200
    html = page.content.decode()
    assert f'<span lang="{lang}">{shown}</span>' in html
    assert ("주최 측 안내" if language == "ko" else "From the organiser") in visible(page.content)


def test_the_waiting_room_has_a_live_region_for_the_message(client, make_event):
    """The region is on the page from the start (empty), so that a screen reader
    announces a message the script puts in it; the script's label comes translated."""
    event = make_event()
    page = client.get(f"/events/{event.event_id}/", **KO).content.decode()
    region = '<div id="crowd-message" role="status" aria-live="polite" aria-atomic="true"'
    assert region + ' data-label="주최 측 안내"></div>' in page


def test_the_command_shows_and_clears_a_message(make_event, api):
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    event = make_event()
    token = api.token(event.event_id)
    out = io.StringIO()
    call_command("crowd_message", event.event_id, "--en", "Doors open late", stdout=out)
    assert out.getvalue().strip() == f"Event {event.event_id}: message shown."
    line.forget()  # this process's copy reads it at once
    assert api.poll(token, event.event_id)[1]["data"]["message"]["en"] == "Doors open late"
    with pytest.raises(CommandError, match="Write the message"):
        call_command("crowd_message", event.event_id)
    with pytest.raises(CommandError, match="No event"):
        call_command("crowd_message", "no-such-event", "--en", "x")
    call_command("crowd_message", event.event_id, "--clear", stdout=out)
    line.forget()
    assert api.poll(token, event.event_id)[1]["data"]["message"] is None
