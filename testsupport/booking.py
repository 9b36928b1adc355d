"""Booking as the tests do it: a booking through the API, and the seats Redis says
are left."""

from ticketing import store


def book(api, token: str, event_id: str, seats: int = 1, **extra) -> tuple[int, dict]:
    """POST /api/booking through `api` (a testsupport.clients.Api): (status, body)."""
    return api.call(
        "post", "/api/booking", {"token": token, "seatCount": seats, "eventId": event_id, **extra}
    )


def seats_left(event_id: str) -> int:
    return int(store.client().get(store.EventKeys(event_id).seats))
