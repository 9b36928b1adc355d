"""Seat caps per buyer (docs/fairness.md): an account, and a normalised email.

Postgres enforces them in the seat ledger's trigger, in the same INSERT as the
booking, so concurrent bookings of one buyer are counted one after the other
whatever Redis let through; a refused booking gives its seats and its window back.
"""

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import altcha
import pytest
import requests
from django.contrib.auth import get_user_model

from booking_app.buyers import email_key
from booking_app.models import Reservation
from queue_app import events
from queue_app import services as queue
from queue_app.models import Event
from queue_app.tokens import parse_token
from testsupport import CheckedThread
from testsupport.booking import book, seats_left
from testsupport.line import admit_all, event_state
from testsupport.line import refusals as written_refusals
from testsupport.servers import database_url_of_tests
from ticketing import store


@pytest.mark.parametrize(
    ("email", "key"),
    [
        ("Foo.Bar+seat2@GoogleMail.com", "foobar@gmail.com"),
        ("f.o.o.bar@gmail.com", "foobar@gmail.com"),
        ("  Kim@Example.COM ", "kim@example.com"),
        ("kim+x@example.com", "kim@example.com"),
        ("k.im@example.com", "k.im@example.com"),  # dots count outside Gmail
        ('"foo"@example.com', "foo@example.com"),  # quotes are invisible (RFC 5322, 3.2.4)
        ('"f\\oo"@example.com', "foo@example.com"),  # and so is a quoted pair's backslash
        ('"Foo.Bar+x"@gmail.com', "foobar@gmail.com"),
        ('"a b"@example.com', "a b@example.com"),  # no unquoted spelling: still one key
        ("kim@bücher.de", "kim@xn--bcher-kva.de"),  # IDN domains as punycode
        ("KIM@BÜCHER.DE", "kim@xn--bcher-kva.de"),
        ("kim@XN--BCHER-KVA.de", "kim@xn--bcher-kva.de"),
        ("foobar@ｇｍａｉｌ.com", "foobar@gmail.com"),  # IDNA maps full-width letters
        ("not-an-address", "not-an-address"),
        ("", ""),
    ],
)
def test_emails_are_normalised_to_one_spelling_per_mailbox(email, key):
    assert email_key(email) == key


def test_an_email_may_not_buy_past_the_cap_across_tokens(postgres, make_event, active_tokens, api):
    event = make_event(total_seats=50, max_seats_per_booking=4, max_seats_per_buyer=4)
    tokens = active_tokens(event, 3)
    assert book(api, tokens[0], event.event_id, 3, buyerEmail="Foo.Bar@gmail.com")[0] == 200
    left = seats_left(event.event_id)
    status, body = book(api, tokens[1], event.event_id, 2, buyerEmail="foobar+2@googlemail.com")
    assert (status, body["error"]["code"], body["error"]["seatsAllowed"]) == (409, "SEAT_CAP", 1)
    # Nothing kept: the seats are back on sale, and the window is back to book fewer.
    assert seats_left(event.event_id) == left
    assert queue.queue_poll(event_id=event.event_id, token=parse_token(tokens[1])).status == "ACTIVE"
    assert book(api, tokens[1], event.event_id, 1, buyerEmail="foobar+2@googlemail.com")[0] == 200
    assert (
        book(api, tokens[2], event.event_id, 1, buyerEmail="F.OOBAR@gmail.com")[1]["error"]["code"]
        == "SEAT_CAP"
    )
    # Another buyer is not affected.
    assert Event.objects.get(pk=event.pk).seats_sold == 4


def test_without_a_cap_by_email_one_email_may_buy_many(postgres, make_event, active_tokens, api):
    event = make_event(total_seats=50, max_seats_per_booking=4)
    for token in active_tokens(event, 3):
        assert book(api, token, event.event_id, 4, buyerEmail="same@example.com")[0] == 200


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:12]}", password="pw-for-tests-1")


def test_an_account_may_hold_the_most_seats_per_booking_across_bookings(postgres, make_event, client, user):
    """An account event: the cap defaults to the most per booking; a cancelled
    booking no longer counts."""
    from testsupport.clients import Api

    event = make_event(total_seats=50, max_seats_per_booking=4, require_account=True, admit_per_second=10)
    client.force_login(user)
    api = Api(client)
    first = api.token(event.event_id)
    admit_all(event.event_id)
    status, body = book(api, first, event.event_id, 3)
    assert status == 200
    assert Reservation.objects.get(reservation_id=body["data"]["reservationId"]).user == user
    second = api.token(event.event_id)  # a new place: the first one booked
    assert second != first
    admit_all(event.event_id)
    status, refused = book(api, second, event.event_id, 2)
    assert (status, refused["error"]["code"], refused["error"]["seatsAllowed"]) == (409, "SEAT_CAP", 1)
    api.call("delete", f"/api/booking/{body['data']['reservationId']}?token={first}")
    assert book(api, second, event.event_id, 4)[0] == 200


def test_an_account_event_refuses_a_booking_without_a_session(postgres, make_event, active_tokens, api):
    event = make_event(total_seats=10)
    token = active_tokens(event, 1)[0]
    event.require_account = True
    events.event_publish(event)
    left = seats_left(event.event_id)
    status, body = book(api, token, event.event_id, 1)
    assert (status, body["error"]["code"]) == (401, "ACCOUNT_REQUIRED")
    assert seats_left(event.event_id) == left


def _post(base: str, path: str, payload: dict, address: str | None = None) -> tuple[int, dict]:
    headers = {"X-Forwarded-For": address} if address else {}
    resp = requests.post(f"{base}{path}", json=payload, headers=headers, timeout=60)
    return resp.status_code, resp.json()


@pytest.mark.django_db(transaction=True)
def test_concurrent_bookings_of_one_buyer_never_pass_the_cap(postgres, gunicorn, make_event, active_tokens):
    """Twenty tokens of one email book 2 seats each at once on the production server:
    the cap (4) holds, and every refused booking's seats are back on sale."""
    event = make_event(total_seats=100, max_seats_per_booking=4, max_seats_per_buyer=4)
    tokens = active_tokens(event, 20)
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests()})
    payload = {"seatCount": 2, "eventId": event.event_id, "buyerEmail": "script@example.com"}
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda t: _post(base, "/api/booking", {**payload, "token": t}), tokens))
    codes = sorted("OK" if b["success"] else b["error"]["code"] for _, b in results)
    assert codes == ["OK"] * 2 + ["SEAT_CAP"] * 18
    assert Event.objects.get(pk=event.pk).seats_sold == 4
    assert seats_left(event.event_id) == 96


# Two mailboxes, each in the spellings a script would try (every one passes
# buyerEmail's validation): case, quotes, dots and +tags at Gmail, Google's other
# domain, full-width letters, an IDN domain as Unicode and as punycode.
SPELLINGS = {
    "foobar@gmail.com": [
        "foobar@gmail.com",
        "Foo.Bar@GMAIL.com",
        '"foo.bar"@gmail.com',
        '"foo\\.bar"@gmail.com',
        "f.o.o.b.a.r+sale@googlemail.com",
        "FOOBAR+1@GoogleMail.com",
        "foobar@ｇｍａｉｌ.com",
        '"FooBar+x"@gmail.com',
    ],
    "kim@xn--bcher-kva.de": [
        "kim@bücher.de",
        "KIM@BÜCHER.DE",
        "kim@xn--bcher-kva.de",
        '"kim"@XN--BCHER-KVA.de',
        "kim+a@bücher.de",
        "Kim+b@Bücher.DE",
    ],
}


def _hot_sale(make_event, active_tokens, n: int) -> tuple[Event, list[str]]:
    """A hot-sale event (4 seats per booking, so 4 per buyer) and `n` people in their
    window (admitted before the preset turned proof of work on)."""
    event = make_event(total_seats=100, max_seats_per_booking=4)
    tokens = active_tokens(event, n)
    event.apply_hot_sale()
    event.save()
    events.event_publish(event)
    assert event.max_seats_per_buyer == 4
    return event, tokens


def _book_at_once(base: str, event_id: str, bookings: list[tuple[str, dict]]) -> list[tuple[int, dict]]:
    """Every (token, extra fields) booking of 2 seats at once, a thread each."""
    start = threading.Barrier(len(bookings))
    answers: list = [None] * len(bookings)

    def send(i: int, token: str, extra: dict) -> None:
        start.wait(timeout=30)
        payload = {"token": token, "seatCount": 2, "eventId": event_id, **extra}
        answers[i] = _post(base, "/api/booking", payload)

    threads = [
        CheckedThread(target=send, args=(i, token, extra), name=f"booking {i}")
        for i, (token, extra) in enumerate(bookings)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


@pytest.mark.django_db(transaction=True)
def test_one_mailbox_cannot_buy_past_the_cap_in_any_spelling_nor_without_one(
    postgres, production_server, make_event, active_tokens
):
    """The issue's script on a hot-sale event, on the production server: fourteen
    bookings naming two mailboxes in fourteen spellings, and four naming no buyer,
    2 seats each, all at once. Each mailbox gets its 4 seats and no more; a booking
    without a buyer is refused, and every refused booking's seats are back on sale."""
    bookings = [{"buyerEmail": spelling} for spellings in SPELLINGS.values() for spelling in spellings]
    bookings += [{}] * 4
    event, tokens = _hot_sale(make_event, active_tokens, len(bookings))
    answers = _book_at_once(production_server, event.event_id, list(zip(tokens, bookings, strict=True)))
    bought: Counter = Counter()
    refused: Counter = Counter()
    for (status, body), extra in zip(answers, bookings, strict=True):
        if status == 200:
            bought[email_key(extra.get("buyerEmail", ""))] += body["data"]["seatCount"]
        else:
            refused[(status, body["error"]["code"], "buyerEmail" in extra)] += 1
    assert bought == {mailbox: 4 for mailbox in SPELLINGS}
    assert refused == {(409, "SEAT_CAP", True): 10, (400, "BUYER_REQUIRED", False): 4}
    confirmed = Reservation.objects.filter(event=event, status=Reservation.Status.CONFIRMED)
    assert Counter(row.buyer_key for row in confirmed for _ in range(row.seat_count)) == bought
    assert Event.objects.get(pk=event.pk).seats_sold == 8
    assert seats_left(event.event_id) == 92
    assert store.client().xlen(store.EventKeys(event.event_id).outbox) == 0


@pytest.mark.django_db(transaction=True)
def test_a_booking_without_a_buyer_on_a_capped_event_changes_nothing(
    postgres, production_server, make_event, active_tokens
):
    event, (token,) = _hot_sale(make_event, active_tokens, 1)
    before = event_state(event.event_id)
    for buyer in ({}, {"buyerEmail": ""}, {"buyerEmail": None}, {"buyerName": "Kim"}):
        payload = {"token": token, "seatCount": 1, "eventId": event.event_id, **buyer}
        status, body = _post(production_server, "/api/booking", payload)
        assert (status, body["success"], body["error"]["code"]) == (400, False, "BUYER_REQUIRED"), buyer
    assert event_state(event.event_id) == before
    assert not Reservation.objects.filter(event=event).exists()
    # Naming the buyer, the same token books.
    payload = {"token": token, "seatCount": 1, "eventId": event.event_id, "buyerEmail": "kim@example.com"}
    assert _post(production_server, "/api/booking", payload)[0] == 200


def test_a_signed_in_account_names_the_buyer(postgres, make_event, active_tokens, client, user):
    """The account is the buyer: no email needed, and the account's cap holds."""
    from testsupport.clients import Api

    event, tokens = _hot_sale(make_event, active_tokens, 2)
    client.force_login(user)
    api = Api(client)
    assert book(api, tokens[0], event.event_id, 3)[0] == 200
    status, body = book(api, tokens[1], event.event_id, 2)
    assert (status, body["error"]["code"], body["error"]["seatsAllowed"]) == (409, "SEAT_CAP", 1)


def test_the_ledger_refuses_a_booking_without_a_buyer_that_redis_let_through(
    postgres, make_event, active_tokens, api
):
    """Redis' copy of the event does not know the cap yet (published before it):
    the seat ledger's trigger refuses the row, and the seats and the window go back."""
    event, (token,) = _hot_sale(make_event, active_tokens, 1)
    store.client().hdel(store.EventKeys(event.event_id).meta, "maxPerBuyer")
    left = seats_left(event.event_id)
    status, body = book(api, token, event.event_id, 2)
    assert (status, body["error"]["code"]) == (400, "BUYER_REQUIRED")
    assert seats_left(event.event_id) == left
    assert queue.queue_poll(event_id=event.event_id, token=parse_token(token)).status == "ACTIVE"
    assert not Reservation.objects.filter(event=event, status=Reservation.Status.CONFIRMED).exists()
    assert book(api, token, event.event_id, 2, buyerEmail="kim@example.com")[0] == 200


def test_rows_written_before_the_rule_are_keyed_again(postgres, make_event):
    """The migration that brought the rule keys earlier rows as it spells them now."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("booking_app.migrations.0006_buyer_required")
    event = make_event(total_seats=10)
    written = {"buyer_email": '"Kim"@Bücher.de', "buyer_key": '"kim"@bücher.de'}  # the rule before
    row = Reservation.objects.create(event=event, token=str(uuid.uuid4()), seat_count=1, **written)
    migration.rekey(apps, None)
    row.refresh_from_db()
    assert row.buyer_key == "kim@xn--bcher-kva.de"


def _solve(base: str, event_id: str, address: str) -> str:
    data = requests.get(f"{base}/api/queue/challenge", params={"eventId": event_id}, timeout=10).json()
    challenge = altcha.Challenge.from_dict(data["data"]["challenge"])
    return altcha.Payload(challenge, altcha.solve_challenge(challenge)).to_base64()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("addresses", ["ipv4", "ipv6-rotating"])
def test_a_one_address_script_against_a_hot_sale(postgres, gunicorn, make_event, addresses):
    """The issue's script, on the production server behind a trusted proxy: one
    client address (or one IPv6 /64, a new address each request) joins 40 times,
    solving every proof of work, and books with every place it gets, under one
    email. It holds at most the cap of places, and buys at most the cap of seats."""
    event = make_event(total_seats=40, max_seats_per_booking=4, admit_per_second=100)
    event.apply_hot_sale()
    event.proof_of_work = 500  # the script solves them all: a cheap one keeps the test short
    event.save()
    events.event_publish(event)
    base, _ = gunicorn({"DATABASE_URL": database_url_of_tests(), "TRUSTED_PROXIES": "127.0.0.1"})
    n = uuid.uuid4().int
    net = f"2001:db8:{n % 65536:x}:{n // 65536 % 65536:x}"

    def address(i: int) -> str:
        return f"198.18.{n % 250}.{n // 250 % 250}" if addresses == "ipv4" else f"{net}:{i:x}::{i + 1:x}"

    joined = []
    for i in range(40):
        body = {"eventId": event.event_id, "altcha": _solve(base, event.event_id, address(i))}
        status, answer = _post(base, "/api/queue/join", body, address(i))
        assert status in (200, 429), answer
        if status == 200:
            joined.append(answer["data"]["token"])
        else:  # the cap, or the join rate limit (10 a second) first
            assert answer["error"]["code"] in ("TOO_MANY_PLACES", "RATE_LIMIT")
    assert len(joined) == event.max_places_per_address == 2
    refusals = written_refusals(event.event_id, 38)
    assert refusals.get("cap", 0) > 0 and sum(refusals.values()) == 38
    admit_all(event.event_id)
    booked = 0
    for i, token in enumerate(joined):
        payload = {
            "token": token,
            "seatCount": 4,
            "eventId": event.event_id,
            "buyerEmail": f"bot+{i}@example.com",
        }
        status, answer = _post(base, "/api/booking", payload, address(i))
        booked += answer["data"]["seatCount"] if status == 200 else 0
    # A place that booked is no longer live: the script may queue once more (its
    # other place, refused at the cap, still holds its window), but not buy more.
    time.sleep(1)  # past the rate limit's second
    body = {"eventId": event.event_id, "altcha": _solve(base, event.event_id, address(100))}
    status, answer = _post(base, "/api/queue/join", body, address(100))
    assert status == 200, answer
    admit_all(event.event_id)
    payload = {"token": answer["data"]["token"], "seatCount": 1, "eventId": event.event_id}
    status, refused = _post(base, "/api/booking", {**payload, "buyerEmail": "bot@example.com"}, address(100))
    assert (status, refused["error"]["code"]) == (409, "SEAT_CAP")
    body = {"eventId": event.event_id, "altcha": _solve(base, event.event_id, address(101))}
    assert _post(base, "/api/queue/join", body, address(101))[1]["error"]["code"] == "TOO_MANY_PLACES"
    assert booked == event.max_seats_per_buyer == 4
    assert Event.objects.get(pk=event.pk).seats_sold == 4
    assert seats_left(event.event_id) == 36
    assert store.client().xlen(store.EventKeys(event.event_id).outbox) == 0
