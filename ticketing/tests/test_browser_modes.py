"""The modes and the claim time as people meet them (docs/modes.md), in Chromium
against the production server: a safety-net sale with room takes a person straight
to booking, and a person whose turn came while they were away is told so and joins
again at the back. On a desktop in English and on a phone in Korean; any console
error fails the test."""

import re

import pytest

from queue_app import tokens
from queue_app.models import Event
from testsupport.line import admit_all
from ticketing import store
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXT = {
    "en": {"away": "Your turn came while you were away", "again": "Join the line again"},
    "ko": {"away": "자리를 비운 사이 차례가 지나갔습니다", "again": "다시 대기하기"},
}


@pytest.fixture(params=[("en", 1280, 800), ("ko", 390, 844)], ids=["desktop-en", "phone-ko"])
def view(request, browser, production_server, console, make_event):  # noqa: F811 (fixtures)
    lang, width, height = request.param
    with opened(browser, console, production_server, lang, (width, height)) as page:
        yield page, TEXT[lang], lang


def token_of(page, event_id: str) -> tokens.Token:
    return tokens.parse_token(page.evaluate(f"localStorage.getItem('queueToken:{event_id}')"))


def test_a_safety_net_sale_with_room_goes_straight_to_booking(view, make_event):
    page, _, lang = view
    event = make_event(mode=Event.Mode.SAFETY_NET, max_active_users=5)
    page.goto(f"/events/{event.event_id}/")
    # No tick runs in this test: the join itself admitted the person.
    page.wait_for_url(re.compile(r"/book/$"), timeout=10_000)
    page.locator("form.book").wait_for()
    shot(page, f"30-safety-net-straight-in-{lang}")


def test_a_safety_net_sale_that_is_full_shows_the_line(view, make_event, api):
    page, _, _ = view
    event = make_event(mode=Event.Mode.SAFETY_NET, max_active_users=1)
    assert api.join(event.event_id)[1]["data"]["status"] == "ACTIVE"  # someone took the room
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    assert page.locator("#ahead").inner_text() == "0"


def test_a_turn_that_came_while_away_is_explained_and_rejoins_at_the_back(view, make_event):
    page, text, lang = view
    event = make_event(claim_seconds=20)
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    token = token_of(page, event.event_id)
    page.goto("about:blank")  # the person walks away
    admit_all(event.event_id)
    k = store.EventKeys(event.event_id)
    for to in store.client().hkeys(k.claims):
        if to != b"upto":
            store.client().hset(k.claims, to, store.now_ms(event.event_id) - 1)
    admit_all(event.event_id)  # counts them away, and gives the slot on
    page.goto(f"/events/{event.event_id}/")
    page.get_by_role("heading", name=text["away"]).wait_for()
    shot(page, f"31-turn-passed-{lang}")
    page.get_by_role("button", name=text["again"]).click()
    page.locator("#position").wait_for()
    assert token_of(page, event.event_id).text != token.text  # a new place, at the back
