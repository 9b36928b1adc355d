"""The room's ends as people meet them, in Chromium against the production server
(the fixtures of test_browser.py): a sale sold out under an admitted person, a
sale that closes while its page is open, and leaving the line. Each on a desktop in
English and on a phone in Korean; any console error fails the test."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from queue_app import events, tokens
from queue_app import services as queue
from testsupport.line import admit_all
from ticketing import store
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXT = {
    "en": {
        "sold_out": "Sold out",
        "closed": "This sale has closed.",
        "leave": "Leave the line",
        "leave_sure": "Leave the line?",
        "yes": "Yes, leave the line",
        "stay": "Stay in line",
        "left": "You have left the line.",
    },
    "ko": {
        "sold_out": "매진",
        "closed": "예매가 마감되었습니다.",
        "leave": "대기열에서 나가기",
        "leave_sure": "대기열에서 나갈까요?",
        "yes": "네, 나갈게요",
        "stay": "계속 기다리기",
        "left": "대기열에서 나왔습니다.",
    },
}


@pytest.fixture(params=[("en", 1280, 800), ("ko", 390, 844)], ids=["desktop-en", "phone-ko"])
def view(request, browser, production_server, console, make_event):  # noqa: F811 (fixtures)
    """A page on a desktop in English, or on a phone in Korean, and its language."""
    lang, width, height = request.param
    with opened(browser, console, production_server, lang, (width, height)) as page:
        yield page, TEXT[lang], lang


def panel(page, state: str):
    return page.locator(f'#room [data-show="{state}"]')


def token_of(page, event_id: str) -> tokens.Token:
    return tokens.parse_token(page.evaluate(f"localStorage.getItem('queueToken:{event_id}')"))


def test_sold_out_under_an_admitted_person_ends_on_a_sold_out_page(view, make_event, rc):
    """Admitted, then the seats sold by others: the form's answer is the room saying
    sold out, which stays (no bounce to the booking page), and once the window has
    passed still offers nothing to rejoin."""
    page, text, lang = view
    event = make_event(total_seats=1, active_window_seconds=6)
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
    token = token_of(page, event.event_id)
    visited = []
    page.on("framenavigated", lambda frame: visited.append(frame.url))
    page.fill("#id_buyer_name", "Lee")
    page.fill("#id_buyer_email", "lee@example.com")
    rc.set(store.EventKeys(event.event_id).seats, 0)  # someone else was faster
    page.locator("form.book button[type=submit]").click()
    page.wait_for_url(re.compile(rf"/events/{event.event_id}/$"))
    panel(page, "soldout").get_by_role("heading", name=text["sold_out"]).wait_for()
    shot(page, f"25-sold-out-admitted-{lang}")
    # The window runs out while the page watches; its polls after that still say sold out.
    while queue.queue_poll(event_id=event.event_id, token=token).status != "EXPIRED":
        page.wait_for_timeout(250)
    with page.expect_response("**/api/status/poll*"):
        pass
    with page.expect_response("**/api/status/poll*"):
        pass
    assert panel(page, "soldout").is_visible()
    assert not page.locator("#rejoin").is_visible()
    assert panel(page, "soldout").locator("a").get_attribute("href") == "/"  # somewhere else to go
    assert not [url for url in visited if "/book/" in url], visited  # never sent back to the booking page


def test_a_sold_out_page_turns_closed_by_itself(view, make_event, rc):
    """An admitted person on a sold-out sale: the page says sold out, and says closed
    once the operator closes the sale, without a reload."""
    page, text, lang = view
    event = make_event(total_seats=1)
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
    rc.set(store.EventKeys(event.event_id).seats, 0)
    page.reload()
    page.get_by_role("heading", name=text["sold_out"]).wait_for()
    event.status = "CLOSED"
    event.save(update_fields=["status", "updated_at"])
    events.event_publish(event, sold=1)
    page.get_by_role("heading", name=text["closed"]).wait_for()
    assert not page.get_by_role("heading", name=text["sold_out"]).is_visible()
    shot(page, f"26-closed-after-sold-out-{lang}")


def test_leaving_the_line_frees_the_place_at_once(view, make_event):
    """The Leave control asks first; staying keeps the place, leaving gives it up: the
    person behind moves up, the token's next poll says NOT_FOUND, and the page stops
    asking (no new place taken behind the person's back)."""
    page, text, lang = view
    event = make_event()
    page.goto(f"/events/{event.event_id}/")
    page.wait_for_function("document.querySelector('#position').textContent.includes('1')")
    behind = queue.queue_join(event_id=event.event_id).token
    token = token_of(page, event.event_id)

    page.get_by_role("button", name=text["leave"], exact=True).click()
    page.get_by_role("heading", name=text["leave_sure"]).wait_for()
    shot(page, f"27-leave-the-line-{lang}")
    page.get_by_role("button", name=text["stay"]).click()
    panel(page, "waiting").wait_for()
    assert queue.queue_poll(event_id=event.event_id, token=token).status == "WAITING"

    page.get_by_role("button", name=text["leave"], exact=True).click()
    page.get_by_role("button", name=text["yes"]).click()
    page.get_by_role("heading", name=text["left"]).wait_for()
    shot(page, f"28-left-the-line-{lang}")
    assert queue.queue_poll(event_id=event.event_id, token=token).status == "NOT_FOUND"
    assert queue.queue_poll(event_id=event.event_id, token=tokens.parse_token(behind)).rank == 1
    assert page.evaluate(f"localStorage.getItem('queueToken:{event.event_id}')") is None
    page.wait_for_timeout(1_500)  # a poll's interval: the page asks nothing more
    assert page.get_by_role("heading", name=text["left"]).is_visible()
    after = queue.queue_poll(event_id=event.event_id, token=tokens.parse_token(behind))
    assert (after.rank, after.total_waiting) == (1, 1)  # no new place was taken


def test_leaving_before_a_scheduled_start(view, make_event):
    """In the pre-queue too: the place is given up before the draw, and its token's
    poll says NOT_FOUND."""
    page, text, lang = view
    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    page.goto(f"/events/{event.event_id}/")
    panel(page, "prequeue").wait_for()
    token = token_of(page, event.event_id)
    assert queue.queue_poll(event_id=event.event_id, token=token).status == "PRE_QUEUE"
    panel(page, "prequeue").get_by_role("button", name=text["leave"], exact=True).click()
    page.get_by_role("button", name=text["stay"]).click()
    panel(page, "prequeue").wait_for()  # back to the countdown
    panel(page, "prequeue").get_by_role("button", name=text["leave"], exact=True).click()
    page.get_by_role("button", name=text["yes"]).click()
    page.get_by_role("heading", name=text["left"]).wait_for()
    assert queue.queue_poll(event_id=event.event_id, token=token).status == "NOT_FOUND"
