"""Sign-in, sign-up and sign-out pages (Django's auth), in English and Korean."""

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from accounts_app.views import SignUpForm

pytestmark = pytest.mark.django_db

PASSWORD = "queue-Seat-7781"


@pytest.fixture
def alice() -> User:
    return get_user_model().objects.create_user("alice", password=PASSWORD)


def signed_in_user(client: Client) -> str | None:
    """The username the session belongs to, as the next request sees it."""
    user = client.get(reverse("login")).wsgi_request.user
    return user.get_username() if user.is_authenticated else None


@pytest.mark.parametrize(
    ("name", "english", "korean"),
    [("login", "Sign in", "로그인"), ("signup", "Sign up", "회원가입")],
)
def test_pages_render_in_english_and_korean(client: Client, name: str, english: str, korean: str) -> None:
    page = client.get(reverse(name))
    assert page.status_code == 200
    assert f"<h1>{english}</h1>" in page.text

    client.cookies["django_language"] = "ko"
    page = client.get(reverse(name))
    assert page.status_code == 200
    assert f"<h1>{korean}</h1>" in page.text
    assert "아이디" in page.text


def test_pages_name_their_fields_for_password_managers(client: Client) -> None:
    login = client.get(reverse("login")).text
    assert 'autocomplete="username"' in login
    assert 'autocomplete="current-password"' in login
    assert '<label for="id_username">' in login
    signup = client.get(reverse("signup")).text
    assert signup.count('autocomplete="new-password"') == 2
    assert '<label for="id_password2">' in signup


def test_each_page_links_to_the_other_carrying_next(client: Client) -> None:
    login = client.get(reverse("login"), {"next": "/events/x/"}).text
    assert f'href="{reverse("signup")}?next=/events/x/"' in login
    signup = client.get(reverse("signup"), {"next": "/events/x/"}).text
    assert f'href="{reverse("login")}?next=/events/x/"' in signup
    assert 'name="next" value="/events/x/"' in signup


def test_sign_up_creates_the_user_signs_them_in_and_follows_next(client: Client) -> None:
    answer = client.post(
        reverse("signup"),
        {
            "username": "bora",
            "email": "bora@example.com",
            "password1": PASSWORD,
            "password2": PASSWORD,
            "next": "/events/x/",
        },
    )
    assert answer.status_code == 302
    assert answer["Location"] == "/events/x/"
    user = get_user_model().objects.get(username="bora")
    assert user.email == "bora@example.com"
    assert user.check_password(PASSWORD)
    assert signed_in_user(client) == "bora"


def test_sign_up_ignores_a_next_on_another_site(client: Client) -> None:
    answer = client.post(
        reverse("signup"),
        {"username": "bora", "password1": PASSWORD, "password2": PASSWORD, "next": "https://evil.example/"},
    )
    assert answer.status_code == 302
    assert answer["Location"] == reverse("event-list")


def test_sign_up_page_drops_a_next_on_another_site(client: Client) -> None:
    page = client.get(reverse("signup"), {"next": "https://evil.example/"}).text
    assert '<input type="hidden" name="next" value="">' in page
    assert f'href="{reverse("login")}"' in page


def test_sign_up_with_mismatched_passwords_says_so_and_creates_nothing(client: Client) -> None:
    client.cookies["django_language"] = "ko"
    page = client.post(
        reverse("signup"), {"username": "bora", "password1": PASSWORD, "password2": PASSWORD + "x"}
    )
    assert page.status_code == 200
    assert "비밀번호가 일치하지 않습니다." in page.text
    assert 'aria-invalid="true"' in page.text
    assert not get_user_model().objects.filter(username="bora").exists()
    assert signed_in_user(client) is None


def test_sign_up_with_a_taken_username_says_so_and_creates_nothing(client: Client, alice: User) -> None:
    page = client.post(reverse("signup"), {"username": "Alice", "password1": PASSWORD, "password2": PASSWORD})
    assert page.status_code == 200
    assert "A user with that username already exists." in page.text
    assert get_user_model().objects.count() == 1
    assert signed_in_user(client) is None


def test_sign_in_with_a_wrong_password_says_so(client: Client, alice: User) -> None:
    page = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert page.status_code == 200
    assert "Wrong username or password." in page.text
    assert signed_in_user(client) is None

    client.cookies["django_language"] = "ko"
    page = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert "아이디 또는 비밀번호가 올바르지 않습니다." in page.text


def test_sign_in_with_the_right_password_signs_in_and_follows_a_safe_next(
    client: Client, alice: User
) -> None:
    answer = client.post(
        reverse("login"), {"username": "alice", "password": PASSWORD, "next": "https://evil.example/"}
    )
    assert answer.status_code == 302
    assert answer["Location"] == reverse("event-list")
    assert signed_in_user(client) == "alice"

    answer = client.post(reverse("login"), {"username": "alice", "password": PASSWORD, "next": "/events/x/"})
    assert answer["Location"] == "/events/x/"


def test_sign_out_takes_a_post_only(client: Client, alice: User) -> None:
    client.force_login(alice)
    assert client.get(reverse("logout")).status_code == 405
    assert signed_in_user(client) == "alice"

    answer = client.post(reverse("logout"))
    assert answer.status_code == 302
    assert answer["Location"] == reverse("event-list")
    assert signed_in_user(client) is None


def test_header_offers_sign_in_then_shows_the_username(client: Client, alice: User) -> None:
    page = client.get(reverse("event-list"))
    assert page.status_code == 200
    assert f'href="{reverse("login")}?next=/"' in page.text

    client.force_login(alice)
    page = client.get(reverse("event-list"))
    assert '<span class="user">alice</span>' in page.text
    assert f'action="{reverse("logout")}" method="post"' in page.text
    assert "csrfmiddlewaretoken" in page.text


def test_sign_up_racing_another_for_the_name_says_so(client: Client, alice: User, monkeypatch) -> None:
    # The other sign-up commits between this one's check and its insert: the check passes.
    monkeypatch.setattr(SignUpForm, "clean_username", lambda form: form.cleaned_data["username"])
    page = client.post(reverse("signup"), {"username": "alice", "password1": PASSWORD, "password2": PASSWORD})
    assert page.status_code == 200
    assert "A user with that username already exists." in page.text
    assert get_user_model().objects.count() == 1


def test_sign_in_attempts_are_limited_per_client_and_minute(client, settings, db):
    """Password guessing: past the limit even the right password is refused, and
    another client is not affected."""
    from django.contrib.auth import get_user_model

    settings.RATE_LIMIT_SIGN_IN = 3
    get_user_model().objects.create_user("guessed", password="right-password-1")
    ip = f"198.51.100.{uuid.uuid4().int % 250}"
    for _ in range(3):
        resp = client.post("/accounts/login/", {"username": "guessed", "password": "wrong"}, REMOTE_ADDR=ip)
        assert resp.status_code == 200 and "_auth_user_id" not in client.session
    resp = client.post(
        "/accounts/login/", {"username": "guessed", "password": "right-password-1"}, REMOTE_ADDR=ip
    )
    assert resp.status_code == 429 and "Too many sign-in attempts" in resp.content.decode()
    assert 1 <= int(resp["Retry-After"]) <= 60
    assert "_auth_user_id" not in client.session
    other = f"203.0.113.{uuid.uuid4().int % 250}"
    resp = client.post(
        "/accounts/login/", {"username": "guessed", "password": "right-password-1"}, REMOTE_ADDR=other
    )
    assert resp.status_code == 302
