"""Choosing seats in Chromium against the production server (static/js/seat-map.js):
two seats tapped on the map and booked; a seat someone else takes while the page is
open shown taken within a couple of seconds, and a choice that still names it
refused with the rest kept; the seat lists worked by keyboard alone; the map zoomed
and panned by buttons, a pinch and a drag on a phone. On a desktop in English and a
phone in Korean. A console error or an uncaught exception fails the test
(ticketing/tests/browser.py)."""

import re
import time

import pytest
import requests
from playwright.sync_api import expect

from booking_app import services
from booking_app.models import Reservation
from queue_app import events, seating
from queue_app import services as queue
from queue_app.models import Event
from queue_app.tokens import parse_token
from testsupport.line import admit_all
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A hall: standing places at the front, then two sections of numbered seats (row A
# has an aisle between its seats 3 and 4).
MAP = {
    "sections": [
        {
            "id": "GA",
            "name": "Floor",
            "price": 99_000,
            "places": 20,
            "box": {"x": 0, "y": 0, "width": 8, "height": 2},
        },
        {
            "id": "R",
            "name": "R seats",
            "price": 154_000,
            "rows": [
                {"row": "A", "seats": ["1", "2", "3", None, "4", "5"], "x": 1, "y": 4},
                {"row": "B", "count": 6, "x": 1, "y": 5},
            ],
        },
        {"id": "S", "name": "S seats", "price": 132_000, "rows": [{"row": "C", "count": 8, "x": 0, "y": 8}]},
    ]
}
FREE_MAP = {"sections": [{**section, "price": 0} for section in MAP["sections"]]}

TEXT = {
    "en": {
        "hold": "Hold seats and pay",
        "total": "308,000 KRW",
        "pay": "Pay",
        "confirmed": "Reservation confirmed",
        "chosen": "Your seats: R-A-2, R-A-3 · Total: 308,000 KRW",
        "taken_now": "Someone just took R-A-4: it is no longer in your choice.",
        "refused": "Someone just took R-B-2; the rest of your choice is kept.",
        "option": "Row A, seat 2, free",  # a free event's seat: no price said
        "zoom_in": "Zoom in",
    },
    "ko": {
        "hold": "좌석 선점 후 결제",
        "total": "308,000 KRW",
        "pay": "결제하기",
        "confirmed": "예매가 완료되었습니다",
        "chosen": "선택한 좌석: R-A-2, R-A-3 · 합계: 308,000 KRW",
        "taken_now": "방금 다른 분이 R-A-4 좌석을 가져가 선택에서 빠졌습니다.",
        "refused": "방금 다른 분이 R-B-2 좌석을 가져갔습니다. 나머지 선택은 그대로 두었습니다.",
        "option": "A열 2번, 선택 가능",
        "zoom_in": "확대",
    },
}


@pytest.fixture(params=[("en", 1280, 800), ("ko", 390, 844)], ids=["desktop-en", "phone-ko"])
def view(request, browser, production_server, console, make_event):
    """A page on a desktop in English or a phone in Korean (one that takes touches)."""
    lang, width, height = request.param
    phone = {"has_touch": True, "is_mobile": True} if width < 600 else {}
    with opened(browser, console, production_server, lang, (width, height), **phone) as page:
        yield page, TEXT[lang], lang


@pytest.fixture
def mapped(make_event):
    """An event with the hall's map (priced, held 10 minutes, unless `seat_map` is
    FREE_MAP), published, admitting the page's buyer and those who take seats
    before them at once."""

    def make(seat_map: dict = MAP) -> Event:
        event = make_event(max_seats_per_booking=4, price=55_000, currency="KRW", hold_seconds=600)
        total = seating.seat_map_apply(event, seat_map)
        Event.objects.filter(pk=event.pk).update(total_seats=total, admit_per_second=5)
        event.refresh_from_db()
        events.event_publish(event)
        return event

    return make


def to_booking(page, event: Event) -> None:
    """Join the line in the page, be admitted, and land on the booking page with its
    map drawn."""
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
    page.locator('#seat-svg circle[data-seat="R-A-1"]').wait_for()


def seat(page, seat_id: str):
    return page.locator(f'#seat-svg circle[data-seat="{seat_id}"]')


def option(page, seat_id: str):
    return page.locator(f"#option-{seat_id}")


def other_buyer_takes(event: Event, *seats: str) -> None:
    """Someone else, admitted, books these seats."""
    token = queue.queue_join(event_id=event.event_id).token
    admit_all(event.event_id)
    services.booking_reserve(
        event_id=event.event_id,
        token=parse_token(token),
        seat_count=len(seats),
        seats=seats,
        buyer_email="o@x.kr",
    )


def fill_buyer(page) -> None:
    page.fill("#id_buyer_name", "Kim Minji")
    page.fill("#id_buyer_email", "minji@example.com")


def test_two_seats_tapped_on_the_map_are_held_paid_and_booked(view, mapped):
    page, text, lang = view
    event = mapped()
    to_booking(page, event)
    assert page.locator("fieldset.seat-boxes").first.is_hidden()  # the map and the lists stand in
    for seat_id in ("R-A-2", "R-A-3"):
        if lang == "ko":
            seat(page, seat_id).tap()  # a finger, on the phone
        else:
            seat(page, seat_id).click()
    assert seat(page, "R-A-2").get_attribute("class") == "seat chosen"
    assert option(page, "R-A-3").get_attribute("aria-selected") == "true"
    assert page.locator("#section-R").is_checked()
    assert page.locator("#seat-choice").inner_text() == text["chosen"]
    fill_buyer(page)
    shot(page, f"seats-chosen-{lang}")
    page.get_by_role("button", name=text["hold"]).click()
    page.wait_for_url(re.compile(r"/checkout/$"))
    assert page.locator("#amount").inner_text() == text["total"]
    page.get_by_role("button", name=text["pay"], exact=True).click()
    page.get_by_role("heading", name=text["confirmed"]).wait_for()
    row = Reservation.objects.get(event=event)
    assert (row.status, sorted(row.seats)) == ("CONFIRMED", ["R-A-2", "R-A-3"])


def test_a_seat_taken_meanwhile_turns_taken_and_a_choice_naming_it_is_refused(
    view, mapped, production_server, console
):
    page, text, lang = view
    console.expect(r"status of 409 .*/book/")  # the form's answer: SEAT_TAKEN
    event = mapped()
    to_booking(page, event)
    seat(page, "R-A-4").click()
    seat(page, "R-A-5").click()
    started = time.monotonic()
    other_buyer_takes(event, "R-A-4")
    page.wait_for_function(
        "document.querySelector('[data-seat=\"R-A-4\"]').getAttribute('class') === 'seat held'", timeout=3000
    )
    assert time.monotonic() - started < 3
    expect(page.locator("#seat-news")).to_have_text(text["taken_now"])
    assert option(page, "R-A-4").get_attribute("aria-disabled") == "true"
    assert seat(page, "R-A-5").get_attribute("class") == "seat chosen"  # the rest is kept

    # The seats' state stops reaching the page (a slow network): a seat taken now is
    # still shown free, chosen, and the booking refuses it.
    frozen = requests.get(f"{production_server}/api/events/{event.event_id}/seats", timeout=5).text
    page.route(
        "**/api/events/*/seats",
        lambda route: route.fulfill(status=200, content_type="application/json", body=frozen),
    )
    seat(page, "R-A-5").click()  # let go of it: the choice is now in row B
    seat(page, "R-B-1").click()
    seat(page, "R-B-2").click()
    other_buyer_takes(event, "R-B-2")
    fill_buyer(page)
    page.get_by_role("button", name=text["hold"]).click()
    page.locator("#error").wait_for()
    assert page.locator("#error").inner_text() == text["refused"]
    page.unroute("**/api/events/*/seats")
    seat(page, "R-A-1").wait_for()
    assert seat(page, "R-B-1").get_attribute("class") == "seat chosen"
    assert seat(page, "R-B-2").get_attribute("class") == "seat held"
    assert option(page, "R-B-1").get_attribute("aria-selected") == "true"
    shot(page, f"seats-taken-{lang}")
    page.get_by_role("button", name=text["hold"]).click()  # the name and email were kept too
    page.wait_for_url(re.compile(r"/checkout/$"))
    mine = Reservation.objects.get(event=event, buyer_email="minji@example.com")
    assert (mine.status, mine.seats) == ("HELD", ["R-B-1"])


_SEEN = """seen => {
  Object.defineProperty(document, "hidden", { configurable: true, get: () => !seen });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_the_seats_are_asked_for_only_while_the_page_is_seen(view, mapped):
    page, text, lang = view
    event = mapped()
    to_booking(page, event)
    asked: list[float] = []  # when the page asked for the seats' state

    def note(request) -> None:
        if request.url.endswith("/seats"):
            asked.append(time.monotonic())

    page.on("request", note)
    page.wait_for_timeout(2500)
    assert len(asked) >= 2  # about every second
    page.evaluate(_SEEN, False)  # another tab in front
    hidden_at = time.monotonic()
    page.wait_for_timeout(2500)
    assert [t for t in asked if t > hidden_at + 0.1] == []
    shown_at = time.monotonic()
    page.evaluate(_SEEN, True)  # back: asked at once
    page.wait_for_timeout(500)
    assert [t for t in asked if t > shown_at]


def _focused_role(page) -> str:
    return page.evaluate("document.activeElement.getAttribute('role') || document.activeElement.id")


def test_the_seat_list_works_by_keyboard_alone(view, mapped):
    page, text, lang = view
    event = mapped(FREE_MAP)
    to_booking(page, event)
    page.locator("body").focus()
    for _ in range(30):  # Tab from the top of the page to the first list of seats
        page.keyboard.press("Tab")
        if _focused_role(page) == "listbox":
            break
    listbox = page.get_by_role("listbox", name="R seats")
    assert listbox.evaluate("el => el === document.activeElement")
    assert listbox.get_attribute("aria-multiselectable") == "true"
    # Focus is on the first free seat; the arrows move, Space ticks.
    assert listbox.get_attribute("aria-activedescendant") == "option-R-A-1"
    page.keyboard.press("ArrowRight")
    assert listbox.get_attribute("aria-activedescendant") == "option-R-A-2"
    assert option(page, "R-A-2").get_attribute("aria-label") == text["option"]
    page.keyboard.press("Space")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Space")
    page.keyboard.press("End")
    assert listbox.get_attribute("aria-activedescendant") == "option-R-B-6"
    page.keyboard.press("Home")
    assert listbox.get_attribute("aria-activedescendant") == "option-R-A-1"
    assert [option(page, s).get_attribute("aria-selected") for s in ("R-A-1", "R-A-2", "R-A-3")] == [
        "false",
        "true",
        "true",
    ]
    assert page.locator('input[name="seats"]:checked').evaluate_all("boxes => boxes.map(b => b.value)") == [
        "R-A-2",
        "R-A-3",
    ]
    shot(page, f"seats-keyboard-{lang}")
    for _ in range(30):  # on to the buyer's name and email, typed
        page.keyboard.press("Tab")
        if _focused_role(page) == "id_buyer_name":
            break
    page.keyboard.type("Kim Minji")
    page.keyboard.press("Tab")
    page.keyboard.type("minji@example.com")
    for _ in range(30):  # back to the seats, where Enter sends the form
        page.keyboard.press("Shift+Tab")
        if listbox.evaluate("el => el === document.activeElement"):
            break
    page.keyboard.press("Enter")
    page.get_by_role("heading", name=text["confirmed"]).wait_for()
    row = Reservation.objects.get(event=event)
    assert (row.status, sorted(row.seats)) == ("CONFIRMED", ["R-A-2", "R-A-3"])


def _view_box(page) -> list[float]:
    return [float(n) for n in page.locator("#seat-svg").get_attribute("viewBox").split()]


def test_the_map_zooms_and_pans(view, mapped):
    page, text, lang = view
    event = mapped()
    to_booking(page, event)
    whole = _view_box(page)
    page.get_by_role("button", name=text["zoom_in"]).click()
    closer = _view_box(page)
    assert closer[2] < whole[2] and closer[3] < whole[3]
    page.locator("#seat-svg").scroll_into_view_if_needed()
    box = page.locator("#seat-svg").bounding_box()
    mid_x, mid_y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    if lang == "ko":  # a phone: two fingers pinch apart, one drags
        cdp = page.context.new_cdp_session(page)

        def touch(kind: str, *points: tuple[float, float]) -> None:
            touches = [{"x": x, "y": y, "id": i} for i, (x, y) in enumerate(points)]
            cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": touches})

        touch("touchStart", (mid_x - 20, mid_y), (mid_x + 20, mid_y))
        for step in range(1, 6):
            touch("touchMove", (mid_x - 20 - 10 * step, mid_y), (mid_x + 20 + 10 * step, mid_y))
        touch("touchEnd")
        pinched = _view_box(page)
        assert pinched[2] < closer[2]
        touch("touchStart", (mid_x, mid_y))
        for step in range(1, 6):
            touch("touchMove", (mid_x - 10 * step, mid_y))
        touch("touchEnd")
        dragged = _view_box(page)
        assert dragged[0] > pinched[0] and dragged[2] == pinched[2]
    else:  # a desktop: the mouse drags
        page.mouse.move(mid_x, mid_y)
        page.mouse.down()
        page.mouse.move(mid_x - 60, mid_y, steps=5)
        page.mouse.up()
        dragged = _view_box(page)
        assert dragged[0] > closer[0] and dragged[2] == closer[2]
    shot(page, f"seats-zoomed-{lang}")
    page.get_by_role("button", name={"en": "Whole map", "ko": "전체 보기"}[lang]).click()
    assert _view_box(page) == whole
    # A tap after the gestures still chooses a seat.
    seat(page, "S-C-1").click()
    assert seat(page, "S-C-1").get_attribute("class") == "seat chosen"
