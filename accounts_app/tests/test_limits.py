"""The limits' finer points, through Django's test Client (the production server
proves the limits themselves: test_server_limits.py)."""

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core import signing
from django.test import Client

from accounts_app import limits
from accounts_app.tests.web import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def name() -> str:
    name = f"owner-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(name, password=PASSWORD)
    return name


def address() -> str:
    return f"2001:db8:{uuid.uuid4().hex[:4]}::1"


def sign_in(client: Client, username: str, password: str, form: str = "/accounts/login/", **extra):
    return client.post(form, {"username": username, "password": password}, REMOTE_ADDR=address(), **extra)


def test_the_account_limit_says_when_it_lifts_in_the_persons_language(settings, name: str) -> None:
    settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 2
    client = Client()
    for _ in range(2):
        assert sign_in(client, name, "wrong").status_code == 200
    refused = sign_in(client, name, PASSWORD)
    assert refused.status_code == 429
    wait = int(refused["Retry-After"])
    assert 1 <= wait <= 60
    assert f"Too many sign-in attempts for this account. Try again in {wait} second" in refused.text
    assert "_auth_user_id" not in client.session

    client.cookies["django_language"] = "ko"
    refused = sign_in(client, name, PASSWORD)
    assert "이 계정의 로그인 시도가 너무 많습니다." in refused.text


def test_the_admin_says_so_too(settings, name: str) -> None:
    settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 1
    client = Client()
    assert sign_in(client, name, "wrong", "/admin/login/").status_code == 200
    refused = sign_in(client, name, PASSWORD, "/admin/login/")
    assert refused.status_code == 429
    assert "Too many sign-in attempts for this account." in refused.text


def test_only_a_browser_that_signed_in_to_the_account_counts_apart(settings, name: str) -> None:
    """The owner's browser keeps its own count; the cookie of another account, a
    tampered one, or none at all count against the account."""
    other = f"other-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(other, password=PASSWORD)
    owner, stranger = Client(), Client()
    assert sign_in(owner, name, PASSWORD).status_code == 302
    assert sign_in(stranger, other, PASSWORD).status_code == 302
    kept = owner.cookies[limits.DEVICE_COOKIE]
    assert kept["httponly"] and kept["samesite"] == "Lax"

    settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 1
    assert sign_in(Client(), name, "wrong").status_code == 200  # the account's one attempt
    assert sign_in(stranger, name, PASSWORD).status_code == 429  # its cookie is another account's
    tampered = Client()
    tampered.cookies[limits.DEVICE_COOKIE] = kept.value[:-2] + "xx"
    assert sign_in(tampered, name, PASSWORD).status_code == 429
    forged = Client()
    forged.cookies[limits.DEVICE_COOKIE] = signing.dumps([limits._account(name), "f00d"], salt="another")
    assert sign_in(forged, name, PASSWORD).status_code == 429

    del owner.cookies["sessionid"]  # signed out (Client.logout() would forget every cookie)
    assert sign_in(owner, name, PASSWORD).status_code == 302


def test_a_sign_up_remembers_the_browser_for_its_account(settings) -> None:
    client = Client()
    name = f"new-{uuid.uuid4().hex[:8]}"
    answer = client.post(
        "/accounts/signup/", {"username": name, "password1": PASSWORD, "password2": PASSWORD}
    )
    assert answer.status_code == 302
    settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 1
    assert sign_in(Client(), name, "wrong").status_code == 200
    assert sign_in(Client(), name, PASSWORD).status_code == 429
    del client.cookies["sessionid"]
    assert sign_in(client, name, PASSWORD).status_code == 302


def test_a_refused_attempt_checks_no_password(settings, name: str, monkeypatch) -> None:
    """Past a limit the password is not hashed: a flood of guesses costs the server
    a Redis count each, not a password hash."""
    settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 1
    assert sign_in(Client(), name, "wrong").status_code == 200
    checked = []
    model = get_user_model()
    monkeypatch.setattr(model, "check_password", lambda user, raw: checked.append(raw) or True)
    assert sign_in(Client(), name, PASSWORD).status_code == 429
    assert checked == []


def test_a_limit_of_zero_is_no_limit(settings, name: str) -> None:
    settings.RATE_LIMIT_SIGN_IN = settings.RATE_LIMIT_SIGN_IN_ACCOUNT = 0
    client, ip = Client(), "192.0.2.7"
    for _ in range(30):
        client.post("/accounts/login/", {"username": name, "password": "wrong"}, REMOTE_ADDR=ip)
    answer = client.post("/accounts/login/", {"username": name, "password": PASSWORD}, REMOTE_ADDR=ip)
    assert answer.status_code == 302


def sign_up(client: Client, name: str, ip: str, password2: str = PASSWORD):
    fields = {"username": name, "password1": PASSWORD, "password2": password2}
    return client.post("/accounts/signup/", fields, REMOTE_ADDR=ip)


def test_sign_ups_past_the_limit_are_refused_and_typing_mistakes_are_not_counted(settings) -> None:
    settings.RATE_LIMIT_SIGN_UP = 2
    ip, tag = address(), uuid.uuid4().hex[:8]
    for i in range(5):
        assert sign_up(Client(), f"typo-{tag}-{i}", ip, password2="mistyped").status_code == 200
    assert sign_up(Client(), f"a-{tag}", ip).status_code == 302
    assert sign_up(Client(), f"b-{tag}", ip).status_code == 302
    refused = sign_up(Client(), f"c-{tag}", ip)
    assert refused.status_code == 429
    minutes = -(-int(refused["Retry-After"]) // 60)
    assert 1 <= minutes <= 60
    assert f"Too many sign-ups from your network. Try again in {minutes} minute" in refused.text
    assert not get_user_model().objects.filter(username=f"c-{tag}").exists()

    korean = Client()
    korean.cookies["django_language"] = "ko"
    assert "이 네트워크에서 가입한 계정이 너무 많습니다." in sign_up(korean, f"d-{tag}", ip).text
    assert sign_up(Client(), f"e-{tag}", address()).status_code == 302  # another client
