"""A presale in Chromium against the production server (the fixtures of
test_browser.py): the waiting room asks a person without a code for one, says what
is wrong with a code it cannot take, and a valid code gets a place; the next person
with the same code (of one use) is told it is used up. On a desktop in English and
on a phone in Korean; any console error fails the test."""

from datetime import timedelta

import pytest
from django.utils import timezone

from queue_app import events, presale
from ticketing import store
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXT = {
    "en": {
        "required": "This sale is in its presale. Enter your presale code to join the line.",
        "malformed": "A presale code is 10 letters and digits, such as ABCDE-FGH23.",
        "invalid": "This code is not valid for this sale. Check it and try again.",
        "used_up": "This code has been used as many times as it allows.",
        "code": "Presale code",
        "submit": "Join with this code",
        "position": "You are number 1 in line",
    },
    "ko": {
        "required": "선예매 기간입니다. 선예매 코드를 입력하면 대기열에 들어갈 수 있습니다.",
        "malformed": "선예매 코드는 ABCDE-FGH23처럼 영문자와 숫자 10자입니다.",
        "invalid": "이 판매에서 쓸 수 없는 코드입니다. 확인하고 다시 입력해 주세요.",
        "used_up": "이 코드는 쓸 수 있는 횟수를 모두 썼습니다.",
        "code": "선예매 코드",
        "submit": "이 코드로 들어가기",
        "position": "대기 순번 1번",
    },
}


@pytest.fixture(params=[("en", 1280, 800), ("ko", 390, 844)], ids=["desktop-en", "phone-ko"])
def view(request, browser, production_server, console, make_event):  # noqa: F811 (fixtures)
    """What opens a page on a desktop in English, or on a phone in Korean (each a
    browser of its own: its own storage, so its own place), and the language's words."""
    lang, width, height = request.param
    # The joins the presale refuses, as the test means them to be.
    console.expect(r"status of 403 .*/api/queue/join")  # PRESALE_CODE_REQUIRED, _INVALID
    console.expect(r"status of 409 .*/api/queue/join")  # PRESALE_CODE_USED_UP
    pages = []

    def open_page():
        manager = opened(browser, console, production_server, lang, (width, height))
        pages.append(manager)
        return manager.__enter__()

    yield open_page, TEXT[lang], lang
    for manager in reversed(pages):
        manager.__exit__(None, None, None)


def test_the_room_asks_for_a_presale_code_and_a_valid_one_gets_a_place(view, make_event):
    open_page, text, lang = view
    event = make_event(name="Fan club presale", public_from=timezone.now() + timedelta(hours=1))
    (code,) = presale.codes_create(event, count=1, uses=1)
    page = open_page()
    page.goto(f"/events/{event.event_id}/")
    panel = page.locator('#room [data-show="presale"]')
    panel.get_by_role("heading", name=text["required"]).wait_for()
    assert page.get_by_label(text["code"]).evaluate("el => el === document.activeElement")
    assert panel.locator("#presale-opens").inner_text()  # when everyone may join
    shot(page, f"presale-code-{lang}")

    # Not a code at all: said at once, nothing sent.
    page.get_by_label(text["code"]).fill("ABC-123")
    page.get_by_role("button", name=text["submit"]).click()
    panel.get_by_role("heading", name=text["malformed"]).wait_for()
    # A code of another sale: the server says so, nothing is spent.
    page.get_by_label(text["code"]).fill(presale.shown(presale.new_code()))
    with page.expect_response("**/api/queue/join") as answered:
        page.get_by_role("button", name=text["submit"]).click()
    assert answered.value.status == 403
    panel.get_by_role("heading", name=text["invalid"]).wait_for()
    assert store.client().get(store.event_keys(event.event_id).seq) is None

    # The code as a person may type it: lower case, a space for the hyphen.
    page.get_by_label(text["code"]).fill(f"{code[:5].lower()} {code[5:].lower()}")
    page.get_by_role("button", name=text["submit"]).click()
    page.get_by_role("heading", name=text["position"]).wait_for()
    assert events.event_live_numbers(event.event_id)["waiting"] == 1
    # F5 keeps the place without asking again.
    page.reload()
    page.get_by_role("heading", name=text["position"]).wait_for()
    assert not panel.is_visible()

    # The next person with the same code: it gave its one place.
    other = open_page()
    other.goto(f"/events/{event.event_id}/")
    other.get_by_label(text["code"]).fill(presale.shown(code))
    other.get_by_role("button", name=text["submit"]).click()
    other.locator('#room [data-show="presale"]').get_by_role("heading", name=text["used_up"]).wait_for()
    assert events.event_live_numbers(event.event_id)["waiting"] == 1


LANE_NOTE = {
    "en": "You are in the priority lane, which is let in ahead of the general line.",
    "ko": "우선 대기열에 계십니다. 일반 대기열보다 먼저 입장합니다.",
}


def test_a_holders_link_joins_the_priority_lane_and_the_room_says_so(view, make_event):
    """After the public start, on an event with a priority lane (docs/modes.md): a
    holder's link carries the code, the room joins the lane with it and says so;
    someone without one joins the general line, and is told nothing of a lane."""
    open_page, text, lang = view
    event = make_event(name="Fan club lane", priority_share=30)
    (code,) = presale.codes_create(event, count=1, uses=1)
    holder = open_page()
    holder.goto(f"/events/{event.event_id}/?code={presale.shown(code)}")
    holder.get_by_role("heading", name=text["position"]).wait_for()
    note = holder.locator("#priority")
    note.wait_for()
    assert LANE_NOTE[lang] in note.inner_text()
    numbers = events.event_live_numbers(event.event_id)
    assert (numbers["waiting"], numbers["waitingPriority"]) == (1, 1)
    shot(holder, f"priority-lane-{lang}")

    other = open_page()
    other.goto(f"/events/{event.event_id}/")
    other.get_by_role("heading", name=text["position"]).wait_for()  # number 1 of the general line
    assert not other.locator("#priority").is_visible()
    numbers = events.event_live_numbers(event.event_id)
    assert (numbers["waiting"], numbers["waitingPriority"]) == (2, 1)
