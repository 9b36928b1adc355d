"""The admin's live page of an event: samples the tick records, the JSON the page
reads every second, who may see it, and the page itself in Chromium."""

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from booking_app import services as booking
from booking_app.models import Reservation
from queue_app import admission, live, services
from testsupport.booking import book
from testsupport.line import admit_all, line_token
from ticketing.tests.browser import shot


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("op-live", "op@example.com", "pw-for-tests"))
    return client


def test_the_tick_records_a_sample_per_event(make_event, api):
    event = make_event(admit_per_second=2)
    for _ in range(5):
        api.token(event.event_id)
    before = int(time.time())
    admission.events_admit()
    after = time.time()
    [sample] = live.samples(event.event_id)[-1:]
    assert (sample.waiting, sample.admitted) == (3, 2)
    assert before <= sample.second <= after  # the second of that tick


def test_samples_are_kept_thirty_minutes_and_bucketed(make_event):
    event = make_event()
    now = int(time.time())
    live.record({event.event_id: (100, 5)}, second=now - 3600)  # too old: not shown
    for ago in (25, 21, 3, 1):
        live.record({event.event_id: (50 - ago, 2)}, second=now - ago)
    series = live.series(event.event_id, event.reservations.all())
    assert series["step"] == live.BUCKET_SECONDS
    assert len(series["waiting"]) == len(series["admitted"]) == len(series["bookings"])
    assert sum(series["admitted"]) == 8  # the hour-old sample is outside the window
    assert [w for w in series["waiting"] if w is not None][-1] == 49  # the last sample of its bucket
    for _ in range(live.SAMPLES + 10):
        live.record({event.event_id: (1, 0)}, second=now)
    assert len(live.samples(event.event_id)) == live.SAMPLES


def test_the_live_json_for_operators(operator, make_event, api):
    event = make_event(total_seats=10, admit_per_second=3)
    tokens = [api.token(event.event_id) for _ in range(3)]
    admit_all(event.event_id)
    book(api, tokens[0], event.event_id, 2)
    admission.events_admit()  # (a sample for the series; in another second it admits nobody)
    api.token(event.event_id)  # after the tick: waiting, whichever second the tick fell in
    resp = operator.get(f"/admin/queue_app/event/{event.pk}/live.json")
    assert resp.status_code == 200
    data = resp.json()
    numbers = data["numbers"]
    shown = (numbers["waiting"], numbers["bookings"], numbers["seatsSold"], numbers["seatsLeft"])
    assert shown == (1, 1, 2, 8)
    assert sum(data["series"]["bookings"]) == 1
    page = operator.get(f"/admin/queue_app/event/{event.pk}/live/")
    assert page.status_code == 200 and b"chart-waiting" in page.content
    assert operator.get("/admin/queue_app/event/999999/live.json").status_code == 404
    listing = operator.get("/admin/queue_app/event/").content.decode()
    assert f"/admin/queue_app/event/{event.pk}/live/" in listing


def test_who_may_see_the_live_page(make_event, db):
    event = make_event()
    url = f"/admin/queue_app/event/{event.pk}/live.json"
    assert Client().get(url).status_code == 302  # to the admin's sign-in
    staff = User.objects.create_user("staff-live", password="pw-for-tests", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert client.get(url).status_code == 404  # staff without the view permission
    staff.user_permissions.add(Permission.objects.get(codename="view_event"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert client.get(url).status_code == 200


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_live_page_refreshes_every_second_in_chromium(browser, live_server, make_event):  # noqa: F811
    User.objects.create_superuser("op-chromium", "op@example.com", "pw-for-tests")
    event = make_event(name="KTX Chuseok 07:00", total_seats=100, admit_per_second=20)
    now = int(time.time())
    for ago in range(600, 0, -1):  # ten minutes of a sale, as the tick records them
        live.record({event.event_id: (35 + ago * 6, 20 if ago % 3 else 0)}, second=now - ago)
    services.queue_join_many(event_id=event.event_id, count=40)
    admit_all(event.event_id)
    for i in range(12):  # bookings over the same ten minutes
        booked = booking.booking_reserve(
            event_id=event.event_id, token=line_token(event.event_id, i + 1), seat_count=1 + i % 2
        )
        Reservation.objects.filter(reservation_id=booked.reservation_id).update(
            created_at=timezone.now() - timedelta(seconds=590 - i * 50)
        )
    context = browser.new_context(
        locale="en-US", viewport={"width": 1200, "height": 900}, base_url=live_server.url
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", "op-chromium")
    page.fill("#id_password", "pw-for-tests")
    page.click("input[type=submit]")
    page.goto(f"/admin/queue_app/event/{event.pk}/live/")
    page.wait_for_selector("#live[data-ready='1']")
    assert page.inner_text("#n-waiting") == "20" and page.inner_text("#n-bookings") == "12"
    assert page.get_attribute("#chart-waiting path.line", "d").count("L") > 50
    assert page.get_attribute("#chart-admitted path.bars", "d")
    services.queue_join_many(event_id=event.event_id, count=15)  # more people arrive
    page.wait_for_function("document.getElementById('n-waiting').textContent === '35'", timeout=5_000)
    shot(page, "10-admin-live")
    context.close()


def test_the_live_page_counts_the_priority_lane_apart(operator, make_event):
    """On an event with a priority lane, the live numbers say how many of those
    waiting are in it (docs/modes.md)."""
    from queue_app import presale

    event = make_event(priority_share=30)
    (code,) = presale.codes_create(event, count=1, uses=5)
    for _ in range(2):
        services.queue_join(event_id=event.event_id, presale_code=code)
    services.queue_join(event_id=event.event_id)
    numbers = operator.get(f"/admin/queue_app/event/{event.pk}/live.json").json()["numbers"]
    assert (numbers["waiting"], numbers["waitingPriority"]) == (3, 2)
    page = operator.get(f"/admin/queue_app/event/{event.pk}/live/").content.decode()
    assert 'id="n-waitingPriority"' in page
    plain = make_event()
    assert (
        'id="n-waitingPriority"'
        not in operator.get(f"/admin/queue_app/event/{plain.pk}/live/").content.decode()
    )
