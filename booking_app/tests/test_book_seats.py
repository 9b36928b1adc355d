"""Choosing seats on the booking page of an event with a seat map, through Django's
test client (no JavaScript: the form alone, as a browser without scripts sends it):
the sections and seats listed from the seats' state, ticked seats booked (held on a
priced event), a seat someone took meanwhile named with the rest of the choice kept,
the best seats of a section, bad choices refused with nothing booked, and an event
without a map's page as it was."""

import json
import re
import time
from html.parser import HTMLParser

import pytest

from booking_app import services
from booking_app.models import Reservation
from queue_app import events, seating
from queue_app.models import Event
from queue_app.tokens import parse_token
from queue_app.views import token_cookie
from testsupport.booking import seats_left

pytestmark = pytest.mark.django_db(transaction=True)

# Row A has an aisle between its seats 3 and 4.
MAP = {
    "sections": [
        {
            "id": "R",
            "name": "R seats",
            "price": 154_000,
            "rows": [
                {"row": "A", "seats": ["1", "2", "3", None, "4", "5"]},
                {"row": "B", "count": 4, "y": 1},
            ],
        },
        {"id": "S", "name": "S seats", "price": 132_000, "rows": [{"row": "C", "count": 4, "y": 3}]},
        {"id": "GA", "name": "Floor", "price": 99_000, "places": 5},
    ]
}
FREE_MAP = {"sections": [{**section, "price": 0} for section in MAP["sections"]]}
BUYER = {"buyer_name": "Kim Minji", "buyer_email": "minji@example.com"}


@pytest.fixture
def mapped(make_event, active_tokens, client):
    """An event with a seat map (free unless told otherwise), and this client's
    browser admitted to book on it; the other people admitted, for them to take
    seats first."""

    def make(seat_map: dict = FREE_MAP, others: int = 1, **fields) -> tuple[Event, list[str]]:
        event = make_event(max_seats_per_booking=4, **fields)
        total = seating.seat_map_apply(event, seat_map)
        Event.objects.filter(pk=event.pk).update(total_seats=total)
        event.refresh_from_db()
        events.event_publish(event)
        mine, *rest = active_tokens(event, 1 + others)
        client.cookies[token_cookie(event.event_id)] = mine
        return event, rest

    return make


def priced(**fields) -> dict:
    """`mapped`'s arguments for a priced event: held 10 minutes while paid for."""
    return {"seat_map": MAP, "price": 55_000, "currency": "KRW", "hold_seconds": 600, **fields}


def page(event: Event) -> str:
    return f"/events/{event.event_id}/book/"


def take(event: Event, token: str, *seats: str) -> None:
    """Another buyer books these seats first."""
    services.booking_reserve(
        event_id=event.event_id,
        token=parse_token(token),
        seat_count=len(seats),
        seats=seats,
        buyer_email="o@x.kr",
    )


class _Form(HTMLParser):
    """The booking form's inputs as a browser sends them: each seat's checkbox and
    each section's radio, with whether it is checked or disabled."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.seats: dict[str, set[str]] = {}
        self.sections: dict[str, set[str]] = {}
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        flags = {name for name in ("checked", "disabled") if name in a}
        if tag == "input" and a.get("name") == "seats":
            self.seats[a["value"]] = flags
        if tag == "input" and a.get("name") == "section":
            self.sections[a["value"]] = flags


def checked(html: str) -> list[str]:
    return sorted(seat for seat, flags in _Form(html).seats.items() if "checked" in flags)


def disabled(html: str) -> list[str]:
    return sorted(seat for seat, flags in _Form(html).seats.items() if "disabled" in flags)


def script_config(html: str) -> dict:
    """What the page gives static/js/seat-map.js (json_script)."""
    return json.loads(re.search(r'id="seat-config"[^>]*>(.*?)</script>', html, re.S).group(1))


def alerts(html: str) -> str:
    """What the page's alerts say: a refusal, or the form's own errors."""
    found = re.findall(r'role="alert"[^>]*>(.*?)</(?:p|div)>', html, re.S)
    return " ".join(" ".join(re.sub(r"<[^>]+>", " ", text).split()) for text in found)


SHOWN = {
    "en": ["R seats", "154,000 KRW", "Row A", "Row B", "S seats", "Floor", "99,000 KRW", "5 left", "Section"],
    "ko": ["R seats", "154,000 KRW", "A열", "B열", "구역", "잔여 5석", "좌석 선점 후 결제"],
}


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_the_page_lists_the_sections_and_their_seats(client, mapped, lang):
    event, (other,) = mapped(**priced())
    take(event, other, "R-A-2")
    resp = client.get(page(event), HTTP_ACCEPT_LANGUAGE=lang)
    assert resp.status_code == 200
    html = resp.content.decode()
    for text in SHOWN[lang]:
        assert text in html, text
    form = _Form(html)
    assert list(form.sections) == ["R", "S", "GA"]
    ids = ["R-A-1", "R-A-2", "R-A-3", "R-A-4", "R-A-5", "R-B-1", "R-B-2", "R-B-3", "R-B-4"]
    assert list(form.seats) == ids + ["S-C-1", "S-C-2", "S-C-3", "S-C-4"]
    assert disabled(html) == ["R-A-2"] and checked(html) == []  # held by the other buyer
    assert ("8 left" if lang == "en" else "잔여 8석") in html  # R: 9 seats, one held
    # The map's script: its words come from the catalogue, in the page's language.
    config = script_config(html)
    assert config["most"] == 4 and config["seatsUrl"] == f"/api/events/{event.event_id}/seats"
    assert (
        config["strings"]["seat"]
        == {
            "en": "Row %(row)s, seat %(seat)s, %(price)s, %(state)s",
            "ko": "%(row)s열 %(seat)s번, %(price)s, %(state)s",
        }[lang]
    )


def test_seats_ticked_are_booked(client, mapped):
    event, _ = mapped()
    resp = client.post(page(event), {"seats": ["R-B-2", "R-B-3"], **BUYER})
    assert resp.status_code == 302 and "/reservations/" in resp.url
    row = Reservation.objects.get(event=event)
    assert (row.status, row.section, sorted(row.seats), row.seat_count) == (
        "CONFIRMED",
        "R",
        ["R-B-2", "R-B-3"],
        2,
    )
    assert "Reservation confirmed" in client.get(resp.url).content.decode()


def test_seats_ticked_on_a_priced_event_are_held_for_checkout(client, mapped):
    event, _ = mapped(**priced())
    resp = client.post(page(event), {"seats": ["S-C-1", "S-C-2"], "section": "S", **BUYER})
    assert resp.status_code == 302 and resp.url.endswith("/checkout/")
    row = Reservation.objects.get(event=event)
    assert (row.status, row.amount, sorted(row.seats)) == ("HELD", 264_000, ["S-C-1", "S-C-2"])
    assert "264,000 KRW" in client.get(resp.url).content.decode()


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_a_seat_taken_meanwhile_is_named_and_the_rest_stay_ticked(client, mapped, lang):
    event, (other,) = mapped(**priced())
    client.get(page(event))  # the page as it was shown, R-A-3 free
    take(event, other, "R-A-3")
    refused_at = int(time.time() * 1000)
    resp = client.post(
        page(event), {"seats": ["R-A-2", "R-A-3", "R-B-1"], **BUYER}, HTTP_ACCEPT_LANGUAGE=lang
    )
    assert resp.status_code == 409
    html = resp.content.decode()
    assert (
        alerts(html)
        == {
            "en": "Someone just took R-A-3; the rest of your choice is kept.",
            "ko": "방금 다른 분이 R-A-3 좌석을 가져갔습니다. 나머지 선택은 그대로 두었습니다.",
        }[lang]
    )
    assert checked(html) == ["R-A-2", "R-B-1"]
    assert "R-A-3" in disabled(html)
    # The script waits for a copy of the seats' state newer than the refusal.
    assert script_config(html)["since"] >= refused_at
    assert not Reservation.objects.filter(event=event, buyer_email=BUYER["buyer_email"]).exists()
    assert seats_left(event.event_id) == 18 - 1
    resp = client.post(page(event), {"seats": checked(html), **BUYER})
    assert resp.status_code == 302 and resp.url.endswith("/checkout/")
    assert sorted(Reservation.objects.get(event=event, buyer_email=BUYER["buyer_email"]).seats) == [
        "R-A-2",
        "R-B-1",
    ]


def test_a_choice_all_taken_asks_for_other_seats(client, mapped):
    event, (other,) = mapped()
    take(event, other, "R-A-1")
    resp = client.post(page(event), {"seats": ["R-A-1"], **BUYER})
    assert resp.status_code == 409
    assert alerts(resp.content.decode()) == "Someone just took R-A-1. Choose other seats."
    assert checked(resp.content.decode()) == []


def test_the_best_seats_of_a_section_are_picked(client, mapped):
    event, _ = mapped(others=0)
    resp = client.post(page(event), {"section": "R", "seat_count": 2, "together": "on", **BUYER})
    assert resp.status_code == 302, resp.content.decode()
    row = Reservation.objects.get(event=event)
    assert (row.section, row.seats) == ("R", ["R-A-1", "R-A-2"])  # the front row first


def test_places_of_a_section_without_seats_are_booked(client, mapped):
    event, _ = mapped(others=0)
    resp = client.post(page(event), {"section": "GA", "seat_count": 3, **BUYER})
    assert resp.status_code == 302
    row = Reservation.objects.get(event=event)
    assert (row.section, row.seats, row.seat_count) == ("GA", [], 3)


def test_no_seats_side_by_side_left_is_said(client, mapped):
    event, (a, b) = mapped(others=2)
    take(event, a, "S-C-2")
    take(event, b, "S-C-4")  # S-C-1 and S-C-3 are left, apart
    resp = client.post(page(event), {"section": "S", "seat_count": 2, "together": "on", **BUYER})
    assert resp.status_code == 409
    html = resp.content.decode()
    assert (
        alerts(html)
        == "S seats has no 2 seats side by side left. Untick “Side by side”, or choose fewer seats."
    )
    assert 'value="S" id="section-S" checked' in html  # the choice is kept to change
    assert Reservation.objects.filter(event=event).count() == 2


def test_a_sold_out_section_is_said_and_cannot_be_chosen(client, mapped):
    event, (a, b) = mapped(others=2)
    for token in (a, b):
        services.booking_reserve(
            event_id=event.event_id, token=parse_token(token), seat_count=2, section="S", buyer_email="o@x.kr"
        )
    html = client.get(page(event)).content.decode()
    assert _Form(html).sections["S"] == {"disabled"}
    resp = client.post(page(event), {"section": "S", "seat_count": 1, **BUYER})
    assert (
        resp.status_code == 409
        and alerts(resp.content.decode()) == "S seats is sold out. Choose another section."
    )


BAD = [
    ({"seats": ["R-Z-9"]}, "There is no seat R-Z-9 on this map."),
    ({"seats": ["R-A-1", "S-C-1"]}, "The seats of one booking are in one section: tick seats of one only."),
    (
        {"seats": ["R-A-1"], "section": "S"},
        "The seats ticked are in R seats, not in S seats: choose one section.",
    ),
    ({"seats": ["R-A-1", "R-A-2", "R-B-1", "R-B-2", "R-B-3"]}, "Choose at most 4 seats."),
    ({}, "Choose seats, or a section for us to pick the best seats in."),
    ({"section": "GA", "seat_count": 9}, "Select a valid choice. 9 is not one of the available choices."),
    ({"section": "XX", "seat_count": 1}, "Select a valid choice. XX is not one of the available choices."),
]


@pytest.mark.parametrize(("choice", "message"), BAD, ids=[m[:30] for _, m in BAD])
def test_a_bad_choice_is_refused_with_nothing_booked(client, mapped, choice, message):
    event, _ = mapped()
    resp = client.post(page(event), {**choice, **BUYER})
    assert resp.status_code == 200
    html = resp.content.decode()
    assert message in alerts(html)
    assert not Reservation.objects.filter(event=event).exists()
    assert seats_left(event.event_id) == 18
    # What was ticked and exists stays ticked, to be put right.
    assert checked(html) == sorted(s for s in choice.get("seats", []) if s in _Form(html).seats)


def test_a_bad_choice_is_said_in_korean(client, mapped):
    event, _ = mapped()
    resp = client.post(page(event), {**BUYER}, HTTP_ACCEPT_LANGUAGE="ko")
    assert alerts(resp.content.decode()) == "좌석을 고르거나, 좋은 자리를 골라 드릴 구역을 선택하세요."


def test_an_event_without_a_map_has_the_page_it_had(client, make_event, active_tokens):
    event = make_event(total_seats=10, max_seats_per_booking=4)
    client.cookies[token_cookie(event.event_id)] = active_tokens(event, 1)[0]
    html = client.get(page(event)).content.decode()
    names = re.findall(r'<(?:input|select)[^>]* name="(\w+)"', html)
    assert names[-4:] == ["csrfmiddlewaretoken", "seat_count", "buyer_name", "buyer_email"]
    assert "seat-config" not in html and "seat-map.js" not in html and "Section" not in html
    resp = client.post(page(event), {"seat_count": 2, **BUYER})
    assert resp.status_code == 302
    assert (Reservation.objects.get(event=event).section, seats_left(event.event_id)) == ("", 8)
