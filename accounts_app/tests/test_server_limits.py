"""The sign-in and sign-up limits on an app server as production runs it (gunicorn
with the Procfile's worker), with the limits' defaults: the server is told no limit
but to believe X-Forwarded-For from this machine, so that each test names the
client addresses it comes from. Counters are per address and per account, so each
test uses addresses and names of its own."""

import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model

from accounts_app.tests.web import PASSWORD, TOO_MANY_SIGN_INS, TOO_MANY_SIGN_UPS, Browser
from testsupport import CheckedThread
from testsupport.servers import collect_static, server_env, start_gunicorn, stop_gunicorn

pytestmark = pytest.mark.django_db(transaction=True)

SIGN_IN_FORMS = ["/admin/login/", "/accounts/login/"]
# What each form says to a wrong password.
WRONG = {
    "/admin/login/": "Please enter the correct username and password",
    "/accounts/login/": "Wrong username",
}


@pytest.fixture(scope="module")
def server(django_db_setup) -> Iterator[str]:
    env = server_env(TRUSTED_PROXIES="127.0.0.1")
    for name in ("RATE_LIMIT_SIGN_IN", "RATE_LIMIT_SIGN_IN_ACCOUNT", "RATE_LIMIT_SIGN_UP"):
        env.pop(name, None)  # the defaults
    collect_static()  # its pages' static files, as production serves them
    base, proc = start_gunicorn(env)
    yield base
    stop_gunicorn(proc)


def addresses(n: int) -> list[str]:
    """`n` client addresses of a test of its own (in TEST-NET-2 / TEST-NET-3)."""
    net = uuid.uuid4().int
    return [f"{198 + n % 2}.{51 if i % 2 else 18}.{net % 250}.{(net >> 8) % 250 + i}" for i in range(n)]


def own_addresses(n: int) -> list[str]:
    """`n` addresses nobody else in the session uses: IPv6 /64s of a random /32."""
    prefix = uuid.uuid4().hex
    return [f"2001:db8:{prefix[:4]}:{i:x}::1" for i in range(n)]


def superuser() -> str:
    name = f"root-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_superuser(name, password=PASSWORD)
    return name


@pytest.mark.parametrize("form", SIGN_IN_FORMS)
def test_the_11th_wrong_password_in_a_minute_from_one_client_is_refused(server: str, form: str) -> None:
    """The issue's finding: 59 wrong passwords for a superuser at /admin/login/, none
    refused. Past 10 in a minute, one client is refused even the right password."""
    name = superuser()
    (address,) = own_addresses(1)
    guesser = Browser(server, address)
    for attempt in range(10):
        answer = guesser.sign_in(form, name, f"wrong-{attempt}")
        assert answer.status == 200 and WRONG[form] in answer.text, attempt
    refused = guesser.sign_in(form, name, "wrong-10")
    assert refused.status == 429 and TOO_MANY_SIGN_INS in refused.text
    refused = guesser.sign_in(form, name, PASSWORD)
    assert refused.status == 429 and TOO_MANY_SIGN_INS in refused.text
    assert guesser.signed_in_as() is None


@pytest.mark.parametrize("form", SIGN_IN_FORMS)
def test_an_account_is_limited_whatever_the_clients_and_its_owner_still_gets_in(
    server: str, form: str
) -> None:
    """Guesses spread over many clients are counted per account; the owner's browser,
    which signed in to the account before, has a count of its own."""
    name = superuser()
    owners, *guessers = own_addresses(13)
    owner = Browser(server, owners)
    assert owner.sign_in(form, name, PASSWORD).status == 302
    owner.session.cookies.pop("sessionid")  # signed out, the browser remembered

    # The owner's sign-in was the account's first attempt of the minute: 9 more.
    for attempt, address in enumerate(guessers[:9]):
        answer = Browser(server, address).sign_in(form, name, f"wrong-{attempt}")
        assert answer.status == 200 and WRONG[form] in answer.text, attempt
    for address in guessers[9:]:
        refused = Browser(server, address).sign_in(form, name, PASSWORD)
        assert refused.status == 429 and "for this account" in refused.text

    assert owner.sign_in(form, name, PASSWORD).status == 302
    assert owner.signed_in_as() == name


def test_forty_sign_ups_from_one_address_are_refused_past_the_limit(server: str) -> None:
    """The issue's finding: 40 of 40 sign-ups from one address in 15 s. Now 10 an hour
    from one client, however many ask at once; another client is not affected."""
    (address, other) = own_addresses(2)
    tag = uuid.uuid4().hex[:6]
    answers: list = [None] * 40

    def sign_up(i: int) -> None:
        answers[i] = Browser(server, address).sign_up(f"flood-{tag}-{i}")

    threads = [CheckedThread(target=lambda k=k: [sign_up(i) for i in range(k, 40, 8)]) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    accepted = [a for a in answers if a.status == 302]
    refused = [a for a in answers if a.status == 429]
    assert (len(accepted), len(refused)) == (10, 30)
    assert all(TOO_MANY_SIGN_UPS in a.text for a in refused)
    assert get_user_model().objects.filter(username__startswith=f"flood-{tag}-").count() == 10

    assert Browser(server, other).sign_up(f"other-{tag}").status == 302
