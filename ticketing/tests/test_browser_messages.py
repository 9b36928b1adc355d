"""An operator's message to the crowd, in Chromium against an app server as production
runs it (two workers, each with its own copy of the line, refreshed every 200 ms):
the operator posts it in the admin, and two open waiting rooms (a desktop in English,
a phone in Korean) show it within one poll interval, each in its language (or in the
only language written), in a live region; clearing it takes it off them as fast. Any
console error fails the test."""

import re
import time
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model

from testsupport.servers import collect_static, server_env
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "queue-Seat-7781"
KOREAN = "입장이 10분 늦어집니다. 자리를 지켜 주세요."
ENGLISH = "Doors open 10 minutes late. Please keep your place."
ENGLISH_ONLY = "Section B is sold out."
LABEL = {"en": "From the organiser", "ko": "주최 측 안내"}

# A poll of someone near the front comes every second, ±20 % (queue_app/cadence.py);
# the answering process's copy of the line is at most one refresh old (200 ms, the
# production setting). Beyond both, the browser's own time to draw the change.
POLL_MS, REFRESH_MS, SLACK_MS = 1200, 200, 800


@pytest.fixture
def server(gunicorn) -> str:
    """An app server with the production refresh interval and two workers, so that
    the rooms' polls are answered by two copies of the line."""
    collect_static()
    base, _ = gunicorn({**server_env(QUEUE_LINE_REFRESH_MS=str(REFRESH_MS)), "WEB_CONCURRENCY": "2"})
    return base


@pytest.fixture
def rooms(browser, server, console, make_event) -> Iterator[tuple]:
    """An event's waiting room open on a desktop in English and on a phone in Korean,
    each with its place in line shown; and the operator, signed in to the admin."""
    event = make_event(admit_per_second=0)  # nobody is admitted: the rooms keep polling
    get_user_model().objects.create_superuser("op-crowd", "op@example.com", PASSWORD)
    with (
        opened(browser, console, server, "en", (1280, 800)) as en,
        opened(browser, console, server, "ko", (390, 844)) as ko,
        opened(browser, console, server, "en", (1280, 900)) as admin,
    ):
        for page in (en, ko):
            page.goto(f"/events/{event.event_id}/")
            page.locator("#position").wait_for()
        admin.goto(f"/admin/login/?next=/admin/queue_app/event/{event.pk}/messages/")
        admin.fill("#id_username", "op-crowd")
        admin.fill("#id_password", PASSWORD)
        admin.locator("input[type=submit]").click()
        admin.wait_for_url(re.compile(r"/messages/$"))
        yield event, {"en": en, "ko": ko}, admin


def shown(page) -> str:
    return page.locator("#crowd-message").inner_text()


def until(page, condition: str, since: float) -> float:
    """Wait for the room's live region to meet `condition` (a JS expression on `text`
    and `lang`, the message's text and language), for one poll interval and one
    refresh at most; how long after `since` it did."""
    budget = POLL_MS + REFRESH_MS + SLACK_MS
    page.wait_for_function(
        "() => { const said = document.querySelector('#crowd-message .crowd-message span');"
        " const text = said ? said.textContent : ''; const lang = said ? said.lang : '';"
        f" return {condition}; }}",
        timeout=budget,
    )
    return (time.monotonic() - since) * 1000


def test_a_message_appears_in_every_open_waiting_room_within_one_poll(rooms):
    event, pages, admin = rooms
    for page in pages.values():
        assert shown(page) == ""
    admin.fill("#id_text_ko", KOREAN)
    admin.fill("#id_text_en", ENGLISH)
    admin.get_by_role("button", name="Show to the line").click()
    admin.locator("#shown").wait_for()
    posted = time.monotonic()
    for lang, page in pages.items():
        text = KOREAN if lang == "ko" else ENGLISH
        took = until(page, f"text === {text!r} && lang === {lang!r}", posted)
        assert took <= POLL_MS + REFRESH_MS + SLACK_MS, (lang, took)
        region = page.locator("#crowd-message")
        assert region.get_attribute("role") == "status"
        assert region.inner_text().splitlines() == [LABEL[lang], text]
        assert page.locator("#position").is_visible()  # the place in line stays in view
        shot(page, f"message-to-the-crowd-{lang}")
    shot(admin, "admin-messages-to-the-crowd")

    # Written in English only: the Korean page shows the English, marked as English.
    admin.fill("#id_text_en", ENGLISH_ONLY)
    admin.get_by_role("button", name="Show to the line").click()
    admin.locator("#shown").get_by_text(ENGLISH_ONLY).wait_for()
    posted = time.monotonic()
    for page in pages.values():
        until(page, f"text === {ENGLISH_ONLY!r} && lang === 'en'", posted)

    # Cleared: off every room as fast, and in the history with the first.
    admin.get_by_role("button", name="Clear the message").click()
    admin.locator("#shown-none").wait_for()
    cleared = time.monotonic()
    for page in pages.values():
        until(page, "text === ''", cleared)
        assert page.locator("#crowd-message .crowd-message").count() == 0
    assert admin.locator("#history tbody tr").count() == 2


def test_a_message_reaches_a_person_on_the_booking_page(browser, server, console, make_event):
    """The booking page has no poll of its own: its message box polls, at the
    active person's pace (2 s, ±20 %), so a message reaches a person who is booking
    within one poll too; cleared, it goes as fast."""
    from queue_app import crowd_messages
    from testsupport.line import admit_all

    event = make_event()
    with opened(browser, console, server, "ko", (390, 844)) as page:
        page.goto(f"/events/{event.event_id}/")
        page.locator("#position").wait_for()
        admit_all(event.event_id)
        page.wait_for_url(re.compile(r"/book/$"))
        assert shown(page) == ""
        crowd_messages.event_message_post(event_id=event.event_id, text_ko=KOREAN, text_en=ENGLISH)
        posted = time.monotonic()
        page.wait_for_function(
            f"() => (document.querySelector('#crowd-message span') || {{}}).textContent === {KOREAN!r}",
            timeout=2400 + 2000 + REFRESH_MS + SLACK_MS,  # its first ask comes 2 s after the page
        )
        assert (time.monotonic() - posted) * 1000 <= 2400 + 2000 + REFRESH_MS + SLACK_MS
        assert page.locator("form.book").is_visible()
        crowd_messages.event_message_clear(event_id=event.event_id)
        page.wait_for_function("() => !document.querySelector('#crowd-message .crowd-message')", timeout=5000)
