"""The whole journey in headless Chromium against the production server (gunicorn as
the Procfile starts it: the fast lane answers the page's joins and polls, whitenoise
its static files). A console error or an uncaught exception on a page fails the test
(ticketing/tests/browser.py)."""

import re

import pytest

from booking_app.models import Reservation
from queue_app import services as queue
from testsupport.line import admit_all
from ticketing import store
from ticketing.tests.browser import rank_shown, shot

# The server sees the test's data only once it is committed.
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_whole_journey(page, make_event):
    event = make_event(name="KTX Chuseok 07:00", total_seats=10, admit_per_second=2)
    for _ in range(4):
        queue.queue_join(event_id=event.event_id)

    page.goto("/")
    page.get_by_role("link", name="Enter the waiting room").first.wait_for()
    shot(page, "01-events")
    # Its static files as production serves them: collected, named by their content
    # and so cached for ever.
    css = page.locator('link[rel="stylesheet"]').get_attribute("href")
    assert re.fullmatch(r"/static/css/site\.[0-9a-f]{12}\.css", css), css
    assert "max-age=315360000" in page.request.get(css).headers["cache-control"]

    page.goto(f"/events/{event.event_id}/")
    page.wait_for_function("document.querySelector('#position').textContent.includes('5')")
    assert "You are number 5 in line" in page.locator("#position").inner_text()
    assert page.locator("#ahead").inner_text() == "4"
    assert page.locator("#seats").inner_text() == "10"
    assert page.locator("#position").get_attribute("aria-live") == "polite"
    shot(page, "02-waiting-room")

    admit_all(event.event_id)  # two of the four ahead are admitted
    page.wait_for_function("document.querySelector('#position').textContent.includes('number 3')")
    assert rank_shown(page) == 3  # the position went down
    assert page.locator(".progress").get_attribute("aria-valuenow") == "50"

    admit_all(event.event_id)
    admit_all(event.event_id)  # now it is this browser's turn
    page.wait_for_url(re.compile(r"/book/$"))
    page.locator("#countdown").wait_for()
    assert re.match(r"\d+:\d\d", page.locator("#countdown").inner_text())
    shot(page, "03-booking")

    page.select_option("#id_seat_count", "2")
    page.fill("#id_buyer_name", "Kim Minji")
    page.fill("#id_buyer_email", "minji@example.com")
    page.get_by_role("button", name="Confirm booking").click()
    page.wait_for_url(re.compile(r"/reservations/"))
    rid = page.locator("#reservation-id").inner_text()
    shot(page, "04-confirmation")
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.seat_count, row.buyer_name, row.buyer_email, row.status) == (
        2,
        "Kim Minji",
        "minji@example.com",
        "CONFIRMED",
    )
    assert int(store.client().get(store.EventKeys(event.event_id).seats)) == 8

    page.goto(f"/events/{event.event_id}/")  # back in the room: it knows we booked
    page.locator("#confirmation-link").wait_for()
    assert rid in page.locator("#confirmation-link").get_attribute("href")


def test_reload_keeps_the_place(page, make_event):
    event = make_event()
    for _ in range(2):
        queue.queue_join(event_id=event.event_id)
    page.goto(f"/events/{event.event_id}/")
    page.wait_for_function("document.querySelector('#position').textContent.includes('3')")
    token = page.evaluate(f"localStorage.getItem('queueToken:{event.event_id}')")
    queue.queue_join(event_id=event.event_id)  # someone arrives after us
    page.reload()  # F5
    page.wait_for_function("document.querySelector('#behind').textContent === '1'")
    assert rank_shown(page) == 3
    assert page.evaluate(f"localStorage.getItem('queueToken:{event.event_id}')") == token
    page.evaluate("localStorage.clear()")  # the cookie alone keeps it too
    page.reload()
    page.wait_for_function("document.querySelector('#behind').textContent === '1'")
    assert rank_shown(page) == 3


def test_an_expired_window_offers_to_rejoin(page, make_event):
    event = make_event(active_window_seconds=3)
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
    page.wait_for_url(re.compile(rf"/events/{event.event_id}/$"), timeout=15_000)  # the window ran out
    page.get_by_role("heading", name="Your booking window has passed").wait_for()
    shot(page, "05-expired")
    queue.queue_join(event_id=event.event_id)
    page.get_by_role("button", name="Join the line again").click()
    page.wait_for_function("document.querySelector('#position').textContent.includes('number 2')")


def test_sold_out(page, make_event, rc):
    event = make_event(total_seats=1)
    queue.queue_join(event_id=event.event_id)
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    rc.set(store.EventKeys(event.event_id).seats, 0)
    page.get_by_role("heading", name="Sold out").wait_for()
    shot(page, "06-sold-out")
    rc.set(store.EventKeys(event.event_id).seats, 1)  # a cancellation: back in line
    page.locator("#position").wait_for()


def test_the_last_seat_taken_while_filling_the_form(page, console, make_event, rc):
    event = make_event(total_seats=1)
    console.expect(r"status of 409 .*/book/")  # the form's answer: sold out
    page.goto(f"/events/{event.event_id}/")
    page.locator("#position").wait_for()
    admit_all(event.event_id)
    page.wait_for_url(re.compile(r"/book/$"))
    page.fill("#id_buyer_name", "Lee")
    page.fill("#id_buyer_email", "lee@example.com")
    rc.set(store.EventKeys(event.event_id).seats, 0)  # someone else was faster
    page.get_by_role("button", name="Confirm booking").click()
    page.get_by_role("heading", name="Sold out").wait_for()
    assert not Reservation.objects.exists()


def test_a_closed_event(page, make_event):
    event = make_event(status="CLOSED")
    page.goto(f"/events/{event.event_id}/")
    page.get_by_role("heading", name="This sale has closed.").wait_for()
    shot(page, "07-closed")


def test_an_api_error_is_shown_and_retried(page, console, make_event):
    event = make_event()
    console.expect(r"status of 503 .*/api/status/poll")
    failing = {"on": True}

    def poll_route(route):
        if failing["on"]:
            route.fulfill(
                status=503,
                content_type="application/json",
                body='{"success": false, "error": {"code": "REDIS_UNAVAILABLE", "message": "x"}}',
            )
        else:
            route.continue_()

    page.route("**/api/status/poll*", poll_route)
    page.goto(f"/events/{event.event_id}/")
    page.get_by_text("We could not reach the waiting room. Retrying…").wait_for()
    shot(page, "08-error")
    failing["on"] = False
    page.locator("#position").wait_for(state="visible", timeout=30_000)
    assert rank_shown(page) == 1


def test_korean_and_english(browser, production_server, console, make_event):
    event = make_event(name="KTX 추석 07:00")
    context = browser.new_context(
        locale="ko-KR", viewport={"width": 390, "height": 844}, base_url=production_server
    )
    console.watch(context)
    page = context.new_page()
    page.goto(f"/events/{event.event_id}/")
    page.wait_for_function("document.querySelector('#position').textContent.includes('1')")
    assert page.locator("html").get_attribute("lang") == "ko"
    assert "대기 순번 1번" in page.locator("#position").inner_text()
    assert page.locator('[data-show="waiting"]').get_by_text("이 화면을 닫지 마세요").is_visible()
    shot(page, "09-waiting-room-ko")
    page.select_option("#language", "en")  # the switcher
    page.wait_for_function("document.documentElement.lang === 'en'")
    page.wait_for_function("document.querySelector('#position').textContent.includes('You are number 1')")
    context.close()
