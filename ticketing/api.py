"""The JSON API's declarations, shared by every endpoint and by both lanes.

An endpoint is an `Endpoint`, a DRF view: its `Input` serializer validates (the
fields raise `DomainError`, so a refusal reads the same everywhere), its `Output`
serializer shapes the answer, its throttle classes limit it, and `extend_schema`
describes it, errors included. A view that also names an async service in
`fast_service` is served by the ASGI fast lane (`ticketing/fastlane.py`) from
these same declarations: the same route, the same fields, the same throttles,
the same negotiation, the same output, without Django's request cycle. A fast view
that declares what that lane does not honour (another permission, renderer, parser,
authentication or versioning) stops the server's start-up (fastlane.HONOURED).
"""

from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any, ClassVar

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ticketing import store
from ticketing.errors import CODES, STATUS, describe, envelope


class Endpoint(APIView):
    Input: ClassVar[type[serializers.Serializer] | None] = None
    Output: ClassVar[type[serializers.Serializer]]
    # Where Input reads: the JSON body, or the query string.
    source: ClassVar[str] = "body"
    # The async twin of the view's service, for the fast lane; None keeps the view
    # on Django's lane only.
    fast_service: ClassVar[Callable[..., Awaitable[Any]] | None] = None
    # Error code -> reason: refusals counted per event for the operator (on both
    # lanes; ticketing.store.count_refusal).
    counted_refusals: ClassVar[dict[str, str]] = {}
    # For a service that takes a `client` argument (who asks): builds it on the fast
    # lane from the client's address (ticketing.ratelimit.client_ip: the peer, or
    # X-Forwarded-For's from a trusted proxy). That lane has no session, so it hands
    # requests carrying a session cookie to Django's lane, where the view builds
    # `client` itself.
    fast_client: ClassVar[Callable[[str], Any] | None] = None

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, Http404):
            # DRF's negotiation raises it for a ?format= no renderer has; DRF's own
            # exception handler reads it as NotFound, and so do both lanes.
            exc = exceptions.NotFound()
        if self.counted_refusals:
            err = describe(exc)
            reason = self.counted_refusals.get(err.code) if err is not None else None
            event_id = self._event_id() if reason else None
            if event_id is not None:
                store.count_refusal(event_id, reason)
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
        return Response(envelope(self.Output(result, context={"request": self.request}).data))


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

# Every endpoint may answer these.
COMMON = ("METHOD_NOT_ALLOWED", "NOT_ACCEPTABLE", "INTERNAL_ERROR", "REDIS_UNAVAILABLE")


def responses(output: type[serializers.Serializer], *codes: str) -> dict[int, object]:
    """The schema's responses: the enveloped output, and each error status with the
    codes that produce it."""
    by_status: dict[int, list[str]] = {}
    for code in (*codes, *COMMON):
        by_status.setdefault(STATUS[code], []).append(code)
    described: dict[int, object] = {200: enveloped(output)}
    for status, found in sorted(by_status.items()):
        text = "; ".join(f"`{code}`: {CODES[code].meaning}" for code in found)
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
