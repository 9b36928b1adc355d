"""Confirmed email addresses (accounts_app/confirm.py), in-process: the link's
refusals, the page that sends it, the mail, and the join it opens. The production
server with a real SMTP server: test_confirm_server.py."""

import re
import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client

from accounts_app import confirm
from accounts_app.tests.web import PASSWORD
from queue_app.tests.test_settings import _start
from testsupport.clients import Api
from testsupport.line import event_state
from ticketing import store

pytestmark = pytest.mark.django_db

CSRF = "c" * 32


@pytest.fixture(autouse=True)
def required(settings) -> None:
    settings.ACCOUNTS_REQUIRE_CONFIRMED_EMAIL = True


@pytest.fixture
def user() -> User:
    return get_user_model().objects.create_user(f"u-{uuid.uuid4().hex[:8]}", password=PASSWORD)


@pytest.fixture(autouse=True)
def _fresh_mail_counts() -> None:
    """Links are counted by account id, which a new test database issues again: an
    earlier run's counts (kept an hour) are not these accounts'."""
    store.delete_matching(store.ratelimit_key("confirmation-mail", "*"))


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    client.cookies["csrftoken"] = CSRF
    return client


def link(message: mail.EmailMessage) -> str:
    return re.search(r"http://testserver(/accounts/confirm/\S+/)", message.body).group(1)


def join(client: Client, event_id: str) -> tuple[int, dict]:
    return Api(client).join(event_id, HTTP_X_CSRFTOKEN=CSRF)


def test_an_unconfirmed_account_is_refused_a_place_on_an_account_event_and_nothing_changes(make_event, user):
    event = make_event(require_account=True)
    client = signed_in(user)
    before = event_state(event.event_id)
    status, body = join(client, event.event_id)
    assert (status, body["success"], body["error"]["code"]) == (403, False, "EMAIL_UNCONFIRMED")
    assert body["error"]["message"] == "Confirm your email address to join this event's line."
    assert event_state(event.event_id) == before

    # An event without accounts does not ask.
    assert join(client, make_event().event_id)[0] == 200


def test_the_page_sends_the_link_and_following_it_opens_the_line(make_event, user):
    event = make_event(require_account=True)
    client = signed_in(user)
    page = client.get("/accounts/confirm/")
    assert page.status_code == 200 and "Send the link" in page.text
    sent = client.post("/accounts/confirm/?next=/events/x/", {"email": "Minsu@Example.com"})
    assert sent.status_code == 302 and sent["Location"] == "/accounts/confirm/?next=/events/x/"
    assert "We sent a link to Minsu@Example.com." in client.get(sent["Location"]).text
    (message,) = mail.outbox
    assert message.to == ["Minsu@Example.com"] and message.subject == "Confirm your email address"
    assert f"Hello {user.username}," in message.body and "The link works for 3 days." in message.body

    opened = Client().get(link(message))
    assert opened.status_code == 200 and "Minsu@Example.com is confirmed" in opened.text
    user.refresh_from_db()
    assert user.email == "Minsu@Example.com"  # the address it confirmed
    assert Client().get(link(message)).status_code == 200  # opened twice: still confirmed
    assert "Your email address Minsu@Example.com is confirmed." in client.get("/accounts/confirm/").text
    assert join(client, event.event_id)[0] == 200


def test_an_expired_or_altered_link_confirms_nothing(user, monkeypatch):
    client = signed_in(user)
    client.post("/accounts/confirm/", {"email": "late@example.com"})
    path = link(mail.outbox[0])
    altered = Client().get(path[:-3] + ("A/" if path[-2] != "A" else "B/"))
    assert altered.status_code == 400 and "This link is not valid." in altered.text

    later = time.time() + confirm.LINK_MAX_AGE + 60
    monkeypatch.setattr(time, "time", lambda: later)
    expired = Client().get(path)
    assert expired.status_code == 400 and "This link has expired." in expired.text
    assert not confirm.may_hold_place(user.pk)


def test_links_are_limited_per_account(user):
    """A stranger's address, typed by a script, is not flooded: the sign-up's link
    and two more an hour."""
    client = signed_in(user)
    for _ in range(3):
        assert client.post("/accounts/confirm/", {"email": "victim@example.com"}).status_code == 302
    refused = client.post("/accounts/confirm/", {"email": "victim@example.com"})
    assert refused.status_code == 200 and "Too many links were sent for this account." in refused.text
    assert len(mail.outbox) == 3


def test_sign_up_asks_for_the_address_and_mails_the_link_in_the_persons_language():
    client = Client()
    client.cookies["django_language"] = "ko"
    fields = {"username": f"k-{uuid.uuid4().hex[:8]}", "password1": PASSWORD, "password2": PASSWORD}
    page = client.post("/accounts/signup/", fields)
    assert page.status_code == 200 and "이메일" in page.text and not mail.outbox
    answer = client.post("/accounts/signup/", {**fields, "email": "hana@example.com"})
    assert answer.status_code == 302 and answer["Location"] == "/accounts/confirm/"
    (message,) = mail.outbox
    assert message.subject == "이메일 주소를 확인해 주세요"
    assert "3일 동안" in message.body


def test_the_confirm_page_needs_a_signed_in_account():
    answer = Client().get("/accounts/confirm/")
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/?next=")


def test_without_the_option_sign_up_mails_nothing(settings):
    settings.ACCOUNTS_REQUIRE_CONFIRMED_EMAIL = False
    fields = {"username": f"n-{uuid.uuid4().hex[:8]}", "password1": PASSWORD, "password2": PASSWORD}
    answer = Client().post("/accounts/signup/", fields)
    assert answer.status_code == 302 and answer["Location"] == "/"
    assert not mail.outbox


def test_the_option_without_a_mail_server_stops_start_up():
    result = _start(ACCOUNTS_REQUIRE_CONFIRMED_EMAIL="true", EMAIL_URL="")
    assert result.returncode != 0 and "needs EMAIL_URL" in result.stderr
    result = _start(ACCOUNTS_REQUIRE_CONFIRMED_EMAIL="true", EMAIL_URL="smtp://mail.internal:25")
    assert result.returncode == 0, result.stderr
    assert _start(EMAIL_URL="smtp://mail.internal:port").returncode != 0


def test_a_mail_server_that_is_away_costs_the_person_no_account(settings, user):
    """The account is made and signed in; the page says the mail did not go, and
    sends it again later."""
    from ticketing.servers import free_port

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens there
    client = Client()
    fields = {"username": f"m-{uuid.uuid4().hex[:8]}", "password1": PASSWORD, "password2": PASSWORD}
    answer = client.post("/accounts/signup/", {**fields, "email": "away@example.com"})
    assert answer.status_code == 302 and answer["Location"] == "/accounts/confirm/"
    page = client.get("/accounts/confirm/").text
    assert "We sent a link" not in page and "Send the link" in page
    again = client.post("/accounts/confirm/", {"email": "away@example.com"})
    assert again.status_code == 200
    assert "We could not send the mail just now. Try again in a few minutes." in again.text
