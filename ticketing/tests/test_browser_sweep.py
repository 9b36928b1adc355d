"""Every page of the service, each in the state it names, in English on a desktop
(1280x800) and in Korean on a phone (390x844), served by the production server:
any console error or uncaught exception fails the page's test (the `console`
fixture). Each state is set up through the services and Redis, not waited for;
the page is then watched while its scripts run a poll or two."""

import re
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone, translation
from django.utils.text import capfirst
from django.utils.translation import gettext

from booking_app import checkout as checkout_services
from booking_app import mail
from booking_app import services as booking
from queue_app import crowd_messages, draw, tokens
from queue_app import services as queue
from queue_app.views import token_cookie
from testsupport.line import admit_all, end_windows
from ticketing import store
from ticketing.tests.browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A language, and the screen it is seen on: its browser locale (Accept-Language)
# and viewport.
SCREENS = {"en": ("en-US", 1280, 800), "ko": ("ko-KR", 390, 844)}
# What the pages ask the server while they are open, every second or two.
POLLS = re.compile(r"/api/status/poll|/live\.json")


def tr(lang: str, msgid: str, **values: object) -> str:
    """`msgid` as the page writes it in `lang` (Korean must be translated), filled in."""
    with translation.override(lang):
        text = gettext(msgid)
    assert lang == "en" or text != msgid, f"not translated to {lang}: {msgid!r}"
    return text % values if values else text


class Visit:
    """One page to sweep: the browser page, its language, and what the test needs
    to set up its state."""

    def __init__(self, page, lang: str, base: str, make_event: Callable) -> None:
        self.page, self.lang, self.base, self.make_event = page, lang, base, make_event

    def tr(self, msgid: str, **values: object) -> str:
        return tr(self.lang, msgid, **values)

    def hold(self, event_id: str, token: str) -> None:
        """The browser keeps `token` as its place, as the waiting room's script does."""
        self.page.context.add_cookies([{"name": token_cookie(event_id), "value": token, "url": self.base}])

    def sign_in(self, user) -> None:
        client = Client()
        client.force_login(user)
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        cookie = {"name": settings.SESSION_COOKIE_NAME, "value": session, "url": self.base}
        self.page.context.add_cookies([cookie])

    def room(self, event, state: str):
        """The room of `event`, in `state`: its panel, once on screen."""
        self.page.goto(f"/events/{event.event_id}/")
        return self.page.locator(f'#room[data-state="{state}"] [data-show="{state}"]')


def admitted(event) -> str:
    token = queue.queue_join(event_id=event.event_id).token
    admit_all(event.event_id)
    return token


def booked(event) -> tuple[str, str]:
    """A token that booked two seats, and its reservation id."""
    token = admitted(event)
    done = booking.booking_reserve(
        event_id=event.event_id,
        token=tokens.parse_token(token),
        seat_count=2,
        buyer_name="Kim Minji",
        buyer_email="minji@example.com",
    )
    return token, str(done.reservation_id)


def drawn_start(v: Visit, *, draw_it: bool):
    """An event whose scheduled start has just passed with one place in its
    pre-queue, held by the browser: drawn, or not yet."""
    event = v.make_event(name="KTX Seollal 07:00", opens_at=timezone.now() + timedelta(seconds=2))
    joined = queue.queue_join(event_id=event.event_id)
    assert joined.receipt is not None, "joined after the start"
    v.hold(event.event_id, joined.token)
    start = int(event.opens_at.timestamp() * 1000)
    while (now := store.now_ms(event.event_id)) < start:
        time.sleep((start - now) / 1000)
    if draw_it:
        assert draw.run(event.event_id).outcome == "DONE"
    return event, joined.receipt


# Each page: set up its state, go there; the element that proves the state, and
# the text it shows.


def event_list(v: Visit):
    v.make_event(name="KTX Chuseok 07:00")
    v.make_event(name="KTX Chuseok 08:00", status="PAUSED")
    v.page.goto("/")
    return v.page.locator("h1"), v.tr("On sale")


def room(v: Visit):
    event = v.make_event(name="KTX Chuseok 07:00")
    for _ in range(2):
        queue.queue_join(event_id=event.event_id)
    v.room(event, "waiting").wait_for()
    return v.page.locator("#position"), v.tr("You are number %(rank)s in line", rank=3)


def pre_queue(v: Visit):
    event = v.make_event(opens_at=timezone.now() + timedelta(hours=1))
    v.room(event, "prequeue").wait_for()
    v.page.wait_for_function("document.getElementById('receipt').textContent.length === 16")
    message = re.escape(v.tr("You are in. The order is drawn at %(time)s.", time="TIME"))
    return v.page.locator("#prequeue-message"), re.compile(message.replace("TIME", ".+"))


def drawing(v: Visit):
    event, _ = drawn_start(v, draw_it=False)
    v.room(event, "drawing").wait_for()
    message = v.tr("Drawing the order of everyone who came before the start…")
    return v.page.locator("#drawing-message"), message


def drawn(v: Visit):
    event, _ = drawn_start(v, draw_it=True)
    v.room(event, "waiting").wait_for()
    return v.page.locator("#drawn-position"), v.tr("Drawn position %(n)s", n=1)


def booking_form(v: Visit):
    event = v.make_event()
    v.hold(event.event_id, admitted(event))
    v.page.goto(f"/events/{event.event_id}/book/")
    v.page.locator("form.book").wait_for()
    return v.page.locator("main h2"), v.tr("Book your seats")


def sold_out(v: Visit):
    event = v.make_event(total_seats=1)
    v.hold(event.event_id, admitted(event))
    store.client().set(store.EventKeys(event.event_id).seats, 0)  # sold to others
    return v.room(event, "soldout").locator("h2"), v.tr("Sold out")


def closed(v: Visit):
    event = v.make_event(status="CLOSED")
    v.page.goto(f"/events/{event.event_id}/")
    return v.page.locator("#closed h2"), v.tr("This sale has closed.")


def expired(v: Visit):
    event = v.make_event()
    v.hold(event.event_id, admitted(event))
    end_windows(event.event_id)
    return v.room(event, "expired").locator("h2"), v.tr("Your booking window has passed")


def confirmation(v: Visit):
    event = v.make_event(name="KTX Chuseok 07:00")
    token, rid = booked(event)
    v.hold(event.event_id, token)
    v.page.goto(f"/events/{event.event_id}/reservations/{rid}/")
    assert v.page.locator("#reservation-id").inner_text() == rid
    return v.page.locator("h1"), v.tr("Reservation confirmed")


def booking_page(v: Visit):
    event = v.make_event(name="KTX Chuseok 07:00")
    _, rid = booked(event)
    v.page.goto(f"/bookings/{mail.link_token(rid)}/")
    assert v.page.locator("#reservation-id").inner_text() == rid
    return v.page.locator("#cancel-form button"), v.tr("Cancel this booking")


def checkout(v: Visit):
    event = v.make_event(name="KTX Chuseok 07:00", price=55_000, hold_seconds=600)
    _, rid = booked(event)
    v.page.goto(f"/bookings/{mail.link_token(rid)}/checkout/")
    assert v.page.locator("#amount").inner_text() == "110,000 KRW"
    return v.page.locator("h2"), v.tr("Pay for your seats")


def released(v: Visit):
    event = v.make_event(name="KTX Chuseok 07:00", price=55_000, hold_seconds=600)
    _, rid = booked(event)
    checkout_services.booking_end(reservation_id=rid)
    v.page.goto(f"/bookings/{mail.link_token(rid)}/")
    return v.page.locator("h1"), v.tr("Seats released")


def draw_page(v: Visit):
    event, receipt = drawn_start(v, draw_it=True)
    v.page.goto(f"/events/{event.event_id}/draw?receipt={receipt}")
    found = "Receipt %(receipt)s was drawn at position %(position)s of %(size)s."
    return v.page.locator("#found"), v.tr(found, receipt=receipt, position=1, size=1)


def sign_in(v: Visit):
    v.page.goto("/accounts/login/")
    return v.page.locator("h1"), v.tr("Sign in")


def sign_up(v: Visit):
    # While an event asks for proof of work, so does sign-up: its script runs too.
    v.make_event(proof_of_work=10_000)
    v.page.goto("/accounts/signup/")
    v.page.wait_for_function("!document.querySelector('form[data-proof] button').disabled", timeout=30_000)
    return v.page.locator("h1"), v.tr("Sign up")


def operator(v: Visit):
    v.sign_in(get_user_model().objects.create_superuser("op-sweep", "op@example.com", "pw-for-tests"))
    event = v.make_event(name="KTX Chuseok 07:00", admit_per_second=2)
    for _ in range(5):
        queue.queue_join(event_id=event.event_id)
    admit_all(event.event_id)
    return event


# The operator's English words: in Korean, none is left on the admin's pages.
ADMIN_ENGLISH = re.compile(
    r"\b(waiting|active|seats (left|sold)|admitted|joins refused|bookings|protections|status|live|"
    r"open|paused|closed|updated|now|max|min|minutes|refreshed|hot sale|forged token|proof of work|"
    r"events?|waiting room|admit per second|active window|total seats)\b",
    re.IGNORECASE,
)


def no_english_left(v: Visit, *texts: str) -> None:
    if v.lang != "en":
        left = [ADMIN_ENGLISH.findall(text) for text in texts]
        assert not any(left), left


def admin_events(v: Visit):
    event = operator(v)
    v.page.goto("/admin/queue_app/event/")
    row = v.page.locator("#result_list tbody tr").filter(has_text=event.name)
    row.wait_for()
    headings = [th.strip() for th in v.page.locator("#result_list thead th").all_text_contents()]
    assert capfirst(v.tr("seats left")) in headings and capfirst(v.tr("waiting")) in headings, headings
    assert v.tr("Open") in [td.strip() for td in row.locator("td").all_text_contents()]
    actions = [o.strip() for o in v.page.locator("select[name=action] option").all_text_contents()]
    assert v.tr("Hot sale: proof of work, a cap per address and per buyer") in actions, actions
    no_english_left(v, v.page.locator("body").inner_text(), *headings, *actions)
    return v.page.locator("#content h1"), v.tr("Select %s to change") % v.tr("event")


def admin_live(v: Visit):
    event = operator(v)
    v.page.goto(f"/admin/queue_app/event/{event.pk}/live/")
    v.page.locator("#live[data-ready='1']").wait_for()
    assert v.page.locator("#n-waiting").inner_text() == "3"
    labels = [dt.strip() for dt in v.page.locator("#live dt").all_text_contents()]
    assert labels[:4] == [v.tr(word) for word in ("status", "waiting", "active", "seats left")], labels
    updated = re.escape(v.tr("Updated %(time)s", time="TIME")).replace("TIME", ".+")
    assert re.fullmatch(updated, v.page.locator("#updated").inner_text()), v.page.locator(
        "#updated"
    ).inner_text()
    axes = v.page.locator("#chart-waiting text").all_text_contents()
    assert v.tr("now") in axes, axes
    charts = [
        v.page.locator(f"#chart-{name}").get_attribute("aria-label") for name in ("waiting", "admitted")
    ]
    no_english_left(
        v, v.page.locator("#live").inner_text(), v.page.locator(".breadcrumbs").inner_text(), *charts
    )
    return v.page.locator("#n-status"), v.tr("Open")


def admin_messages(v: Visit):
    event = operator(v)
    crowd_messages.event_message_post(event_id=event.event_id, text_ko="입장이 10분 늦어집니다.", text_en="")
    v.page.goto(f"/admin/queue_app/event/{event.pk}/messages/")
    headings = [th.strip() for th in v.page.locator("#history thead th").all_text_contents()]
    assert capfirst(v.tr("posted at")) in headings, headings
    no_english_left(v, v.page.locator("#content").inner_text(), v.page.locator(".breadcrumbs").inner_text())
    return v.page.locator("#content h2").first, v.tr("Shown now")


PAGES = {
    "list": event_list,
    "room": room,
    "pre-queue": pre_queue,
    "drawing": drawing,
    "drawn": drawn,
    "booking": booking_form,
    "sold-out": sold_out,
    "closed": closed,
    "expired": expired,
    "confirmation": confirmation,
    "booking-page": booking_page,
    "checkout": checkout,
    "released": released,
    "draw": draw_page,
    "sign-in": sign_in,
    "sign-up": sign_up,
    "admin-events": admin_events,
    "admin-live": admin_live,
    "admin-messages": admin_messages,
}
# The pages that ask the server every second or two while open: one more answer
# after the state is on screen, at least.
POLLING = {"room", "drawing", "drawn", "sold-out", "admin-live"}


@pytest.mark.parametrize(
    ("name", "lang"), [pytest.param(name, lang, id=f"{name}-{lang}") for name in PAGES for lang in SCREENS]
)
def test_the_page_runs_without_errors(name, lang, browser, production_server, console, make_event):
    locale, width, height = SCREENS[lang]
    context = browser.new_context(
        locale=locale, viewport={"width": width, "height": height}, base_url=production_server
    )
    console.watch(context)
    # The language switcher's choice (Django's language cookie), beside the browser's.
    context.add_cookies([{"name": settings.LANGUAGE_COOKIE_NAME, "value": lang, "url": production_server}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        shown, text = PAGES[name](Visit(page, lang, production_server, make_event))
        shown.wait_for()
        assert page.locator("html").get_attribute("lang") == lang
        if isinstance(text, re.Pattern):
            assert text.fullmatch(shown.inner_text().strip()), shown.inner_text()
        else:
            assert shown.inner_text().strip() == text
        # The page's scripts at work for a while: a poll or two, a countdown's ticks.
        if name in POLLING:
            with page.expect_response(lambda answer: POLLS.search(answer.url), timeout=10_000):
                page.wait_for_timeout(1_500)
        else:
            page.wait_for_timeout(1_500)
        assert shown.is_visible(), f"{name} left its state"
        shot(page, f"sweep-{name}-{lang}")
    finally:
        context.close()
