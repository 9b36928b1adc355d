"""The waiting room's JSON endpoints, declared once (see ticketing/api.py).

These four are the crowd's: the ASGI fast lane serves them in production from
these declarations (`fast_service`); Django's lane serves them to everything else.
"""

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from queue_app import services
from queue_app.models import EVENT_ID_PATTERN
from ticketing.api import Endpoint, StrictField, responses
from ticketing.ratelimit import JoinThrottle, LeaveThrottle


@extend_schema_field(
    {
        "type": "string",
        "format": "uuid",
        "description": "The token join (or a rejoin to the back) handed out for this event: a signed UUIDv8 "
        "that carries the arrival number. Any other UUID is refused with INVALID_TOKEN.",
    }
)
class TokenField(StrictField):
    """A queue token: missing is MISSING_TOKEN, anything but a UUID VALIDATION_ERROR."""

    parse = staticmethod(services.parse_token)

    def to_representation(self, value: object) -> object:
        return value.text if isinstance(value, services.Token) else value


@extend_schema_field(
    {"type": "string", "pattern": EVENT_ID_PATTERN, "description": "Default: the configured event."}
)
class EventIdField(StrictField):
    parse = staticmethod(services.parse_event_id)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(required=False, source="event_id", **kwargs)


class EventInput(serializers.Serializer):
    eventId = EventIdField()  # noqa: N815 (the wire's names are camelCase)


class TokenInput(serializers.Serializer):
    token = TokenField()
    eventId = EventIdField()  # noqa: N815


class JoinedOutput(serializers.Serializer):
    token = serializers.UUIDField()
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    joinedAt = serializers.IntegerField(  # noqa: N815
        source="joined_at", allow_null=True, help_text="ms; null when rejoin kept the place"
    )


class RejoinedOutput(JoinedOutput):
    rejoined = serializers.BooleanField(
        help_text="true: the place (or the active window) was kept, same token; "
        "false: a new token at the back (the old one polls as what it was)"
    )
    status = serializers.ChoiceField(choices=["WAITING", "ACTIVE"])


class LeftOutput(serializers.Serializer):
    removed = serializers.BooleanField(help_text="false when the token was not waiting")


class PositionOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=["WAITING", "ACTIVE", "BOOKED", "EXPIRED", "NOT_FOUND"])
    rank = serializers.IntegerField(allow_null=True, help_text="1-based, while WAITING")
    totalWaiting = serializers.IntegerField(source="total_waiting")  # noqa: N815
    ahead = serializers.IntegerField(allow_null=True)
    behind = serializers.IntegerField(allow_null=True)
    remainingSeats = serializers.IntegerField(source="remaining_seats")  # noqa: N815
    nextPollMs = serializers.IntegerField(  # noqa: N815
        source="next_poll_ms", help_text="wait this long before the next poll; 0: nothing left to wait for"
    )
    activeExpiresAt = serializers.IntegerField(  # noqa: N815
        source="active_expires_at", allow_null=True, help_text="ms, while ACTIVE"
    )
    reservationId = serializers.UUIDField(source="reservation_id", allow_null=True)  # noqa: N815
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    eventStatus = serializers.ChoiceField(source="event_status", choices=["OPEN", "PAUSED", "CLOSED"])  # noqa: N815
    soldOut = serializers.BooleanField(source="sold_out")  # noqa: N815
    etaSeconds = serializers.IntegerField(source="eta_seconds", allow_null=True)  # noqa: N815


class JoinView(Endpoint):
    """A new person: a fresh token at the back of the line."""

    Input, Output = EventInput, JoinedOutput
    throttle_classes = [JoinThrottle]
    fast_service = staticmethod(services.aqueue_join)
    counted_refusals = services.JOIN_REFUSALS

    @extend_schema(
        operation_id="queue_join",
        request=EventInput,
        responses=responses(
            JoinedOutput,
            "VALIDATION_ERROR",
            "UNSUPPORTED_MEDIA_TYPE",
            "PAYLOAD_TOO_LARGE",
            "EVENT_NOT_FOUND",
            "EVENT_CLOSED",
            "RATE_LIMIT",
        ),
    )
    def post(self, request: Request) -> Response:
        return self.answer(services.queue_join(**self.validated(request)))


class RejoinView(Endpoint):
    """A returning person (F5): the same place while waiting or active, else the back."""

    Input, Output = TokenInput, RejoinedOutput
    throttle_classes = [JoinThrottle]
    fast_service = staticmethod(services.aqueue_rejoin)
    counted_refusals = services.JOIN_REFUSALS

    @extend_schema(
        operation_id="queue_rejoin",
        request=TokenInput,
        responses=responses(
            RejoinedOutput,
            "VALIDATION_ERROR",
            "UNSUPPORTED_MEDIA_TYPE",
            "PAYLOAD_TOO_LARGE",
            "MISSING_TOKEN",
            "INVALID_TOKEN",
            "EVENT_NOT_FOUND",
            "EVENT_CLOSED",
            "ALREADY_BOOKED",
            "RATE_LIMIT",
        ),
    )
    def post(self, request: Request) -> Response:
        return self.answer(services.queue_rejoin(**self.validated(request)))


class LeaveView(Endpoint):
    """Give up a place in line."""

    Input, Output, source = TokenInput, LeftOutput, "query"
    throttle_classes = [LeaveThrottle]
    fast_service = staticmethod(services.aqueue_leave)

    @extend_schema(
        operation_id="queue_leave",
        parameters=[TokenInput],
        responses=responses(
            LeftOutput, "VALIDATION_ERROR", "MISSING_TOKEN", "INVALID_TOKEN", "EVENT_NOT_FOUND", "RATE_LIMIT"
        ),
    )
    def delete(self, request: Request) -> Response:
        return self.answer(services.queue_leave(**self.validated(request)))


class PollView(Endpoint):
    """Where a person stands: place in line, active window, booking."""

    Input, Output, source = TokenInput, PositionOutput, "query"
    fast_service = staticmethod(services.aqueue_poll)

    @extend_schema(
        operation_id="status_poll",
        parameters=[TokenInput],
        responses=responses(
            PositionOutput, "VALIDATION_ERROR", "MISSING_TOKEN", "INVALID_TOKEN", "EVENT_NOT_FOUND"
        ),
    )
    def get(self, request: Request) -> Response:
        return self.answer(services.queue_poll(**self.validated(request)))
