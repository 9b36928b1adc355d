"""Booking endpoints. Booking is hot once people are admitted, so it is served from
the WSGI environ by ticketing.hotpath; cancellation is rare and uses DRF."""

import uuid

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from booking_app import services
from queue_app.services import parse_event_id, parse_token
from ticketing.errors import envelope, validation_error
from ticketing.hotpath import Environ, Route, json_body

BOOK = "/api/booking"


def _seat_count(value: object) -> int:
    # bool is an int in Python; `true` is not a seat count.
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > 1_000_000:
        raise validation_error("seatCount must be a whole number.")
    return value


def _text(body: dict, name: str, limit: int) -> str:
    value = body.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise validation_error(f"{name} must be text of at most {limit} characters.")
    return value.strip()


def book(environ: Environ) -> dict:
    body = json_body(environ)
    token = parse_token(body.get("token"))
    if "seatCount" not in body:
        raise validation_error("seatCount is required.")
    seat_count = _seat_count(body["seatCount"])
    event_id = parse_event_id(body.get("eventId"))
    buyer_name = _text(body, "buyerName", 200)
    buyer_email = _text(body, "buyerEmail", 254)
    if buyer_email:
        try:
            validate_email(buyer_email)
        except ValidationError:
            raise validation_error("buyerEmail is not an email address.") from None
    return services.booking_reserve(
        event_id=event_id,
        token=token,
        seat_count=seat_count,
        buyer_name=buyer_name,
        buyer_email=buyer_email,
    )


ROUTES: dict[str, Route] = {BOOK: Route("POST", book, database=True)}


class CancelView(APIView):
    def delete(self, request: Request, reservation_id: str) -> Response:
        try:
            rid = uuid.UUID(reservation_id)
        except ValueError:
            raise validation_error("reservationId must be a UUID.") from None
        token = parse_token(request.query_params.get("token"))
        reservation = services.booking_cancel(reservation_id=rid, token=token.text)
        return Response(
            envelope(
                {
                    "reservationId": str(reservation.reservation_id),
                    "status": "CANCELLED",
                    "seatCount": reservation.seat_count,
                }
            )
        )
