"""The support lookup (queue_app/support.py, docs/support.md): a place found by its
token, its first digits, a pre-queue receipt, an account or a buyer's email, with
its number, rank, status and history; a lookup changes nothing in Redis (an
admitted person is not claimed); a query nobody can read is told so; the admin's
page, in English and Korean, for those who may view the event."""

import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from booking_app import services as booking
from booking_app.models import Reservation
from queue_app import admission, draw, events, services, support, tokens
from queue_app.models import Event
from queue_app.tests.test_admin_ko import KO, visible
from queue_app.tokens import Token, parse_token
from testsupport.line import claim_time_passes, event_state
from ticketing.errors import DomainError

WINDOW = 180


@dataclass
class Sale:
    """An event with a claim time, mid-sale: 1 claimed (polled), 2 booked, 3 not back
    in its claim time, 4 admitted and not back either, 5 left; 6, 7, 8 waiting."""

    event: Event
    people: dict[int, Token]  # by arrival number
    reservation: booking.Booked


@pytest.fixture
def sale(make_event) -> Sale:
    event = make_event(claim_seconds=20, admit_per_second=4, max_active_users=0, active_window_seconds=WINDOW)
    people = {n: parse_token(services.queue_join(event_id=event.event_id).token) for n in range(1, 9)}
    assert services.queue_leave(event_id=event.event_id, token=people[5]).removed
    assert admission.event_admit(event.event_id).admitted == 4  # a fresh event's first tick runs
    assert services.queue_poll(event_id=event.event_id, token=people[1]).status == "ACTIVE"  # the claim
    booked = booking.booking_reserve(
        event_id=event.event_id, token=people[2], seat_count=2, buyer_email="Kim.Buyer+ktx@Example.com"
    )
    claim_time_passes(event.event_id)  # 3 and 4 did not come back
    return Sale(event, people, booked)


def only(lookup: support.Lookup) -> support.Place:
    assert len(lookup.places) == 1, lookup.places
    return lookup.places[0]


def look(event: Event, query: str) -> support.Place:
    return only(support.place_lookup(event, query))


def test_a_waiting_person_is_found_by_token_with_rank_and_no_admission(sale):
    place = look(sale.event, sale.people[7].text)
    assert (place.status, place.number, place.place, place.rank, place.waiting) == ("WAITING", 7, 7, 2, 3)
    assert place.found_by == (support.TOKEN,)
    assert (place.signed, place.of_line, place.admitted, place.admission, place.claim) == (
        True,
        True,
        False,
        None,
        None,
    )
    assert place.bookings == () and not place.booked_place


def test_a_person_who_came_back_is_active_with_the_admission_that_let_them_in(sale):
    place = look(sale.event, sale.people[1].text)
    assert (place.status, place.number, place.rank, place.admitted) == ("ACTIVE", 1, None, True)
    a = place.admission
    assert (a.first, a.last, a.admitted) == (1, 4, 4)
    # Derived: the window's end less the event's window.
    assert a.window_ends_at - a.admitted_at == timedelta(seconds=WINDOW)
    assert abs(a.admitted_at - timezone.now()) < timedelta(seconds=10)
    assert place.claim.outcome == "CLAIMED"


def test_a_person_not_back_in_their_claim_time_is_unclaimed(sale):
    place = look(sale.event, sale.people[3].text)
    assert (place.status, place.admitted, place.claim.outcome) == ("UNCLAIMED", True, "PASSED")
    assert place.claim.deadline < timezone.now()


def test_the_booked_person_is_found_by_token_and_by_their_email_with_the_reservation(sale):
    by_token = look(sale.event, sale.people[2].text)
    assert (by_token.status, by_token.number, by_token.booked_place) == ("BOOKED", 2, True)
    assert by_token.booking_mark == str(sale.reservation.reservation_id)
    (b,) = by_token.bookings
    row = Reservation.objects.get(reservation_id=sale.reservation.reservation_id)
    assert (b.reservation_id, b.status, b.seat_count, b.pk) == (
        str(row.reservation_id),
        "CONFIRMED",
        2,
        row.pk,
    )
    assert b.created_at == row.created_at
    assert by_token.claim.outcome == "CLAIMED"  # booking in time is coming back
    # The buyer's email as the caps spell it: case, the +tag.
    for typed in ("kim.buyer@example.com", "KIM.BUYER+other@EXAMPLE.COM"):
        by_email = look(sale.event, typed)
        assert (by_email.token, by_email.found_by, by_email.bookings) == (
            by_token.token,
            (support.EMAIL,),
            by_token.bookings,
        )


def test_a_person_who_left_is_left_and_was_never_admitted(sale):
    place = look(sale.event, sale.people[5].text)
    assert (place.status, place.number, place.admitted, place.rank) == ("LEFT", 5, False, None)


def test_a_token_is_found_by_its_first_digits_with_or_without_hyphens(sale):
    text = sale.people[6].text
    for typed in (text[:8], text[:13], text[:13].replace("-", ""), text[:23].upper()):
        found = support.place_lookup(sale.event, typed)
        assert text in [p.token for p in found.places], typed
        assert all(p.token.startswith(text[:8]) for p in found.places)
        place = next(p for p in found.places if p.token == text)
        assert (place.status, place.rank, place.found_by) == ("WAITING", 1, (support.PREFIX,))


def test_a_booked_token_found_by_its_digits_in_the_line_and_the_reservations_is_one_place(sale):
    place = look(sale.event, sale.people[2].text[:18])
    assert (place.status, place.found_by) == ("BOOKED", (support.PREFIX,))


def test_digits_of_another_line_find_only_what_the_reservations_know(sale):
    """A token of the line before a rebuild: its first 4 digits are another
    generation's, so the line has no such place; its reservation still shows."""
    other = tokens.mint(sale.event.event_id, 2)
    Reservation.objects.create(event=sale.event, token=Token.of(other).text, seat_count=1)
    place = look(sale.event, Token.of(other).text[:13])
    assert (place.status, place.signed, place.of_line, place.found_by) == (
        "NOT_FOUND",
        True,
        False,
        (support.PREFIX,),
    )
    assert [b.status for b in place.bookings] == ["CONFIRMED"]


def test_a_token_this_service_did_not_issue_is_no_place(sale):
    place = look(sale.event, str(uuid.uuid4()))
    assert (place.status, place.signed, place.number) == ("NOT_FOUND", False, None)


def test_many_places_sharing_the_first_digits_are_capped(make_event, monkeypatch):
    """Eight digits name a generation and 2 random bytes: on a long line many share
    them. Here every number gets the same random bytes."""
    event = make_event()
    monkeypatch.setattr(tokens, "new_nonce", lambda: b"\xab\xcd")
    joined = [services.queue_join(event_id=event.event_id).token for _ in range(support.MAX_FOUND + 3)]
    found = support.place_lookup(event, joined[0][:8])
    assert found.more and len(found.places) == support.MAX_FOUND
    assert [p.number for p in found.places] == list(range(1, support.MAX_FOUND + 1))


def test_an_account_is_found_by_username_or_email_with_its_live_place(make_event):
    event = make_event(require_account=True)
    kim = User.objects.create_user("kim-support", "kim.support@example.com", "pw-for-tests")
    lee = User.objects.create_user("lee-support", "lee.support@example.com", "pw-for-tests")
    mine = services.queue_join(event_id=event.event_id, client=services.Client(account=str(lee.pk)))
    theirs = services.queue_join(event_id=event.event_id, client=services.Client(account=str(kim.pk)))
    before = event_state(event.event_id)
    for typed in ("kim-support", "KIM-SUPPORT", "kim.support@example.com"):
        place = look(event, typed)
        assert (place.token, place.status, place.rank, place.found_by) == (
            theirs.token,
            "WAITING",
            2,
            (support.ACCOUNT,),
        )
    assert look(event, "lee-support").token == mine.token
    assert event_state(event.event_id) == before


def test_an_account_is_found_by_its_reservations_on_an_event_without_accounts(sale):
    buyer = User.objects.create_user("park-support", "park@example.com", "pw-for-tests")
    Reservation.objects.filter(reservation_id=sale.reservation.reservation_id).update(user=buyer)
    place = look(sale.event, "park-support")
    assert (place.token, place.found_by) == (sale.people[2].text, (support.ACCOUNT,))


@pytest.fixture
def scheduled(make_event) -> Event:
    return make_event(opens_at=timezone.now() + timedelta(hours=1), admit_per_second=1000)


def test_a_pre_queue_receipt_finds_its_place_before_and_after_the_draw(scheduled):
    early = [services.queue_join(event_id=scheduled.event_id) for _ in range(5)]
    person = early[3]
    before = event_state(scheduled.event_id)
    place = look(scheduled, person.receipt)
    assert event_state(scheduled.event_id) == before
    assert (place.token, place.status, place.number, place.place, place.found_by) == (
        person.token,
        "PRE_QUEUE",
        4,
        None,
        (support.RECEIPT,),
    )
    assert (place.prequeue, place.receipt, place.admitted) == (True, person.receipt, False)
    Event.objects.filter(pk=scheduled.pk).update(opens_at=timezone.now() - timedelta(milliseconds=5))
    scheduled.refresh_from_db()
    events.event_publish(scheduled)
    assert look(scheduled, person.receipt.upper()).status == "DRAWING"
    assert draw.run(scheduled.event_id).outcome == "DONE"
    before = event_state(scheduled.event_id)
    place = look(scheduled, person.receipt)
    assert event_state(scheduled.event_id) == before
    polled = services.queue_poll(event_id=scheduled.event_id, token=parse_token(person.token))
    assert (place.token, place.status, place.number) == (person.token, "WAITING", 4)
    assert place.place == place.rank == polled.draw_position == polled.rank


def test_a_receipt_of_no_place_finds_nothing(scheduled):
    services.queue_join(event_id=scheduled.event_id)
    assert support.place_lookup(scheduled, "00" * draw.RECEIPT_BYTES).places == []


def test_a_lookup_changes_nothing_and_never_claims_an_admitted_person(make_event):
    """Unlike a poll, which is the person coming back (docs/modes.md)."""
    event = make_event(claim_seconds=20, admit_per_second=1)
    token = parse_token(services.queue_join(event_id=event.event_id).token)
    services.queue_join(event_id=event.event_id)
    assert admission.event_admit(event.event_id).admitted == 1
    before = event_state(event.event_id)
    place = look(event, token.text)
    assert (place.status, place.claim.outcome) == ("ACTIVE", "PENDING")
    for typed in (token.text[:10], "nobody-by-this-name", "nobody@example.com"):
        support.place_lookup(event, typed)
    assert event_state(event.event_id) == before
    claim_time_passes(event.event_id)
    assert services.queue_poll(event_id=event.event_id, token=token).status == "UNCLAIMED"


def test_lookups_of_the_whole_sale_change_nothing(sale):
    before = event_state(sale.event.event_id)
    for token in sale.people.values():
        support.place_lookup(sale.event, token.text)
        support.place_lookup(sale.event, token.text[:9])
    support.place_lookup(sale.event, "kim.buyer@example.com")
    assert event_state(sale.event.event_id) == before


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("", "Type a token"),
        ("   ", "Type a token"),
        ("<script>", "is not a token"),
        ("kim!", "is not a token"),
        ("a" * 255, "longer than any token"),
        (None, "Type a token"),
    ],
)
def test_a_query_nobody_can_read_is_refused_with_a_reason(sale, query, said):
    before = event_state(sale.event.event_id)
    with pytest.raises(DomainError) as refused:
        support.place_lookup(sale.event, query)
    assert refused.value.code == "VALIDATION_ERROR"
    assert said in refused.value.message
    assert event_state(sale.event.event_id) == before


def test_too_few_digits_find_no_token_and_say_so(sale):
    found = support.place_lookup(sale.event, sale.people[6].text[:7])
    assert (found.places, found.query.short) == ([], True)


# --- The admin's page -------------------------------------------------------------


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("op-support", "op@example.com", "pw-for-tests"))
    return client


def url(event: Event) -> str:
    return f"/admin/queue_app/event/{event.pk}/support/"


def test_the_change_page_links_to_the_support_lookup(operator, sale):
    page = operator.get(f"/admin/queue_app/event/{sale.event.pk}/change/")
    assert f'href="{url(sale.event)}"' in page.content.decode()
    ko = visible(operator.get(f"/admin/queue_app/event/{sale.event.pk}/change/", **KO).content)
    assert "문의 조회" in ko


def test_a_pre_queue_place_is_shown_in_both_languages(operator, scheduled):
    person = services.queue_join(event_id=scheduled.event_id)
    english = visible(operator.get(url(scheduled), {"q": person.receipt}).content)
    assert f"In the scheduled start's pre-queue, receipt {person.receipt}." in english
    assert "in the pre-queue" in english and "Not yet: the pre-queue is admitted after its draw." in english
    korean = visible(operator.get(url(scheduled), {"q": person.receipt}, **KO).content)
    assert f"접수 번호 {person.receipt}" in korean
    assert not [word for word in ENGLISH if word in korean]


def test_the_page_shows_a_place_and_its_history_in_english(operator, sale):
    page = operator.get(url(sale.event), {"q": sale.people[2].text})
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-token="{sale.people[2].text}" data-status="BOOKED"' in html
    row = Reservation.objects.get(reservation_id=sale.reservation.reservation_id)
    assert f'href="/admin/booking_app/reservation/{row.pk}/change/"' in html
    text = visible(page.content)
    for said in (
        "Support lookup",
        "booked",
        "Arrival number 2",
        "Yes, with places 1–4 (4 people)",
        "derived from the window's end",
        "Yes, in time",
        f"Reservation {row.reservation_id}: Confirmed, 2 seat(s).",
    ):
        assert said in text, said


# English of the page and its histories, none of which may be left in Korean.
ENGLISH = (
    "Support lookup",
    "Look up",
    "found by",
    "status now",
    "Arrival number",
    "joined",
    "admitted",
    "came back",
    "booked",
    "Yes",
    "No",
    "Not yet",
    "waiting",
    "left",
    "turn passed",
    "Reservation",
    "derived",
    "not issued",
)


def test_the_page_speaks_korean(operator, sale):
    """Every status and history of the sale, and a token of nobody's."""
    for query in [*(token.text for token in sale.people.values()), str(uuid.uuid4())]:
        page = operator.get(url(sale.event), {"q": query}, **KO)
        assert page.status_code == 200 and b'id="support-results"' in page.content
        text = visible(page.content)
        for english in ENGLISH:
            assert english not in text, (query, english)
    text = visible(operator.get(url(sale.event), {"q": sale.people[3].text}, **KO).content)
    assert "문의 조회" in text and "도착 번호 3" in text


def test_the_page_says_what_is_wrong_with_a_query(operator, sale):
    for query, said in (
        ("<script>", "is not a token"),
        (sale.people[6].text[:6], "from 8 hex digits on"),
        ("nobody@example.com", "Nothing found"),
    ):
        page = operator.get(url(sale.event), {"q": query})
        assert page.status_code == 200
        assert said in visible(page.content), query
    ko = visible(operator.get(url(sale.event), {"q": "<script>"}, **KO).content)
    assert "is not a token" not in ko


def test_the_page_without_a_query_is_the_search_box(operator, sale):
    page = operator.get(url(sale.event))
    assert page.status_code == 200 and b'name="q"' in page.content
    assert b'id="support-results"' not in page.content and b'class="errornote"' not in page.content


def test_only_who_may_view_the_event_may_look_up(sale):
    staff = User.objects.create_user("staff-support", password="pw-for-tests", is_staff=True)
    client = Client()
    client.force_login(staff)
    query = {"q": sale.people[1].text}
    assert client.get(url(sale.event), query).status_code == 404  # without the view permission
    staff.user_permissions.add(Permission.objects.get(codename="view_event"))
    client.force_login(User.objects.get(pk=staff.pk))
    page = client.get(url(sale.event), query)
    assert page.status_code == 200 and b'data-status="ACTIVE"' in page.content
    assert Client().get(url(sale.event), query).status_code == 302  # to the admin's sign-in


def test_an_event_without_a_line_in_redis_is_said_so(operator, sale):
    events.event_wipe(sale.event.event_id)
    page = operator.get(url(sale.event), {"q": sale.people[1].text})
    assert page.status_code == 200
    assert "no line in Redis" in visible(page.content)


def test_a_notify_me_email_finds_its_place_before_and_after_the_mail(make_event, api):
    """The address a person left for a notify-me mail finds their place, while the
    request keeps the token and once the mail has gone (the token erased: rebuilt
    from the arrival number)."""
    from queue_app import notify
    from queue_app.models import NotifyRequest

    event = make_event()
    api.token(event.event_id)
    token = api.token(event.event_id)
    notify.notify_request(
        event_id=event.event_id, token=parse_token(token), email="Fan@Example.com", language="en", site="x"
    )
    found = support.place_lookup(event, "fan@example.com").places
    assert [(p.number, p.found_by) for p in found] == [(2, (support.NOTIFY,))]
    NotifyRequest.objects.filter(event=event).update(token="", status="SENT")
    found = support.place_lookup(event, "FAN@example.com").places
    assert [(p.number, p.rank) for p in found] == [(2, 2)]


def test_a_priority_lane_place_is_found_by_its_prefix_and_its_notify_email(make_event, db):
    """A lane token's first digits find it in the lane (its random bytes' top bit),
    and a notify-me address finds it once the request no longer keeps the token."""
    from queue_app import notify, presale
    from queue_app.models import NotifyRequest

    event = make_event(priority_share=30)
    (code,) = presale.codes_create(event, count=1, uses=5)
    services.queue_join(event_id=event.event_id)  # general number 1
    holder = services.queue_join(event_id=event.event_id, presale_code=code).token  # lane number 1
    found = support.place_lookup(event, holder.replace("-", "")[:12]).places
    assert [(p.token, p.lane, p.number) for p in found] == [(holder, True, 1)]
    notify.notify_request(
        event_id=event.event_id, token=parse_token(holder), email="fan@example.com", language="en", site="x"
    )
    NotifyRequest.objects.filter(event=event).update(token="", status="SENT")  # mailed: the token let go
    found = support.place_lookup(event, "fan@example.com").places
    assert [(p.token, p.lane) for p in found] == [(holder, True)]
