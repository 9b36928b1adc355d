"""Booking's JSON endpoints, declared once (see ticketing/api.py). They touch
Postgres, so they stay on Django's lane."""

import datetime
import re
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response

from booking_app import checkout, mail, services
from booking_app.models import BUYER_EMAIL_MAX, BUYER_NAME_MAX, TAKEN, Reservation
from queue_app.api import EXAMPLE_TOKEN, TOKEN_TO_FILL, EventIdField, TokenField
from ticketing.api import Endpoint, StrictField, responses
from ticketing.errors import DomainError, envelope, validation_error
from ticketing.ratelimit import BookingThrottle, BookingTokenThrottle


def parse_seat_count(value: object) -> int:
    if value is None:
        raise validation_error("seatCount is required.")
    # bool is an int in Python; `true` is not a seat count, nor is "2" or 2.0.
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > 1_000_000:
        raise validation_error("seatCount must be a whole number.")
    return value  # its range is the event's to say (lua/reserve.lua)


# A seat's id (queue_app/seating.py: SECTION-ROW-SEAT) and a section's code, as the
# seat map's schema allows them; the map itself says which exist.
SEAT_ID = re.compile(r"\A[A-Za-z0-9]{1,8}-[^\s,-][^\s,]{0,7}-[^\s,]{1,8}\Z")
SECTION_CODE = re.compile(r"\A[A-Za-z0-9]{1,8}\Z")
MOST_SEATS_NAMED = 100  # past any event's seats per booking (lua/reserve.lua says the event's)


def parse_seats(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not 1 <= len(value) <= MOST_SEATS_NAMED:
        raise validation_error(f"seats must be a list of 1 to {MOST_SEATS_NAMED} seat ids.")
    if not all(isinstance(seat, str) and SEAT_ID.match(seat) for seat in value):
        raise validation_error('seats must be seat ids such as "A-3-12" (section-row-seat).')
    return tuple(value)


def parse_section(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or not SECTION_CODE.match(value):
        raise validation_error("section must be a section's code: 1 to 8 letters or digits.")
    return value


def parse_together(value: object) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise validation_error("together must be true or false.")
    return value


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
    """Required unless `seats` names the seats (BookingInput.validate)."""

    @staticmethod
    def parse(value: object) -> int | None:
        return None if value is None else parse_seat_count(value)


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "example": "R-A-12"},
        "minItems": 1,
        "maxItems": MOST_SEATS_NAMED,
        "description": "Numbered seats to hold, all or none (SEAT_TAKEN names those another took).",
    }
)
class SeatsField(StrictField):
    parse = staticmethod(parse_seats)


@extend_schema_field(
    {"type": "string", "description": "On an event with a seat map: the section to take seatCount places in."}
)
class SectionField(StrictField):
    parse = staticmethod(parse_section)


@extend_schema_field(
    {"type": "boolean", "description": "With section: the seats picked side by side in one row."}
)
class TogetherField(StrictField):
    parse = staticmethod(parse_together)


@extend_schema_field({"type": "string", "maxLength": BUYER_NAME_MAX})
class BuyerNameField(StrictField):
    parse = staticmethod(parse_buyer_name)


@extend_schema_field({"type": "string", "format": "email", "maxLength": BUYER_EMAIL_MAX})
class BuyerEmailField(StrictField):
    parse = staticmethod(parse_buyer_email)


class BookingInput(serializers.Serializer):
    token = TokenField()
    seatCount = SeatCountField(source="seat_count", required=False)  # noqa: N815 (the wire's names are camelCase)
    eventId = EventIdField()  # noqa: N815
    buyerName = BuyerNameField(source="buyer_name", required=False)  # noqa: N815
    buyerEmail = BuyerEmailField(source="buyer_email", required=False)  # noqa: N815
    seats = SeatsField(required=False)
    section = SectionField(required=False)
    together = TogetherField(required=False)

    def validate(self, data: dict) -> dict:
        """seatCount, or the seats themselves (then seatCount, if given, is their number)."""
        seats, count = data.get("seats", ()), data.get("seat_count")
        if not seats and count is None:
            raise validation_error("seatCount is required.")
        if seats and count is not None and count != len(seats):
            raise validation_error("seatCount must be the number of seats named.")
        if seats and data.get("together"):
            raise validation_error("together picks seats in a section; it does not go with seats.")
        return {**data, "seat_count": count if count is not None else len(seats)}


def checkout_url(request: Request, reservation_id: uuid.UUID) -> str:
    """Where the buyer pays for a held booking (booking_app/views.py: checkout)."""
    return request.build_absolute_uri(reverse("checkout", args=[mail.link_token(reservation_id)]))


@extend_schema_field({"type": "string", "format": "uri"})
class CheckoutUrlField(serializers.Field):
    def to_representation(self, reservation_id: uuid.UUID) -> str:
        return checkout_url(self.context["request"], reservation_id)


# A held booking's fields: present only while it is HELD (a free event's answer is
# the seed's, field for field).
HOLD_FIELDS = ("holdExpiresAt", "amount", "currency", "checkoutUrl")


class BookedOutput(serializers.Serializer):
    reservationId = serializers.UUIDField(source="reservation_id")  # noqa: N815
    seatCount = serializers.IntegerField(source="seat_count")  # noqa: N815
    remainingSeats = serializers.IntegerField(source="remaining_seats")  # noqa: N815
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    status = serializers.ChoiceField(
        choices=["CONFIRMED", "HELD"],
        help_text="CONFIRMED: booked (a free event). HELD: a priced event's seats, held for the buyer "
        "to pay at checkoutUrl until holdExpiresAt; then CONFIRMED, or RELEASED if unpaid.",
    )
    holdExpiresAt = serializers.IntegerField(  # noqa: N815
        source="hold_expires_at",
        required=False,
        help_text="HELD: when the hold ends unpaid (ms since the epoch)",
    )
    amount = serializers.IntegerField(
        required=False, help_text="HELD: what the buyer pays, in the currency's minor unit (KRW has none)"
    )
    currency = serializers.CharField(required=False, help_text="HELD: ISO 4217")
    section = serializers.CharField(
        required=False, help_text="the section holding the seats (an event with a seat map only)"
    )
    seats = serializers.ListField(
        source="seat_ids",
        child=serializers.CharField(),
        required=False,
        help_text="the numbered seats held (an event with a seat map; empty for unnumbered places)",
    )
    checkoutUrl = CheckoutUrlField(  # noqa: N815
        source="reservation_id",
        required=False,
        help_text="HELD: the page where the buyer pays, or gives the seats up",
    )

    def to_representation(self, booked: services.Booked) -> dict:
        data = super().to_representation(booked)
        if booked.status != "HELD":
            for name in HOLD_FIELDS:
                del data[name]
        if not booked.section:  # an event without a map answers as it always did
            del data["section"], data["seats"]
        return data


def _ms(moment: datetime.datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


class ReservationOutput(serializers.Serializer):
    reservationId = serializers.UUIDField(source="reservation_id")  # noqa: N815
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    status = serializers.ChoiceField(choices=["HELD", "CONFIRMED", "RELEASED", "CANCELLED", "REFUNDED"])
    seatCount = serializers.IntegerField(source="seat_count")  # noqa: N815
    amount = serializers.IntegerField(help_text="in the currency's minor unit; 0 for a free event")
    currency = serializers.CharField(help_text="ISO 4217; empty for a free event")
    bookedAt = serializers.SerializerMethodField()  # noqa: N815
    holdExpiresAt = serializers.SerializerMethodField()  # noqa: N815
    paidAt = serializers.SerializerMethodField()  # noqa: N815
    endedAt = serializers.SerializerMethodField()  # noqa: N815
    section = serializers.CharField(
        required=False, help_text="the section holding the seats (an event with a seat map only)"
    )
    seats = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="the numbered seats (an event with a seat map; empty for unnumbered places)",
    )
    refunded = serializers.IntegerField(
        source="refunded_amount",
        required=False,
        help_text="REFUNDED: what was given back, in the currency's minor unit (the event's refund rule "
        "when its buyer cancelled, rounded down; all of it otherwise)",
    )

    @extend_schema_field({"type": "integer", "description": "ms since the epoch"})
    def get_bookedAt(self, row: Reservation) -> int | None:  # noqa: N802
        return _ms(row.created_at)

    @extend_schema_field({"type": "integer", "nullable": True, "description": "a priced booking's (ms)"})
    def get_holdExpiresAt(self, row: Reservation) -> int | None:  # noqa: N802
        return _ms(row.hold_expires_at)

    @extend_schema_field({"type": "integer", "nullable": True, "description": "when it was paid (ms)"})
    def get_paidAt(self, row: Reservation) -> int | None:  # noqa: N802
        return _ms(row.paid_at)

    @extend_schema_field(
        {"type": "integer", "nullable": True, "description": "when it was released or cancelled (ms)"}
    )
    def get_endedAt(self, row: Reservation) -> int | None:  # noqa: N802
        if row.status in TAKEN:  # (a hold released, then confirmed by its late payment, has not ended)
            return None
        return _ms(row.cancelled_at or row.released_at)

    def to_representation(self, row: Reservation) -> dict:
        data = super().to_representation(row)
        if row.status != Reservation.Status.REFUNDED:
            del data["refunded"]
        if not row.section:  # an event without a map answers as it always did
            del data["section"], data["seats"]
        return data


class CancelledOutput(serializers.Serializer):
    reservationId = serializers.UUIDField(source="reservation_id")  # noqa: N815
    status = serializers.ChoiceField(
        choices=["CANCELLED", "RELEASED", "REFUNDED"],
        help_text="CANCELLED: a booking cancelled; RELEASED: a hold given up before paying; "
        "REFUNDED: a paid booking cancelled and its payment returned",
    )
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
            "SECTION_NOT_FOUND",
            "SEAT_NOT_FOUND",
            "SEAT_TAKEN",
            "SECTION_SOLD_OUT",
            "NO_ADJACENT_SEATS",
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
                mail.confirmation_soon(request, rid, buyer_email=email, pending=True)
            raise
        if booked.status == "CONFIRMED":  # a hold is mailed once paid
            mail.confirmation_soon(request, booked.reservation_id, buyer_email=email)
        return self.answer(booked)


RESERVATION_ID = OpenApiParameter(
    "reservation_id", str, OpenApiParameter.PATH, description="a reservation id (UUID)"
)


class CancelView(Endpoint):
    """A reservation, read or ended with the token that booked it: a hold is given up
    (RELEASED), a booking cancelled (a paid one refunded); its seats go back on sale."""

    Input, Output, source = CancelInput, CancelledOutput, "query"

    @extend_schema(
        operation_id="booking_read",
        parameters=[
            CancelInput,
            RESERVATION_ID,
        ],
        responses=responses(
            ReservationOutput,
            "VALIDATION_ERROR",
            "MISSING_TOKEN",
            "RESERVATION_NOT_FOUND",
            "DATABASE_UNAVAILABLE",
        ),
    )
    def get(self, request: Request, reservation_id: str) -> Response:
        rid = self._reservation_id(reservation_id)
        token = self.validated(request)["token"]
        row = (
            Reservation.objects.filter(reservation_id=rid, token=token.text)
            .exclude(status=Reservation.Status.VOID)
            .first()
        )
        if row is None:
            raise DomainError("RESERVATION_NOT_FOUND")
        return Response(envelope(ReservationOutput(row).data))

    @staticmethod
    def _reservation_id(text: str) -> uuid.UUID:
        try:
            return uuid.UUID(text)
        except ValueError:
            raise validation_error("reservationId must be a UUID.") from None

    @extend_schema(
        operation_id="booking_cancel",
        parameters=[
            CancelInput,
            RESERVATION_ID,
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
        rid = self._reservation_id(reservation_id)
        token = self.validated(request)["token"]
        return self.answer(checkout.booking_end(reservation_id=rid, token=token.text, by_buyer=True))
