"""The JSON API's declarations, shared by every endpoint and by both lanes.

An endpoint is an `Endpoint`, a DRF view: its `Input` serializer validates (the
fields raise `DomainError`, so a refusal reads the same everywhere), its `Output`
serializer shapes the answer, its throttle classes limit it, and `extend_schema`
describes it, errors included. A view that also names an async service in
`fast_service` is served by the ASGI fast lane (`ticketing/fastlane.py`) from
these same declarations: the same route, the same fields, the same throttles,
the same output, without Django's request cycle.
"""

from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ticketing import redis as r
from ticketing.errors import STATUS, describe, envelope


class Endpoint(APIView):
    Input: ClassVar[type[serializers.Serializer] | None] = None
    Output: ClassVar[type[serializers.Serializer]]
    # Where Input reads: the JSON body, or the query string.
    source: ClassVar[str] = "body"
    # The async twin of the view's service, for the fast lane; None keeps the view
    # on Django's lane only.
    fast_service: ClassVar[Callable[..., Awaitable[Any]] | None] = None
    # Error code -> reason: refusals counted per event for the operator (on both
    # lanes; ticketing.redis.count_refusal).
    counted_refusals: ClassVar[dict[str, str]] = {}
    # For a service that takes a `client` argument (who asks): builds it on the fast
    # lane from the request's meta (peer, X-Forwarded-For). That lane has no
    # session, so it hands requests carrying a session cookie to Django's lane,
    # where the view builds `client` itself.
    fast_client: ClassVar[Callable[[Mapping], Any] | None] = None

    def handle_exception(self, exc: Exception) -> Response:
        if self.counted_refusals:
            err = describe(exc)
            reason = self.counted_refusals.get(err.code) if err is not None else None
            event_id = self._event_id() if reason else None
            if event_id is not None:
                r.count_refusal(event_id, reason)
        return super().handle_exception(exc)

    def _event_id(self) -> str | None:
        """The request's event, read as Input reads it; None when it cannot be."""
        field = next((f for f in self.Input().fields.values() if f.source == "event_id"), None)
        if field is None:
            return None
        try:
            data = self.request.query_params if self.source == "query" else self.request.data
            return field.run_validation(data.get("eventId", serializers.empty))
        except Exception:  # a malformed body or id: nothing to count against
            return None

    @staticmethod
    def account_id(request: Request) -> int | None:
        """The signed-in account, for views with SessionAuthentication; None for
        anyone else (DRF's user is None without an authenticator that found one)."""
        user = request.user
        return user.pk if user is not None and user.is_authenticated else None

    def validated(self, request: Request) -> dict:
        """Input's validated data, keyed by the services' argument names."""
        if self.Input is None:
            return {}
        data = request.query_params if self.source == "query" else request.data
        serializer = self.Input(data=data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def answer(self, result: object) -> Response:
        return Response(envelope(self.Output(result).data))


@cache
def enveloped(output: type[serializers.Serializer]) -> serializers.Serializer:
    """`{"success": true, "data": <output>}`, for the schema."""
    return inline_serializer(
        name=f"{output.__name__}Envelope",
        fields={"success": serializers.BooleanField(help_text="always true here"), "data": output()},
    )


class ErrorSerializer(serializers.Serializer):
    code = serializers.ChoiceField(choices=sorted(STATUS))
    message = serializers.CharField()
    reservationId = serializers.UUIDField(  # noqa: N815 (a wire name)
        required=False, help_text="ALREADY_BOOKED: the token's reservation; BOOKING_*: this booking's."
    )
    remainingSeats = serializers.IntegerField(  # noqa: N815 (a wire name)
        required=False, help_text="INSUFFICIENT_SEATS: the seats left."
    )
    seatsAllowed = serializers.IntegerField(  # noqa: N815 (a wire name)
        required=False, help_text="SEAT_CAP: the seats this buyer may still book."
    )
    most = serializers.IntegerField(required=False, help_text="TOO_MANY_PLACES: the cap per address.")


ErrorEnvelope = inline_serializer(
    name="ErrorEnvelope",
    fields={"success": serializers.BooleanField(help_text="always false here"), "error": ErrorSerializer()},
)

# What each code means to a client, for the schema's error responses.
_MEANING = {
    "VALIDATION_ERROR": "a field is missing, of the wrong type, or out of range",
    "MISSING_TOKEN": "no token was sent",
    "EVENT_CLOSED": "the event does not accept this now",
    "NOT_ACTIVE": "the token is not in its booking window",
    "INVALID_TOKEN": "the token was not issued by this service for this event",
    "EVENT_NOT_FOUND": "no such event",
    "RESERVATION_NOT_FOUND": "no such reservation for this token",
    "METHOD_NOT_ALLOWED": "another HTTP method is expected",
    "ALREADY_BOOKED": "the token has booked (reservationId names the booking)",
    "SOLD_OUT": "no seats left",
    "INSUFFICIENT_SEATS": "fewer seats left than asked for (remainingSeats says how many)",
    "ALREADY_CANCELLED": "the reservation was cancelled before",
    "PAYLOAD_TOO_LARGE": "the body is over 10 KB",
    "REQUEST_TIMEOUT": "the request did not arrive whole within the server's deadline (10 s by default); "
    "the connection is closed",
    "UNSUPPORTED_MEDIA_TYPE": "the body is not application/json",
    "RATE_LIMIT": "too many requests from this client; wait Retry-After seconds",
    "TOO_MANY_PLACES": "this client address already holds the event's most live places",
    "ACCOUNT_REQUIRED": "this event needs a signed-in account (a session cookie)",
    "EMAIL_UNCONFIRMED": "this event needs an account whose email address is confirmed "
    "(ACCOUNTS_REQUIRE_CONFIRMED_EMAIL): the link sent from /accounts/confirm/ confirms it",
    "CSRF_FAILED": "a signed-in request without the X-CSRFToken header of its csrftoken cookie",
    "PROOF_OF_WORK": "this event needs a solved challenge (GET /api/queue/challenge) in `altcha`; "
    "it was missing, wrong, expired, used before, or of a challenge easier than the event asks now",
    "NO_DRAW": "the event has no scheduled start, so no draw",
    "NOT_DRAWN": "the draw happens at the scheduled start; this is published after it",
    "RECEIPT_NOT_FOUND": "no place of this draw has this receipt",
    "BUYER_REQUIRED": "this event caps seats per buyer: name the buyer (`buyerEmail`, or sign in)",
    "NOT_IN_DRAW": "this place is not in the draw: it joined after the scheduled start, or left",
    "SEAT_CAP": "this buyer (account or email) would hold more than the event's most seats "
    "per buyer (seatsAllowed says how many more)",
    "INTERNAL_ERROR": "a fault of the service; it is logged",
    "REDIS_UNAVAILABLE": "the waiting room's store is briefly unavailable; try again",
    "DATABASE_UNAVAILABLE": "the database is briefly unavailable; try again",
    "BOOKING_NOT_SAVED": "nothing was booked; try again",
    "BOOKING_PENDING": "the seats are held and the booking is being saved; poll to see it",
}
# Every endpoint may answer these.
COMMON = ("METHOD_NOT_ALLOWED", "INTERNAL_ERROR", "REDIS_UNAVAILABLE")


def responses(output: type[serializers.Serializer], *codes: str) -> dict[int, object]:
    """The schema's responses: the enveloped output, and each error status with the
    codes that produce it."""
    by_status: dict[int, list[str]] = {}
    for code in (*codes, *COMMON):
        by_status.setdefault(STATUS[code], []).append(code)
    described: dict[int, object] = {200: enveloped(output)}
    for status, found in sorted(by_status.items()):
        text = "; ".join(f"`{code}`: {_MEANING[code]}" for code in found)
        described[status] = OpenApiResponse(ErrorEnvelope, description=text)
    return described


class StrictField(serializers.Field):
    """A field that reads its value with one plain function (which raises
    `DomainError`), so both lanes refuse the same input the same way; and that
    reads JSON types as they are, never "2" as 2 or 42 as "42"."""

    parse: ClassVar[Callable[..., Any]]

    def run_validation(self, data: object = serializers.empty) -> Any:
        return type(self).parse(None if data is serializers.empty else data)

    def to_representation(self, value: object) -> object:
        return value
