"""Notify me in Chromium against the production server: the email form, the signed
link back to a place, and the alert at admission, whose notification permission the
browser is asked for only once the person presses "Alert me" (granted or denied
through the browser context). Any console error fails the test."""

import re

import pytest

from queue_app import notify
from queue_app import services as queue
from queue_app.models import NotifyRequest
from testsupport.line import admit_all
from ticketing.tests.browser import opened, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What the page asks of the browser, counted where the next page can read it too
# (sessionStorage outlives the move to the booking page): permission requests,
# notifications shown, tones played.
WATCH = """
(() => {
  const count = (name, value) => {
    const seen = JSON.parse(sessionStorage.getItem("watched:" + name) || "[]");
    seen.push(value);
    sessionStorage.setItem("watched:" + name, JSON.stringify(seen));
  };
  if (window.Notification) {
    const Original = window.Notification;
    const ask = Original.requestPermission.bind(Original);
    Original.requestPermission = (...args) => { count("asked", true); return ask(...args); };
    window.Notification = class extends Original {
      constructor(title, options) { count("shown", title); super(title, options); }
    };
  }
  const start = OscillatorNode.prototype.start;
  OscillatorNode.prototype.start = function (...args) {
    count("tones", true);
    return start.apply(this, args);
  };
})();
"""

TEXT = {
    "en": {
        "form": "Email me when I'm near the front",
        "send": "Email me",
        "asked": "We will email {email} when your turn is near.",
        "alert": "Alert me when it's my turn",
        "on": "This page will show a notification and play a sound when it's your turn.",
        "sound": "Notifications are blocked in this browser: this page will play a sound when it's your "
        "turn.",
        "turn": "It's your turn!",
        "bad": "This link could not bring back your place",
    },
    "ko": {
        "form": "차례가 가까워지면 이메일로 알려 주세요",
        "send": "이메일 받기",
        "asked": "차례가 가까워지면 {email}(으)로 메일을 보내 드립니다.",
        "alert": "차례가 되면 알림 받기",
        "on": "차례가 되면 이 페이지가 알림을 띄우고 소리를 냅니다.",
        "sound": "이 브라우저에서는 알림이 차단되어 있습니다. 차례가 되면 이 페이지가 소리를 냅니다.",
        "turn": "차례가 되었습니다!",
        "bad": "이 링크로는 자리를 되찾을 수 없습니다",
    },
}


def watched(page, name: str) -> list:
    return page.evaluate(f"JSON.parse(sessionStorage.getItem('watched:{name}') || '[]')")


def waiting(page, event_id: str) -> None:
    page.goto(f"/events/{event_id}/")
    page.wait_for_function("document.querySelector('#position').textContent.match(/\\d/)")


@pytest.fixture(params=["en", "ko"])
def lang(request) -> str:
    return request.param


@pytest.mark.parametrize("granted", [True, False], ids=["granted", "denied"])
def test_the_alert_is_asked_for_only_after_the_press_and_sounds_at_admission(
    browser, production_server, console, make_event, lang, granted
):
    text = TEXT[lang]
    event = make_event(name="Seoul Phil")
    options = {"permissions": ["notifications"]} if granted else {}
    with opened(browser, console, production_server, lang, **options) as page:
        page.context.add_init_script(WATCH)
        waiting(page, event.event_id)
        button = page.get_by_role("button", name=text["alert"])
        assert button.is_visible()
        page.wait_for_timeout(1500)  # a poll or two: still nothing asked of the browser
        assert watched(page, "asked") == [] and page.locator("#alert-status").inner_text() == ""

        button.click()
        page.locator("#alert-status").get_by_text(text["on"] if granted else text["sound"]).wait_for()
        # Denied (the browser's default answer here), the prompt was asked, once, on the
        # press; granted beforehand, there is nothing to ask.
        assert watched(page, "asked") == ([] if granted else [True])
        shot(page, f"notify-alert-{'granted' if granted else 'denied'}-{lang}")

        admit_all(event.event_id)
        page.wait_for_url(re.compile(r"/book/$"))
        assert watched(page, "shown") == ([text["turn"]] if granted else [])
        assert len(watched(page, "tones")) == 2  # the two beeps, either way


def test_nothing_is_asked_or_played_for_a_person_who_did_not_ask(
    browser, production_server, console, make_event
):
    event = make_event()
    with opened(browser, console, production_server, permissions=["notifications"]) as page:
        page.context.add_init_script(WATCH)
        waiting(page, event.event_id)
        admit_all(event.event_id)
        page.wait_for_url(re.compile(r"/book/$"))
        assert (watched(page, "asked"), watched(page, "shown"), watched(page, "tones")) == ([], [], [])


def test_the_email_form_asks_for_the_mail_in_the_pages_language(
    browser, production_server, console, make_event, lang
):
    text = TEXT[lang]
    event = make_event()
    email = f"minji-{lang}@example.com"
    with opened(browser, console, production_server, lang) as page:
        waiting(page, event.event_id)
        page.get_by_label(text["form"]).fill(email)
        page.get_by_role("button", name=text["send"], exact=True).click()
        page.locator("#notify-status").get_by_text(text["asked"].format(email=email)).wait_for()
        shot(page, f"notify-email-{lang}")
    row = NotifyRequest.objects.get(event=event)
    assert (row.email, row.language, row.status) == (email, lang, "PENDING")


def test_the_mails_link_brings_the_place_back_to_another_browser(
    browser, production_server, console, make_event
):
    """The link opened where the place was not kept (another browser): the page keeps
    its token and shows its place, and takes the link off the address bar."""
    event = make_event()
    queue.queue_join(event_id=event.event_id)
    token = queue.queue_join(event_id=event.event_id).token
    link = f"/events/{event.event_id}/?place={notify.link_token(event.event_id, token)}"
    with opened(browser, console, production_server) as page:
        page.goto(link)
        page.wait_for_function("document.querySelector('#position').textContent.includes('2')")
        assert page.evaluate(f"localStorage.getItem('queueToken:{event.event_id}')") == token
        assert page.url.endswith(f"/events/{event.event_id}/")
        assert page.locator("#place-link").is_hidden()


def test_a_bad_link_is_said_so_and_the_page_goes_on(browser, production_server, console, make_event, lang):
    """A link that does not verify (tampered, too old) is said so; the page takes a
    place as any first visit does."""
    event = make_event()
    with opened(browser, console, production_server, lang) as page:
        page.goto(f"/events/{event.event_id}/?place=not-a-signed-link")
        page.locator("#place-link").get_by_text(TEXT[lang]["bad"]).wait_for()
        page.wait_for_function("document.querySelector('#position').textContent.match(/\\d/)")
        assert "place=" not in page.url
