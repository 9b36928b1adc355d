"""The booking's page at a phone's width (390 px), in headless Chromium: each tile's
text on as few lines as it needs, never broken letter by letter."""

import pytest

from booking_app import mail
from testsupport.booking import book
from ticketing.tests.browser import lines_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.browser
@pytest.mark.parametrize("locale", ["en-US", "ko-KR"])
def test_the_tiles_fit_their_text_at_390_px(
    browser, console, production_server, make_event, active_tokens, api, locale
):
    event = make_event(name="KTX Chuseok 08:00", total_seats=10)
    [token] = active_tokens(event, 1)
    status, body = book(
        api, token, event.event_id, 2, buyerName="Kim Jiwoo", buyerEmail="kim.jiwoo.long-address@example.com"
    )
    assert status == 200, body
    rid = body["data"]["reservationId"]
    context = browser.new_context(
        locale=locale, viewport={"width": 390, "height": 844}, base_url=production_server
    )
    console.watch(context)
    page = context.new_page()
    page.goto(f"/bookings/{mail.link_token(rid)}/")
    assert page.locator("#reservation-id").text_content() == rid
    assert lines_of(page.locator("#reservation-id")) == 1
    # A long address may take a second line, never one per few letters.
    assert lines_of(page.locator("#buyer-email")) <= 2
    assert page.locator("a[href='/']").count() >= 1
    context.close()
