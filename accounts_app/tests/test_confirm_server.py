"""ACCOUNTS_REQUIRE_CONFIRMED_EMAIL on an app server as production runs it: the
confirmation link goes out through Django's SMTP backend to a real SMTP server
(tests/mailbox.py), and is followed from the mail."""

import re
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from accounts_app.tests.web import PASSWORD, Browser
from testsupport.mail import Mailbox
from testsupport.servers import collect_static, server_env, start_gunicorn, stop_gunicorn
from ticketing.tests.browser import shot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def server(django_db_setup, mailbox: Mailbox) -> Iterator[str]:
    env = server_env(
        ACCOUNTS_REQUIRE_CONFIRMED_EMAIL="true", EMAIL_URL=mailbox.url, TRUSTED_PROXIES="127.0.0.1"
    )
    collect_static()
    base, proc = start_gunicorn(env)
    yield base
    stop_gunicorn(proc)


def link_in(mailbox: Mailbox, address: str) -> str:
    """The path of the confirmation link mailed to `address`."""
    body = mailbox.wait_for(address).get_body(("plain",)).get_content()
    found = re.search(r"https?://\S+/accounts/confirm/\S+/", body)
    assert found, body
    return urlsplit(found.group(0)).path


def test_an_account_holds_a_place_on_an_account_event_once_its_address_is_confirmed(
    server: str, mailbox: Mailbox, make_event
) -> None:
    event = make_event(require_account=True)
    tag = uuid.uuid4().hex[:8]
    person = Browser(server, "192.0.2.31")
    assert "This field is required." in person.sign_up(f"jiwoo-{tag}").text  # an address to confirm
    room = f"/events/{event.event_id}/"
    signed_up = person.sign_up(f"jiwoo-{tag}", email=f"jiwoo-{tag}@example.com", next=room)
    assert signed_up.status == 302
    assert signed_up.location == f"/accounts/confirm/?next={room}"
    assert f"We sent a link to jiwoo-{tag}@example.com." in person.get(signed_up.location).text

    status, body = person.join(event.event_id)
    assert (status, body["error"]["code"]) == (403, "EMAIL_UNCONFIRMED")
    assert '"mustConfirm": true' in person.get(room).text  # the page says so

    # The link works wherever the mail is read: no session needed.
    opened = Browser(server, "192.0.2.32").get(link_in(mailbox, f"jiwoo-{tag}@example.com"))
    assert opened.status == 200 and f"Your email address jiwoo-{tag}@example.com is confirmed." in opened.text

    status, body = person.join(event.event_id)
    assert status == 200, body
    assert '"mustConfirm": false' in person.get(room).text


def test_one_mailbox_confirms_one_account(server: str, mailbox: Mailbox, make_event) -> None:
    """Scripted accounts on one mailbox: its spellings (case, +tags) are one mailbox."""
    event = make_event(require_account=True)
    tag = uuid.uuid4().hex[:8]
    first, second = Browser(server, "192.0.2.33"), Browser(server, "192.0.2.34")
    assert first.sign_up(f"a-{tag}", email=f"box-{tag}@example.com").status == 302
    assert second.sign_up(f"b-{tag}", email=f"Box-{tag}+2@Example.com").status == 302
    assert Browser(server, "192.0.2.35").get(link_in(mailbox, f"box-{tag}@example.com")).status == 200

    refused = Browser(server, "192.0.2.35").get(link_in(mailbox, f"Box-{tag}+2@Example.com"))
    assert refused.status == 400 and "already confirms another account" in refused.text
    assert first.join(event.event_id)[0] == 200
    status, body = second.join(event.event_id)
    assert (status, body["error"]["code"]) == (403, "EMAIL_UNCONFIRMED")


@pytest.mark.browser
def test_the_waiting_room_tells_an_unconfirmed_account_to_confirm(
    browser,
    console,
    server,
    mailbox,
    make_event,  # noqa: F811
):
    """In headless Chromium: sign up, be told on the event's page to confirm, follow
    the link from the mail, and join."""
    event = make_event(require_account=True, name="KTX Chuseok 08:00")
    context = browser.new_context(locale="en-US", viewport={"width": 390, "height": 844}, base_url=server)
    console.watch(context)
    page = context.new_page()
    page.set_default_timeout(20_000)
    tag = uuid.uuid4().hex[:8]
    page.goto(f"/accounts/signup/?next=/events/{event.event_id}/")
    page.fill("#id_username", f"seoyeon-{tag}")
    page.fill("#id_email", f"seoyeon-{tag}@example.com")
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.get_by_role("button", name="Sign up").click()
    page.get_by_text(f"We sent a link to seoyeon-{tag}@example.com.").wait_for()
    page.get_by_role("link", name="Continue").click()

    page.get_by_role("heading", name="Confirm your email address to join this line.").wait_for()
    link = page.locator("#signin-link")
    assert link.get_attribute("href") == f"/accounts/confirm/?next=/events/{event.event_id}/"
    shot(page, "confirm-email")

    page.goto(link_in(mailbox, f"seoyeon-{tag}@example.com"))
    page.get_by_text("is confirmed. You can join events that need an account.").wait_for()
    page.goto(f"/events/{event.event_id}/")
    page.wait_for_function("document.querySelector('#position').textContent.includes('number 1')")
    context.close()
