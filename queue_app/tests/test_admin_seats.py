"""The admin's seat map page of an event: its sections and seats in their states as
Postgres has them, a section's price changed in Postgres and Redis together, seats
blocked and released all or none (never a held or sold one), who may change what,
and an event without a map told how to get one; in English and Korean."""

import re
import uuid
from datetime import timedelta

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from booking_app.models import Reservation
from queue_app import events, seating
from queue_app.models import Event, Seat, Section
from queue_app.tests.test_admin_ko import KO, visible
from ticketing import money, store
from ticketing.tests.browser import shot

MAP = {
    "sections": [
        {
            "id": "R",
            "name": "R seats",
            "price": 3000,
            "rows": [{"row": "A", "count": 4}, {"row": "B", "count": 2}],
        },
        {"id": "GA", "name": "Floor", "places": 5},
    ]
}


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("op-seats", "op@example.com", "pw-for-tests"))
    return client


@pytest.fixture
def mapped(make_event, settings) -> Event:
    """An event with MAP, in Postgres and Redis; priced sections need a provider."""
    settings.PAYMENTS_PROVIDER = settings.PAYMENTS_PROVIDER or "test"
    event = make_event(max_seats_per_booking=4)
    total = seating.seat_map_apply(event, MAP)
    Event.objects.filter(pk=event.pk).update(total_seats=total)
    event.refresh_from_db()
    events.event_publish(event)
    return event


def url(event: Event) -> str:
    return f"/admin/queue_app/event/{event.pk}/seats/"


def take(event: Event, seat_id: str, status: str = Reservation.Status.CONFIRMED) -> Reservation:
    """A reservation of one seat, written straight to Postgres (its trigger takes the seat)."""
    held = status == Reservation.Status.HELD
    return Reservation.objects.create(
        event=event,
        token=uuid.uuid4(),
        seat_count=1,
        section=seat_id.split("-")[0],
        seats=[seat_id],
        status=status,
        amount=3000 if held else 0,
        hold_expires_at=timezone.now() + timedelta(minutes=10) if held else None,
    )


def shown_states(page: bytes) -> dict[str, str]:
    return dict(re.findall(r'data-seat="([^"]+)" data-state="(\w+)"', page.decode()))


def messages_of(page) -> list[str]:
    return [str(m) for m in page.context["messages"]]


def redis_state(event: Event, seat_id: str) -> int:
    k = store.EventKeys(event.event_id)
    position = int(store.client().hget(k.seat_index, seat_id))
    return store.client().bitfield(k.seat_state).get("u2", f"#{position}").execute()[0]


def redis_price(event: Event, code: str) -> int:
    spec = store.client().hget(store.EventKeys(event.event_id).sections, code).decode()
    return int(spec.split(" ")[3])


def blocked() -> set[str]:
    return set(Seat.objects.filter(blocked=True).values_list("seat_id", flat=True))


def test_the_page_shows_each_seat_in_its_state(operator, mapped):
    take(mapped, "R-A-2")
    take(mapped, "R-A-4", Reservation.Status.HELD)
    seating.seats_block(mapped, ["R-A-3"])
    for language in ({}, KO):
        page = operator.get(url(mapped), **language)
        assert page.status_code == 200
        assert shown_states(page.content) == {
            "R-A-1": "free",
            "R-A-2": "sold",
            "R-A-3": "blocked",
            "R-A-4": "held",
            "R-B-1": "free",
            "R-B-2": "free",
        }
    english = visible(operator.get(url(mapped)).content)
    for said in (
        "R seats",
        "Floor",
        "3,000 KRW",
        "numbered seats",
        "unnumbered places",
        "held or sold",
        "R-A-2: sold",
    ):
        assert said in english, said
    sections = {s["section"].code: s for s in operator.get(url(mapped)).context["sections"]}
    assert (sections["R"]["section"].sold, sections["R"]["blocked"], sections["R"]["free"]) == (2, 1, 3)
    assert (sections["GA"]["section"].sold, sections["GA"]["blocked"], sections["GA"]["free"]) == (0, 0, 5)
    korean = visible(page.content)
    for said in (
        "좌석 배치도",
        "구역",
        "지정석",
        "비지정석",
        "선점 또는 판매",
        "판매 제외",
        "R-A-2: 판매됨",
        "새 가격",
        "좌석 판매 제외·재개",
    ):
        assert said in korean, said
    for english_word in (
        "Seat map",
        "Sections",
        "held or sold",
        "new price",
        "numbered seats",
        "Block or release",
    ):
        assert english_word not in korean, english_word


def test_the_change_page_links_to_the_seat_map(operator, mapped):
    page = operator.get(f"/admin/queue_app/event/{mapped.pk}/change/")
    assert f'href="{url(mapped)}"' in page.content.decode()
    assert "좌석 배치도" in visible(operator.get(f"/admin/queue_app/event/{mapped.pk}/change/", **KO).content)


def test_view_only_staff_see_the_map_but_change_nothing(mapped):
    staff = User.objects.create_user("staff-seats", password="pw-for-tests", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert client.get(url(mapped)).status_code == 404  # without the view permission
    staff.user_permissions.add(Permission.objects.get(codename="view_event"))
    client.force_login(User.objects.get(pk=staff.pk))
    page = client.get(url(mapped))
    assert page.status_code == 200 and shown_states(page.content)["R-A-1"] == "free"
    assert b'name="seats"' not in page.content and b'name="price"' not in page.content
    assert client.post(url(mapped), {"section": "R", "price": "1"}).status_code == 403
    assert client.post(url(mapped), {"ids": "R-A-1", "action": "block"}).status_code == 403
    assert Section.objects.get(event=mapped, code="R").price == 3000 and redis_price(mapped, "R") == 3000
    assert blocked() == set() and redis_state(mapped, "R-A-1") == seating.FREE
    assert Client().get(url(mapped)).status_code == 302  # to the admin's sign-in


def test_a_new_price_is_saved_and_published_and_holds_keep_their_amount(operator, mapped):
    held = take(mapped, "R-A-1", Reservation.Status.HELD)
    page = operator.post(url(mapped), {"section": "R", "price": "4500"}, follow=True)
    assert page.redirect_chain == [(url(mapped), 302)]
    assert messages_of(page) == ["R seats (R): 4,500 KRW a seat, for bookings made from now on."]
    assert Section.objects.get(event=mapped, code="R").price == 4500
    assert redis_price(mapped, "R") == 4500 and redis_price(mapped, "GA") == 0  # the event's, as applied
    held.refresh_from_db()
    assert held.amount == 3000
    assert redis_state(mapped, "R-B-1") == seating.FREE  # the states stay as they were
    floor = operator.post(url(mapped), {"section": "GA", "price": "2000"}, follow=True)
    assert floor.status_code == 200 and redis_price(mapped, "GA") == 2000 and redis_price(mapped, "R") == 4500


@pytest.mark.parametrize("price", ["-1", "abc", "", "12.5", str(money.MAX_PRICE + 1)])
def test_a_bad_price_is_refused_and_changes_nothing(operator, mapped, price):
    page = operator.post(url(mapped), {"section": "R", "price": price})
    assert page.status_code == 200
    assert messages_of(page) == ["The price was not changed: see its form below."]
    row = re.search(r'<tr data-section="R">.*?</tr>', page.content.decode(), re.S).group(0)
    assert 'class="errorlist' in row
    assert Section.objects.get(event=mapped, code="R").price == 3000 and redis_price(mapped, "R") == 3000


def test_a_price_without_a_payment_provider_is_refused(operator, mapped, settings):
    settings.PAYMENTS_PROVIDER = ""
    page = operator.post(url(mapped), {"section": "R", "price": "4000"})
    assert "PAYMENTS_PROVIDER" in page.content.decode()
    assert Section.objects.get(event=mapped, code="R").price == 3000 and redis_price(mapped, "R") == 3000


def test_a_price_redis_did_not_take_is_not_saved(operator, mapped, monkeypatch):
    def away(*args, **kwargs) -> None:
        raise redis.ConnectionError("Redis is away")

    monkeypatch.setattr(events, "event_publish", away)
    page = operator.post(url(mapped), {"section": "R", "price": "4000"}, **KO)
    assert page.status_code == 200
    assert messages_of(page) == ["Redis에 연결할 수 없어 아무것도 바꾸지 않았습니다. 다시 시도하세요."]
    assert Section.objects.get(event=mapped, code="R").price == 3000


def test_free_seats_are_blocked_then_released(operator, mapped):
    left = int(store.client().get(store.EventKeys(mapped.event_id).seats))
    page = operator.post(
        url(mapped), {"ids": "R-A-1,  R-B-2\nR-A-1", "seats": ["R-A-3"], "action": "block"}, follow=True
    )
    assert page.redirect_chain == [(url(mapped), 302)]
    assert messages_of(page) == ["3 seat(s) blocked."]
    assert blocked() == {"R-A-1", "R-A-3", "R-B-2"}
    assert [redis_state(mapped, s) for s in ("R-A-1", "R-A-2", "R-A-3", "R-B-2")] == [3, 0, 3, 3]
    assert int(store.client().get(store.EventKeys(mapped.event_id).seats)) == left - 3
    assert shown_states(page.content)["R-A-3"] == "blocked"
    again = operator.post(url(mapped), {"ids": "R-A-1 R-A-2", "action": "block"}, follow=True)
    assert messages_of(again) == ["1 seat(s) blocked, 1 already were."]
    released = operator.post(
        url(mapped), {"seats": ["R-A-1", "R-A-2", "R-A-3"], "action": "release"}, follow=True
    )
    assert messages_of(released) == ["3 seat(s) released."]
    assert blocked() == {"R-B-2"}
    assert [redis_state(mapped, s) for s in ("R-A-1", "R-A-2", "R-A-3", "R-B-2")] == [0, 0, 0, 3]
    assert int(store.client().get(store.EventKeys(mapped.event_id).seats)) == left - 1


def test_a_sold_seat_is_never_blocked_nor_the_others_asked_with_it(operator, mapped):
    take(mapped, "R-A-2")
    for language, said in (({}, "a held or sold seat cannot be blocked (R-A-2)"), (KO, "(R-A-2)")):
        page = operator.post(
            url(mapped), {"ids": "R-A-1 R-A-2", "seats": ["R-A-3"], "action": "block"}, **language
        )
        assert page.status_code == 200
        [message] = messages_of(page)
        assert said in message
    assert "선점되었거나 판매된 좌석은 판매 제외할 수 없습니다" in message
    assert blocked() == set()
    assert [redis_state(mapped, s) for s in ("R-A-1", "R-A-3")] == [seating.FREE, seating.FREE]
    # What was asked stays in the form, to be corrected.
    content = page.content.decode()
    assert "R-A-1 R-A-2</textarea>" in content
    assert re.search(r'value="R-A-3"[^>]* checked', content)


def test_a_seat_redis_holds_for_an_undecided_booking_is_named(operator, mapped):
    k = store.EventKeys(mapped.event_id)
    position = int(store.client().hget(k.seat_index, "R-B-1"))
    store.client().bitfield(k.seat_state).set(
        "u2", f"#{position}", seating.HELD
    ).execute()  # not in Postgres yet
    page = operator.post(url(mapped), {"ids": "R-B-1 R-B-2", "action": "block"}, follow=True)
    assert messages_of(page) == [
        "2 seat(s) blocked.",
        "Redis left these as they were, held there by a booking not yet decided; "
        "try them again once it is: R-B-1",
    ]
    assert blocked() == {"R-B-1", "R-B-2"}
    assert [redis_state(mapped, s) for s in ("R-B-1", "R-B-2")] == [seating.HELD, seating.BLOCKED]


def test_an_unknown_seat_is_named_and_nothing_changes(operator, mapped):
    page = operator.post(url(mapped), {"ids": "R-A-1, R-Z-9", "action": "block"})
    assert messages_of(page) == ["Nothing changed: the map has no seat R-Z-9."]
    assert blocked() == set() and redis_state(mapped, "R-A-1") == seating.FREE
    nothing = operator.post(url(mapped), {"ids": " , ", "action": "block"})
    assert "Name the seats: by id in the box, or ticked on the map." in nothing.content.decode()


def test_a_block_redis_did_not_take_is_not_saved(operator, mapped, monkeypatch):
    def away(*args, **kwargs) -> None:
        raise redis.ConnectionError("Redis is away")

    monkeypatch.setattr(store, "run", away)
    page = operator.post(url(mapped), {"ids": "R-A-1", "action": "block"})
    assert page.status_code == 200
    assert messages_of(page) == ["Redis could not be reached, so nothing changed; try again."]
    assert blocked() == set()


def test_changes_need_the_csrf_token(mapped):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("op-csrf", "op@example.com", "pw-for-tests"))
    assert client.post(url(mapped), {"ids": "R-A-1", "action": "block"}).status_code == 403
    assert client.post(url(mapped), {"section": "R", "price": "1"}).status_code == 403
    assert blocked() == set() and Section.objects.get(event=mapped, code="R").price == 3000
    page = client.get(url(mapped)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    done = client.post(url(mapped), {"ids": "R-A-1", "action": "block", "csrfmiddlewaretoken": token})
    assert done.status_code == 302 and blocked() == {"R-A-1"}


def test_an_event_without_a_map_is_told_how_to_get_one(operator, make_event):
    event = make_event(total_seats=40)
    page = operator.get(url(event))
    assert page.status_code == 200
    text = visible(page.content)
    assert "This event has no seat map: its 40 seats are one section of unnumbered places." in text
    assert f"manage.py init_event {event.event_id} --seat-map FILE" in text
    assert "docs/seat-map.schema.json" in text
    korean = visible(operator.get(url(event), **KO).content)
    assert "좌석 배치도가 없습니다" in korean and "docs/seat-map.schema.json" in korean
    assert operator.get("/admin/queue_app/event/999999/seats/").status_code == 404


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_seats_ticked_on_the_map_are_blocked_in_chromium(browser, live_server, make_event, settings):
    settings.PAYMENTS_PROVIDER = settings.PAYMENTS_PROVIDER or "test"
    User.objects.create_superuser("op-seats-chromium", "op@example.com", "pw-for-tests")
    event = make_event(name="A small concert hall", max_seats_per_booking=4)
    total = seating.seat_map_apply(
        event, seating.seat_map_read(str(seating.SCHEMA_PATH.parent / "examples" / "concert-hall.json"))
    )
    Event.objects.filter(pk=event.pk).update(total_seats=total)
    event.refresh_from_db()
    events.event_publish(event)
    take(event, "R-A-10")
    take(event, "R-A-11", Reservation.Status.HELD)
    seating.seats_block(event, ["BAL-1-1", "BAL-1-2"])
    context = browser.new_context(
        locale="en-US",
        viewport={"width": 1280, "height": 900},
        base_url=live_server.url,
        java_script_enabled=False,
    )
    page = context.new_page()
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", "op-seats-chromium")
    page.fill("#id_password", "pw-for-tests")
    page.click("input[type=submit]")
    page.goto(url(event))
    page.click('label[data-seat="S-F-3"]')  # the seat drawn, not a list of ids
    page.click('label[data-seat="S-F-4"]')
    shot(page, "admin-seat-map")
    page.click('button[value="block"]')
    assert page.inner_text(".messagelist") == "2 seat(s) blocked."
    assert page.get_attribute('label[data-seat="S-F-3"]', "data-state") == "blocked"
    assert blocked() == {"BAL-1-1", "BAL-1-2", "S-F-3", "S-F-4"}
    context.close()
