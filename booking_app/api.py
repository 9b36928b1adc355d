"""Booking's JSON endpoints, declared once (see ticketing/api.py). They touch
Postgres, so they stay on Django's lane."""

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response

from booking_app import services, tasks
from booking_app.models import BUYER_EMAIL_MAX, BUYER_NAME_MAX
from queue_app.api import EXAMPLE_TOKEN, TOKEN_TO_FILL, EventIdField, TokenField
from ticketing.api import Endpoint, StrictField, responses
from ticketing.errors import DomainError, validation_error
from ticketing.ratelimit import BookingThrottle, BookingTokenThrottle


def parse_seat_count(value: object) -> int:
    if value is None:
        raise validation_error("seatCount is required.")
    # bool is an int in Python; `true` is not a seat count, nor is "2" or 2.0.
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > 1_000_000:
        raise validation_error("seatCount must be a whole number.")
    return value  # its range is the event's to say (lua/reserve.lua)


def _text(name: str, limit: int, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise validation_error(f"{name} must be text of at most {limit} characters.")
    return value.strip()


def parse_buyer_name(value: object) -> str:
    return _text("buyerName", BUYER_NAME_MAX, value)


def parse_buyer_email(value: object) -> str:
    email = _text("buyerEmail", BUYER_EMAIL_MAX, value)
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise validation_error("buyerEmail is not an email address.") from None
    return email


@extend_schema_field(
    {"type": "integer", "minimum": 1, "description": "At most the event's seats per booking."}
)
class SeatCountField(StrictField):
    parse = staticmethod(parse_seat_count)


@extend_schema_field({"type": "string", "maxLength": BUYER_NAME_MAX})
class BuyerNameField(StrictField):
    parse = staticmethod(parse_buyer_name)


@extend_schema_field({"type": "string", "format": "email", "maxLength": BUYER_EMAIL_MAX})
class BuyerEmailField(StrictField):
    parse = staticmethod(parse_buyer_email)


class BookingInput(serializers.Serializer):
    token = TokenField()
    seatCount = SeatCountField(source="seat_count")  # noqa: N815 (the wire's names are camelCase)
    eventId = EventIdField()  # noqa: N815
    buyerName = BuyerNameField(source="buyer_name", required=False)  # noqa: N815
    buyerEmail = BuyerEmailField(source="buyer_email", required=False)  # noqa: N815


class BookedOutput(serializers.Serializer):
    reservationId = serializers.UUIDField(source="reservation_id")  # noqa: N815
    seatCount = serializers.IntegerField(source="seat_count")  # noqa: N815
    remainingSeats = serializers.IntegerField(source="remaining_seats")  # noqa: N815
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    status = serializers.ChoiceField(choices=["CONFIRMED"])


class CancelledOutput(serializers.Serializer):
    reservationId = serializers.UUIDField(source="reservation_id")  # noqa: N815
    status = serializers.ChoiceField(choices=["CANCELLED"])
    seatCount = serializers.IntegerField(source="seat_count")  # noqa: N815


class CancelInput(serializers.Serializer):
    token = TokenField()


class BookingView(Endpoint):
    """Book seats with a token in its active window."""

    Input, Output = BookingInput, BookedOutput
    throttle_classes = [BookingThrottle, BookingTokenThrottle]
    # The session's account (the seat cap per account), with DRF's CSRF check for
    # signed-in requests.
    authentication_classes = [SessionAuthentication]

    @extend_schema(
        operation_id="booking_create",
        request=BookingInput,
        examples=[
            OpenApiExample(
                "Two seats",
                value={
                    "token": EXAMPLE_TOKEN,
                    "seatCount": 2,
                    "eventId": settings.EXAMPLE_EVENT_ID,
                    "buyerName": "Kim Minji",
                    "buyerEmail": "minji@example.com",
                },
                request_only=True,
                description=f"{TOKEN_TO_FILL} It books once GET /api/status/poll answers ACTIVE for "
                "it (on `make run`, within a second or two of joining).",
            )
        ],
        responses=responses(
            BookedOutput,
            "VALIDATION_ERROR",
            "MISSING_TOKEN",
            "INVALID_TOKEN",
            "UNSUPPORTED_MEDIA_TYPE",
            "PAYLOAD_TOO_LARGE",
            "REQUEST_TIMEOUT",
            "EVENT_NOT_FOUND",
            "ACCOUNT_REQUIRED",
            "BUYER_REQUIRED",
            "CSRF_FAILED",
            "EVENT_CLOSED",
            "NOT_ACTIVE",
            "ALREADY_BOOKED",
            "SEAT_CAP",
            "SOLD_OUT",
            "INSUFFICIENT_SEATS",
            "RATE_LIMIT",
            "BOOKING_NOT_SAVED",
            "BOOKING_PENDING",
        ),
    )
    def post(self, request: Request) -> Response:
        user_id = self.account_id(request)
        fields = self.validated(request)
        email = fields.get("buyer_email", "")
        try:
            booked = services.booking_reserve(**fields, user_id=user_id)
        except DomainError as exc:
            if exc.code == "BOOKING_PENDING":  # decided later: its mail waits for it
                rid = exc.details["reservationId"]
                tasks.confirmation_soon(request, rid, buyer_email=email, pending=True)
            raise
        tasks.confirmation_soon(request, booked.reservation_id, buyer_email=email)
        return self.answer(booked)


class CancelView(Endpoint):
    """Cancel a reservation with the token that booked it; its seats go back on sale."""

    Input, Output, source = CancelInput, CancelledOutput, "query"

    @extend_schema(
        operation_id="booking_cancel",
        parameters=[
            CancelInput,
            OpenApiParameter(
                "reservation_id", str, OpenApiParameter.PATH, description="a reservation id (UUID)"
            ),
        ],
        responses=responses(
            CancelledOutput,
            "VALIDATION_ERROR",
            "MISSING_TOKEN",
            "RESERVATION_NOT_FOUND",
            "ALREADY_CANCELLED",
            "DATABASE_UNAVAILABLE",
        ),
    )
    def delete(self, request: Request, reservation_id: str) -> Response:
        try:
            rid = uuid.UUID(reservation_id)
        except ValueError:
            raise validation_error("reservationId must be a UUID.") from None
        token = self.validated(request)["token"]
        return self.answer(services.booking_cancel(reservation_id=rid, token=token.text))
