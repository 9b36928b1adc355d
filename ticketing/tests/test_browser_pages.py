"""What the pages show people, in Chromium against the production server: every time
named with its zone, in the browser's zone and the page's language; the event list's
seats left, badges, start times and names; the favicon; the language switcher; the
admin's list at a laptop's width; the booking form of a signed-in account; the
operator's first hint. Desktop in English and phone-sized in Korean where the text
differs; any console error fails the test."""

import re
import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from booking_app import mail
from booking_app.models import Reservation
from queue_app import services as queue
from testsupport.booking import book
from testsupport.line import admit_all
from ticketing import store
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "queue-Seat-7781"

# Each view has a browser zone far from the server's (Asia/Seoul) or the same, so that
# a time the server wrote in its own zone cannot pass for the browser's.
VIEWS = {
    "en": {"size": (1280, 800), "zone": "America/New_York"},
    "ko": {"size": (390, 844), "zone": "Asia/Seoul"},
}

TEXT = {
    "en": {
        "seats_left": "7 seats left",
        "sold_out": "Sold out",
        "closed": "Closed",
        "paused": "Paused",
        "starts": "Starts {time}",
        "enter": "Enter the waiting room",
        "operators": "Operators: sign in at /admin/ "
        "(create an account with python manage.py createsuperuser).",
    },
    "ko": {
        "seats_left": "잔여 좌석 7석",
        "sold_out": "매진",
        "closed": "마감",
        "paused": "일시 중단",
        "starts": "{time} 시작",
        "enter": "대기실 입장",
        "operators": "운영자: /admin/에서 로그인하세요 (계정 만들기: python manage.py createsuperuser).",
    },
}


@pytest.fixture(params=["en", "ko"], ids=["desktop-en", "phone-ko"])
def view(request, browser, production_server, console, make_event):
    """A page on a desktop in English (New York), or on a phone in Korean (Seoul),
    and its language."""
    lang = request.param
    size, zone = VIEWS[lang]["size"], VIEWS[lang]["zone"]
    with opened(browser, console, production_server, lang, size, timezone_id=zone) as page:
        yield page, TEXT[lang], lang


def shown(moment: datetime, lang: str) -> str:
    """How a time reads in the view's zone and language: date, time, and zone."""
    local = moment.astimezone(ZoneInfo(VIEWS[lang]["zone"]))
    hour = local.hour % 12 or 12
    if lang == "en":
        zone = local.tzname()  # EST or EDT
        noon = "AM" if local.hour < 12 else "PM"
        return f"{local:%b} {local.day}, {local.year}, {hour}:{local:%M} {noon} {zone}"
    noon = "오전" if local.hour < 12 else "오후"  # before the hour, as Korean writes it
    return f"{local.year}년 {local.month}월 {local.day}일 {noon} {hour}:{local:%M} GMT+9"


def text_of(locator) -> str:
    """The text as read: the narrow and no-break spaces some formats use as spaces."""
    return re.sub(r"[\u202f\u00a0]", " ", locator.inner_text()).strip()


def rewritten(page, selector: str) -> None:
    """Until every <time> under `selector` is written in the browser's zone."""
    page.wait_for_function(f"[...document.querySelectorAll('{selector} time')].every(t => t.dataset.shown)")


def a_start() -> datetime:
    """Two days on, at 17:41 UTC: 12:41 in New York, 02:41 the next morning in Seoul."""
    day = timezone.now().astimezone(UTC) + timedelta(days=2)
    return day.replace(hour=17, minute=41, second=0, microsecond=0)


# --- 1. One clock, its zone named -------------------------------------------------------


def test_a_start_reads_the_same_in_the_room_and_on_the_draw_page(view, make_event):
    """The pre-queue's "drawn at" and the draw page's start are the same instant: the
    same text, in the browser's zone, the zone named; Korean puts 오전/오후 first."""
    page, text, lang = view
    start = a_start()
    event = make_event(name="Spring concert", opens_at=start)
    expected = shown(start, lang)

    page.goto(f"/events/{event.event_id}/")
    message = page.locator("#prequeue-message")
    message.wait_for()
    assert expected in text_of(message), (text_of(message), expected)
    shot(page, f"20-prequeue-time-{lang}")

    page.goto(f"/events/{event.event_id}/draw")
    rewritten(page, "#draw")
    moment = page.locator("#draw time")
    assert text_of(moment) == expected
    assert moment.get_attribute("datetime") == start.strftime("%Y-%m-%dT%H:%M:%SZ")
    shot(page, f"21-draw-time-{lang}")


def test_a_time_names_its_zone_without_script(browser, production_server, make_event):
    """Before (or without) the script, the server's text names the server's zone."""
    event = make_event(opens_at=a_start())
    context = browser.new_context(java_script_enabled=False, base_url=production_server)
    page = context.new_page()
    page.goto(f"/events/{event.event_id}/draw")
    local = event.opens_at.astimezone(ZoneInfo("Asia/Seoul"))
    assert page.locator("#draw time").inner_text() == f"{local:%Y-%m-%d %H:%M} KST"
    context.close()


def test_the_booking_time_is_in_the_browsers_zone(view, make_event, api):
    page, text, lang = view
    event = make_event(name="KTX Chuseok 08:00", total_seats=10)
    token = queue.queue_join(event_id=event.event_id).token
    admit_all(event.event_id)
    status, body = book(api, token, event.event_id, 1, buyerName="Kim", buyerEmail="kim@example.com")
    assert status == 200, body
    booked = Reservation.objects.get(reservation_id=body["data"]["reservationId"]).created_at
    page.goto(f"/bookings/{mail.link_token(body['data']['reservationId'])}/")
    rewritten(page, "#booked-at")
    assert text_of(page.locator("#booked-at")) == shown(booked.replace(second=0, microsecond=0), lang)


# --- 2. The event list --------------------------------------------------------------


def test_the_list_shows_seats_left_badges_starts_and_names(view, make_event, rc):
    page, text, lang = view
    start = a_start()
    selling = make_event(name="Spring concert", total_seats=10)
    rc.set(store.EventKeys(selling.event_id).seats, 7)  # three sold: the room's count
    sold_out = make_event(name="Last seat", total_seats=1)
    rc.set(store.EventKeys(sold_out.event_id).seats, 0)
    paused = make_event(name="Paused sale", status="PAUSED")
    closed = make_event(name="Closed sale", status="CLOSED")
    scheduled = make_event(name="Winter gala", opens_at=start)
    unnamed = make_event(event_id=f"summer-gala-{uuid.uuid4().hex[:4]}")

    page.goto("/")
    card = {
        e.event_id: page.locator("li.card").filter(has=page.get_by_role("heading", name=str(e)))
        for e in (selling, sold_out, paused, closed, scheduled, unnamed)
    }
    assert text["seats_left"] in text_of(card[selling.event_id])
    assert card[sold_out.event_id].locator(".tag").inner_text() == text["sold_out"]
    assert card[paused.event_id].locator(".tag").inner_text() == text["paused"]
    assert card[closed.event_id].locator(".tag").inner_text() == text["closed"]
    assert card[closed.event_id].get_by_role("link", name=text["enter"]).count() == 0
    # A sold-out sale offers no line to join: nothing to wait for (seats given back
    # by a cancellation bring the button back).
    assert card[sold_out.event_id].get_by_role("link", name=text["enter"]).count() == 0
    assert card[selling.event_id].get_by_role("link", name=text["enter"]).count() == 1
    assert card[selling.event_id].locator(".tag").count() == 0
    rewritten(page, ".events")
    assert text["starts"].format(time=shown(start, lang)) in text_of(card[scheduled.event_id])
    # An event with no name reads as words, not as its id.
    heading = card[unnamed.event_id].get_by_role("heading")
    assert text_of(heading) == "Summer gala " + unnamed.event_id.rsplit("-", 1)[1]
    shot(page, f"22-event-list-{lang}")


# --- 3. The favicon ---------------------------------------------------------------------


def test_the_favicon_is_served(page):
    page.goto("/")
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    answer = page.request.get(icon)
    assert answer.status == 200 and answer.headers["content-type"].startswith("image/svg+xml")
    answer = page.request.get("/favicon.ico", max_redirects=0)
    assert answer.status in (200, 301), answer.status
    assert page.request.get("/favicon.ico").headers["content-type"].startswith("image/svg+xml")


# --- 4. The language switcher -----------------------------------------------------------


def test_each_language_is_named_in_its_own_language(view):
    page, text, lang = view
    page.goto("/")
    assert page.locator("#language option").all_inner_texts() == ["English", "한국어"]


# --- 5. The admin at a laptop's width ---------------------------------------------------


def test_the_admins_editable_columns_fit_a_laptop(browser, production_server, console, make_event):
    """Signed in as a superuser at 1440 x 900, every input of the rate, window and cap
    columns is on the screen: inside the window, and not under the list's scroll."""
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    for n in range(3):
        make_event(
            event_id=f"ktx-2026-chuseok-{7 + n:02d}00-{uuid.uuid4().hex[:6]}",
            name=f"KTX Chuseok {7 + n:02d}:00 Seoul to Busan",
            total_seats=100_000,
            admit_per_second=1000,
            max_active_users=20_000,
            proof_of_work=50_000,
            max_places_per_address=2,
            max_seats_per_buyer=4,
        )
    context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=production_server)
    console.watch(context)
    page = context.new_page()
    page.goto("/admin/login/?next=/admin/queue_app/event/")
    page.fill("#id_username", "op")
    page.fill("#id_password", PASSWORD)
    page.locator("input[type=submit]").click()
    page.wait_for_url(re.compile(r"/admin/queue_app/event/$"))
    inputs = page.locator("#result_list input[type=number]")
    assert inputs.count() == 9  # rate, window and cap of three events
    for i in range(inputs.count()):
        box = inputs.nth(i).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 1440, (i, box)
        assert box["y"] + box["height"] <= 900, (i, box)
        # What is drawn there is the input itself, not the list's scroll hiding it.
        assert inputs.nth(i).evaluate(
            "el => { const b = el.getBoundingClientRect();"
            " return document.elementFromPoint(b.right - 2, b.top + b.height / 2) === el; }"
        ), i
    shot(page, "23-admin-events-1440")
    context.close()


# --- 6. The booking form of a signed-in account -----------------------------------------


def test_the_booking_form_starts_with_the_accounts_name_and_email(page, make_event):
    get_user_model().objects.create_user(
        "minji", "minji@example.com", PASSWORD, first_name="Minji", last_name="Kim"
    )
    event = make_event(name="Spring concert")
    page.goto(f"/accounts/login/?next=/events/{event.event_id}/")
    page.fill("#id_username", "minji")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(rf"/events/{event.event_id}/$"))
    page.locator("#position").wait_for()
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
    assert page.input_value("#id_buyer_name") == "Minji Kim"
    assert page.input_value("#id_buyer_email") == "minji@example.com"


# --- 7. The operator's first hint -------------------------------------------------------


def test_the_list_tells_operators_where_to_sign_in_until_one_exists(view):
    page, text, lang = view
    page.goto("/")
    note = page.locator("#operators")
    assert text_of(note) == text["operators"]
    assert note.get_by_role("link").get_attribute("href") == "/admin/"
    shot(page, f"24-operators-note-{lang}")
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    page.reload()
    assert page.locator("#operators").count() == 0
