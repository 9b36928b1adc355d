import uuid

from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings

from booking_app import reconcile, services
from booking_app.models import Reservation
from booking_app.selectors import seats_sold
from testsupport.booking import book, seats_left
from testsupport.line import admit_all, unknown_token
from ticketing import store


def cancel(api, rid: str, token: str) -> tuple[int, dict]:
    return api.call("delete", f"/api/booking/{rid}?token={token}")


def test_cancel_returns_the_seats(api, make_event, active_tokens):
    event = make_event(total_seats=5)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 3)[1]["data"]["reservationId"]
    status, body = cancel(api, rid, token)
    assert status == 200
    assert body["data"] == {"reservationId": rid, "status": "CANCELLED", "seatCount": 3}
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.status, row.cancelled_at is not None, row.seats_returned_at is not None) == (
        "CANCELLED",
        True,
        True,
    )
    assert seats_left(event.event_id) == 5
    assert seats_sold(event.event_id) == 0
    assert api.poll(token, event.event_id)[1]["data"]["status"] == "EXPIRED"


def test_cancel_twice_returns_the_seats_once(api, make_event, active_tokens):
    event = make_event(total_seats=5)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    assert cancel(api, rid, token)[0] == 200
    status, body = cancel(api, rid, token)
    assert (status, body["error"]["code"]) == (409, "ALREADY_CANCELLED")
    assert reconcile.booking_reconcile(event.event_id).consistent
    assert seats_left(event.event_id) == 5


def test_cancel_needs_the_token_that_booked(api, make_event, active_tokens, snapshot):
    event = make_event(total_seats=5)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    before = snapshot(event.event_id)
    status, body = cancel(api, rid, unknown_token(event.event_id))
    assert (status, body["error"]["code"]) == (404, "RESERVATION_NOT_FOUND")
    assert cancel(api, str(uuid.uuid4()), token)[1]["error"]["code"] == "RESERVATION_NOT_FOUND"
    assert cancel(api, "nope", token)[1]["error"]["code"] == "VALIDATION_ERROR"
    assert api.call("delete", f"/api/booking/{rid}")[1]["error"]["code"] == "MISSING_TOKEN"
    assert snapshot(event.event_id) == before
    assert Reservation.objects.get(reservation_id=rid).status == "CONFIRMED"


def test_after_cancelling_the_person_may_queue_and_book_again(api, make_event, active_tokens):
    event = make_event(total_seats=5)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    cancel(api, rid, token)
    again = api.rejoin(token, event.event_id)[1]["data"]
    assert (again["status"], again["rejoined"]) == ("WAITING", False)  # a new token, at the back
    admit_all(event.event_id)
    status, body = book(api, again["token"], event.event_id, 4)
    assert status == 200, body
    assert seats_left(event.event_id) == 1
    assert Reservation.objects.filter(event=event, status="CONFIRMED").count() == 1


def test_a_cancel_during_a_redis_outage_is_finished_by_reconcile(api, make_event, active_tokens):
    event = make_event(total_seats=5)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    nowhere = {"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=nowhere):
        services.booking_cancel(reservation_id=uuid.UUID(rid))
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.status, row.seats_returned_at) == ("CANCELLED", None)
    assert seats_left(event.event_id) == 3  # missing seats: undersold, never oversold
    report = reconcile.booking_reconcile(event.event_id)
    assert report.consistent
    assert seats_left(event.event_id) == 5
    reconcile.booking_reconcile(event.event_id)
    assert seats_left(event.event_id) == 5  # exactly once


def test_a_cancellations_seats_are_returned_once_however_often_it_is_asked(api, make_event, active_tokens):
    """The request, its retry after a lost answer, and a reconcile that read the
    `returned` hash just before may each ask for the same return: lua/cancel.lua's
    `returned` hash lets one of them give the seats back."""
    event = make_event(total_seats=5)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    assert cancel(api, rid, token)[0] == 200
    assert seats_left(event.event_id) == 5
    row = Reservation.objects.get(reservation_id=rid)
    assert services.give_back_cancelled(row) == -1  # returned before: nothing changed
    assert services.return_seats(row, wait=False)
    assert seats_left(event.event_id) == 5


def test_a_cancellation_during_a_recount_leaves_its_seats_to_reconcile(api, make_event, active_tokens, rc):
    """While reconcile recounts seats (its mark held), a cancellation's seats are not
    returned: returned between the recount's reads and its SET, they would be counted
    as taken and put back too (docs/reliability.md, "The recount is exact while
    bookings go on"). The request waits a moment for the mark, then leaves them to
    reconcile, which returns them once."""
    event = make_event(total_seats=5)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    k = store.EventKeys(event.event_id)
    rc.set(k.recount, "a recount in progress", px=60_000)
    try:
        assert cancel(api, rid, token)[0] == 200
        assert seats_left(event.event_id) == 3  # held back while the mark is held
        assert Reservation.objects.get(reservation_id=rid).seats_returned_at is None
    finally:
        rc.delete(k.recount)
    assert reconcile.booking_reconcile(event.event_id).consistent
    assert seats_left(event.event_id) == 5
    assert Reservation.objects.get(reservation_id=rid).seats_returned_at is not None
    reconcile.booking_reconcile(event.event_id)
    assert seats_left(event.event_id) == 5


def test_the_admin_cancel_action(client, make_event, active_tokens, api):
    event = make_event(total_seats=6)
    tokens = active_tokens(event, 2)
    rids = [book(api, t, event.event_id, 3)[1]["data"]["reservationId"] for t in tokens]
    admin = User.objects.create_superuser("op", "op@example.com", "pw-for-tests")
    client.force_login(admin)
    pks = list(Reservation.objects.filter(reservation_id__in=rids).values_list("pk", flat=True))
    resp = client.post(
        "/admin/booking_app/reservation/", {"action": "cancel", "_selected_action": pks}, follow=True
    )
    assert resp.status_code == 200
    assert b"Cancelled 2 reservation(s)." in resp.content
    assert set(Reservation.objects.values_list("status", flat=True)) == {"CANCELLED"}
    assert seats_left(event.event_id) == 6
    # Search by reservation id and by token.
    found = client.get(f"/admin/booking_app/reservation/?q={rids[0]}")
    assert rids[0].encode() in found.content and rids[1].encode() not in found.content
    found = client.get(f"/admin/booking_app/reservation/?q={tokens[1]}")
    assert rids[1].encode() in found.content and rids[0].encode() not in found.content
    assert store.client().get(store.EventKeys(event.event_id).booked(tokens[0])) is None


def test_admin_actions_need_their_permission(client, make_event, active_tokens, api):
    """A view-only staff user sees events and reservations but can neither cancel a
    reservation nor open, pause, close or change an event's protections."""
    from django.contrib.auth.models import Permission

    event = make_event(total_seats=6)
    token = active_tokens(event, 1)[0]
    rid = book(api, token, event.event_id, 2)[1]["data"]["reservationId"]
    viewer = User.objects.create_user("viewer", password="pw-for-tests", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_event", "view_reservation"]))
    client.force_login(viewer)
    assert client.get("/admin/queue_app/event/").status_code == 200
    assert client.get("/admin/booking_app/reservation/").status_code == 200
    row = Reservation.objects.get(reservation_id=rid)
    client.post("/admin/booking_app/reservation/", {"action": "cancel", "_selected_action": [row.pk]})
    assert Reservation.objects.get(pk=row.pk).status == "CONFIRMED"
    assert seats_left(event.event_id) == 4
    for action in ("close_events", "pause_events", "hot_sale", "protections_off"):
        client.post("/admin/queue_app/event/", {"action": action, "_selected_action": [event.pk]})
    event.refresh_from_db()
    assert (event.status, event.protections()) == ("OPEN", [])
    assert store.client().hget(store.EventKeys(event.event_id).meta, "status") == b"OPEN"
    # The actions are not offered to it at all.
    page = client.get("/admin/queue_app/event/").content.decode()
    assert "close_events" not in page and "hot_sale" not in page
