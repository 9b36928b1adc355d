"""The waiting room's JSON endpoints, declared once (see ticketing/api.py).

These four are the crowd's: the ASGI fast lane serves them in production from
these declarations (`fast_service`); Django's lane serves them to everything else.
"""

import hashlib
from functools import lru_cache
from itertools import chain

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import translation
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response

from queue_app import availability, draw, notify, presale, proof, services, tokens
from queue_app.layout import seat_map_layout
from queue_app.models import EVENT_ID_PATTERN, MESSAGE_MAX_LENGTH, NOTIFY_EMAIL_MAX, Event
from ticketing.api import Endpoint, StrictField, enveloped, responses
from ticketing.errors import DomainError, envelope
from ticketing.ratelimit import (
    ChallengeThrottle,
    JoinThrottle,
    LeaveThrottle,
    NotifyThrottle,
    client_address,
    client_ip,
    packed_address,
)


def client_of(request: Request) -> services.Client:
    """Who asks, for the event's protections: the account signed in by Django's
    session (on this lane only: the fast lane hands requests with a session to it),
    and the client address (and an IPv6 client's /48). An account that must confirm
    its email address first asks as none (services.Client.unconfirmed)."""
    account = Endpoint.account_id(request)
    address, site = client_address(request.META)
    if account is None:
        return services.Client(address=address, site=site)
    if not services.account_may_hold_place(account):
        return services.Client(address=address, site=site, unconfirmed=True)
    return services.Client(account=str(account), address=address, site=site)


@lru_cache(maxsize=65536)
def anonymous_client(address: str) -> services.Client:
    """The Client at an address (`client_ip`), kept as its units are
    (`packed_address`): it is frozen, so every join from the address may share it."""
    address_bytes, site = packed_address(address)
    return services.Client(address=address_bytes, site=site)


# Joins and rejoins refused, counted per event by reason for the operator (the
# admin's event list): error code -> reason.
JOIN_REFUSALS = {
    "RATE_LIMIT": "rate",
    "INVALID_TOKEN": "forged_token",
    "TOO_MANY_PLACES": "cap",
    "PROOF_OF_WORK": "proof_of_work",
    "PRESALE_CODE_REQUIRED": "presale",
    "PRESALE_CODE_INVALID": "presale_code",
    "PRESALE_CODE_USED_UP": "presale_code",
}


@extend_schema_field(
    {
        "type": "string",
        "format": "uuid",
        "description": "The token join (or a rejoin to the back) handed out for this event: a signed UUIDv8 "
        "that carries the arrival number. Any other UUID is refused with INVALID_TOKEN. To get one: "
        "POST /api/queue/join, and copy `data.token` from its answer.",
    }
)
class TokenField(StrictField):
    """A queue token: missing is MISSING_TOKEN, anything but a UUID VALIDATION_ERROR."""

    parse = staticmethod(tokens.parse_token)

    def to_representation(self, value: object) -> object:
        return value.text if isinstance(value, tokens.Token) else value


@extend_schema_field(
    {
        "type": "string",
        "pattern": EVENT_ID_PATTERN,
        "description": "Default: the configured event.",
        "example": settings.EXAMPLE_EVENT_ID,
    }
)
class EventIdField(StrictField):
    parse = staticmethod(services.parse_event_id)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(required=False, source="event_id", **kwargs)


@extend_schema_field(
    {
        "type": "string",
        "maxLength": proof.MAX_PAYLOAD,
        "description": "The solved proof-of-work challenge: the ALTCHA payload, base64. Leave it out "
        "unless the event asks for proof of work (GET /api/queue/challenge answers `required`; the "
        "dev stack's event asks for none). When it does: GET /api/queue/challenge?eventId=..., solve "
        "`data.challenge` with the ALTCHA widget or Python's `altcha.solve_challenge` (README: Proof "
        "of work), and send the payload here. Needed for a new place only (a rejoin that keeps its "
        "place needs none); each solution works once. One sent that does not verify is refused "
        "with PROOF_OF_WORK, after the event's own refusals (EVENT_NOT_FOUND first).",
    }
)
class ProofField(StrictField):
    parse = staticmethod(proof.parse_payload)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(required=False, source="proof", **kwargs)


@extend_schema_field(
    {
        "type": "string",
        "maxLength": presale.CODE_INPUT_MAX,
        "example": "ABCDE-FGH23",
        "description": f"A presale code, as printed: {presale.CODE_LENGTH} letters and digits (no I, O, 0 "
        "or 1), in any case, spaces and hyphens ignored. Needed only while the event is in its presale "
        "(before its public start), for a new place, unless the signed-in account is on the event's "
        "allow-list; a code of K uses gives K places, and a refused join spends nothing. Ignored "
        "after the presale and for a place kept (a rejoin). Without one in the presale: "
        "PRESALE_CODE_REQUIRED; unknown: PRESALE_CODE_INVALID; spent: PRESALE_CODE_USED_UP.",
    }
)
class PresaleCodeField(StrictField):
    parse = staticmethod(presale.parse_code)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(required=False, source="presale_code", **kwargs)


# A token in an example stands in for the person's own: no example can hold one.
EXAMPLE_TOKEN = "00000000-0000-8000-8000-000000000000"
TOKEN_TO_FILL = (
    "`token`: put the one POST /api/queue/join answered in place of this one, which this "
    "service never issued (INVALID_TOKEN)."
)
JOIN_EXAMPLES = [
    OpenApiExample(
        "The dev stack event",
        value={"eventId": settings.EXAMPLE_EVENT_ID},
        request_only=True,
        description="The event `make run` creates, which asks for no proof of work: works as it is. "
        "For an event that asks for one, add `altcha` (see the field).",
    )
]
REJOIN_EXAMPLES = [
    OpenApiExample(
        "A returning person",
        value={"token": EXAMPLE_TOKEN, "eventId": settings.EXAMPLE_EVENT_ID},
        request_only=True,
        description=TOKEN_TO_FILL,
    )
]


class EventInput(serializers.Serializer):
    eventId = EventIdField()  # noqa: N815 (the wire's names are camelCase)


class JoinInput(EventInput):
    altcha = ProofField()
    presaleCode = PresaleCodeField()  # noqa: N815


class TokenInput(serializers.Serializer):
    token = TokenField()
    eventId = EventIdField()  # noqa: N815


class RejoinInput(TokenInput):
    altcha = ProofField()
    presaleCode = PresaleCodeField()  # noqa: N815


class ChallengeOutput(serializers.Serializer):
    required = serializers.BooleanField(help_text="whether this event asks for proof of work at join now")
    challenge = serializers.DictField(
        help_text="An ALTCHA challenge (protocol v2: `parameters`, `signature`), algorithm SHA-256, "
        "valid 5 minutes, for this event only. Solve it with the ALTCHA widget or "
        "`altcha.solve_challenge`, and send the payload as `altcha` (README: Proof of work)."
    )


class LeftOutput(serializers.Serializer):
    removed = serializers.BooleanField(help_text="false when the token was not waiting")


# Declares the shape for the schema; the poll writes the service's own object (MessageField).
class MessageOutput(serializers.Serializer):
    """The operator's message to the crowd, as every poll carries it."""

    id = serializers.IntegerField(help_text="changes with each message posted")
    ko = serializers.CharField(
        max_length=MESSAGE_MAX_LENGTH, help_text="in Korean; empty when the operator wrote English only"
    )
    en = serializers.CharField(
        max_length=MESSAGE_MAX_LENGTH, help_text="in English; empty when the operator wrote Korean only"
    )
    at = serializers.IntegerField(help_text="when it was posted (ms)")


@extend_schema_field(MessageOutput)
class MessageField(serializers.JSONField):
    """The message as the service decoded it, once per process (queue_app/line.py):
    written as it is, on both lanes."""


class PositionOutput(serializers.Serializer):
    status = serializers.ChoiceField(
        choices="PRE_QUEUE DRAWING WAITING ACTIVE BOOKED NOT_SAVED UNCLAIMED EXPIRED NOT_FOUND".split(),
        help_text="PRE_QUEUE: joined before the event's scheduled start (opensAt); the order is drawn "
        "then. DRAWING: the start has passed and the draw is running; poll again soon. NOT_SAVED: "
        "a booking this token was told was pending (reservationId) was not saved and nothing was "
        "charged; while activeExpiresAt is set the token may book again. UNCLAIMED: admitted, but "
        "the event's claim time ran out before the person came back (a poll, the booking page): "
        "the slot went to the next person; rejoin to go to the back of the line.",
    )
    rank = serializers.IntegerField(allow_null=True, help_text="1-based, while WAITING")
    totalWaiting = serializers.IntegerField(source="total_waiting")  # noqa: N815
    ahead = serializers.IntegerField(allow_null=True)
    behind = serializers.IntegerField(allow_null=True)
    remainingSeats = serializers.IntegerField(source="remaining_seats")  # noqa: N815
    seatsOnHold = serializers.IntegerField(  # noqa: N815
        source="seats_on_hold",
        help_text="seats held by buyers paying now (a priced event's): they come back to the line if unpaid",
    )
    nextPollMs = serializers.IntegerField(  # noqa: N815
        source="next_poll_ms", help_text="wait this long before the next poll; 0: nothing left to wait for"
    )
    activeExpiresAt = serializers.IntegerField(  # noqa: N815
        source="active_expires_at", allow_null=True, help_text="ms, while ACTIVE (or NOT_SAVED in its window)"
    )
    reservationId = serializers.UUIDField(  # noqa: N815
        source="reservation_id", allow_null=True, help_text="BOOKED: the booking; NOT_SAVED: the one lost"
    )
    reservationStatus = serializers.CharField(  # noqa: N815
        source="reservation_status",
        allow_null=True,
        help_text="BOOKED: the booking's status as the database has it: HELD while a priced event's buyer "
        "pays at checkout, CONFIRMED once paid (a free event's at once). null for any other status, and "
        "for a BOOKED one whose booking is still being decided (BOOKING_PENDING) or whose status could "
        "not be read just now.",
    )
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    eventStatus = serializers.ChoiceField(source="event_status", choices=["OPEN", "PAUSED", "CLOSED"])  # noqa: N815
    soldOut = serializers.BooleanField(source="sold_out")  # noqa: N815
    etaSeconds = serializers.IntegerField(source="eta_seconds", allow_null=True)  # noqa: N815
    opensAt = serializers.IntegerField(  # noqa: N815
        source="opens_at", allow_null=True, help_text="ms: the event's scheduled start, when it has one"
    )
    receipt = serializers.CharField(
        allow_null=True, help_text="a place of the pre-queue: its receipt in the draw (GET /api/queue/draw)"
    )
    drawPosition = serializers.IntegerField(  # noqa: N815
        source="draw_position",
        allow_null=True,
        help_text="a place of the pre-queue, once drawn: its position",
    )
    priorityLane = serializers.BooleanField(  # noqa: N815
        source="lane",
        help_text="the place is in the event's priority lane (a presale holder's), admitted ahead of the "
        "general line at the operator's share of the rate: rank, totalWaiting, ahead, behind and "
        "etaSeconds count in the lane",
    )
    message = MessageField(
        allow_null=True,
        help_text="The operator's message to everyone in this event's line (\"Doors open 10 minutes "
        "late\"), in Korean and English: show it while it is set, in the page's language (the other "
        "when that one is empty). null when there is none. A new message, or its clearing, reaches "
        "every poll within a fraction of a second.",
    )


class JoinedOutput(serializers.Serializer):
    token = serializers.UUIDField()
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    joinedAt = serializers.IntegerField(  # noqa: N815
        source="joined_at", allow_null=True, help_text="ms; null when rejoin kept the place"
    )
    receipt = serializers.CharField(
        allow_null=True,
        help_text="A place in the pre-queue of a scheduled start: its public id in the draw "
        "(16 hexadecimal digits; GET /api/queue/draw). null for any other place.",
    )
    status = serializers.ChoiceField(
        choices=["WAITING", "ACTIVE"],
        help_text="ACTIVE: admitted already (a safety-net event with room, a pass-through event, "
        "or a rejoin that kept its active window); WAITING: in line, the tick admits it.",
    )
    position = PositionOutput(
        help_text="The place's first poll, as GET /api/status/poll answers it: show it, then poll "
        "after its nextPollMs, so that an arrival costs one request, not two."
    )


class RejoinedOutput(JoinedOutput):
    rejoined = serializers.BooleanField(
        help_text="true: the place (or the active window) was kept, same token; "
        "false: a new token at the back (the old one polls as what it was)"
    )


class JoinView(Endpoint):
    """A new person: a fresh token at the back of the line. On an account event, an
    account that holds a live place gets that place back (joinedAt null). During an
    event's presale, only with a presale code or an account on its allow-list."""

    Input, Output = JoinInput, JoinedOutput
    throttle_classes = [JoinThrottle]
    fast_service = staticmethod(services.aqueue_join)
    counted_refusals = JOIN_REFUSALS
    fast_client = staticmethod(anonymous_client)
    # The session's account, with DRF's CSRF check for signed-in requests.
    authentication_classes = [SessionAuthentication]

    @extend_schema(
        operation_id="queue_join",
        request=JoinInput,
        examples=JOIN_EXAMPLES,
        responses=responses(
            JoinedOutput,
            "VALIDATION_ERROR",
            "ACCOUNT_REQUIRED",
            "EMAIL_UNCONFIRMED",
            "CSRF_FAILED",
            "PROOF_OF_WORK",
            "UNSUPPORTED_MEDIA_TYPE",
            "PAYLOAD_TOO_LARGE",
            "REQUEST_TIMEOUT",
            "EVENT_NOT_FOUND",
            "EVENT_CLOSED",
            "RATE_LIMIT",
            "TOO_MANY_PLACES",
            "PRESALE_CODE_REQUIRED",
            "PRESALE_CODE_INVALID",
            "PRESALE_CODE_USED_UP",
        ),
    )
    def post(self, request: Request) -> Response:
        return self.answer(services.queue_join(**self.validated(request), client=client_of(request)))


class RejoinView(Endpoint):
    """A returning person (F5): the same place while waiting or active, else the back."""

    Input, Output = RejoinInput, RejoinedOutput
    throttle_classes = [JoinThrottle]
    fast_service = staticmethod(services.aqueue_rejoin)
    counted_refusals = JOIN_REFUSALS
    fast_client = staticmethod(anonymous_client)
    # The session's account, with DRF's CSRF check for signed-in requests.
    authentication_classes = [SessionAuthentication]

    @extend_schema(
        operation_id="queue_rejoin",
        request=RejoinInput,
        examples=REJOIN_EXAMPLES,
        responses=responses(
            RejoinedOutput,
            "VALIDATION_ERROR",
            "ACCOUNT_REQUIRED",
            "EMAIL_UNCONFIRMED",
            "CSRF_FAILED",
            "UNSUPPORTED_MEDIA_TYPE",
            "PAYLOAD_TOO_LARGE",
            "REQUEST_TIMEOUT",
            "MISSING_TOKEN",
            "INVALID_TOKEN",
            "PROOF_OF_WORK",
            "EVENT_NOT_FOUND",
            "EVENT_CLOSED",
            "ALREADY_BOOKED",
            "RATE_LIMIT",
            "TOO_MANY_PLACES",
            "PRESALE_CODE_REQUIRED",
            "PRESALE_CODE_INVALID",
            "PRESALE_CODE_USED_UP",
        ),
    )
    def post(self, request: Request) -> Response:
        return self.answer(services.queue_rejoin(**self.validated(request), client=client_of(request)))


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


class ChallengeView(Endpoint):
    """A proof-of-work challenge for a join (queue_app/proof.py). On an event that
    caps places per address, a client already at its cap gets the join's
    TOO_MANY_PLACES here, before it solves anything."""

    Input, Output, source = EventInput, ChallengeOutput, "query"
    throttle_classes = [ChallengeThrottle]
    fast_service = staticmethod(services.aqueue_challenge)
    # A join refused before its proof of work was spent: counted as the join's would be.
    counted_refusals = {"TOO_MANY_PLACES": JOIN_REFUSALS["TOO_MANY_PLACES"]}
    fast_client = staticmethod(anonymous_client)

    @extend_schema(
        operation_id="queue_challenge",
        parameters=[EventInput],
        responses=responses(
            ChallengeOutput, "VALIDATION_ERROR", "EVENT_NOT_FOUND", "RATE_LIMIT", "TOO_MANY_PLACES"
        ),
    )
    def get(self, request: Request) -> Response:
        client = anonymous_client(client_ip(request.META))  # the cap counts addresses, never accounts
        return self.answer(services.queue_challenge(**self.validated(request), client=client))


@extend_schema_field(
    {
        "type": "string",
        "pattern": "^[0-9a-f]{16}$",
        "description": "A receipt of this draw (the join answer's `receipt`): adds its position.",
    }
)
class ReceiptField(StrictField):
    parse = staticmethod(draw.parse_receipt)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(required=False, **kwargs)


class DrawInput(EventInput):
    receipt = ReceiptField()


class DrawOutput(serializers.Serializer):
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    opensAt = serializers.IntegerField(source="opens_at", help_text="ms: the scheduled start")  # noqa: N815
    status = serializers.ChoiceField(
        choices=["SCHEDULED", "DRAWING", "DRAWN"],
        help_text="SCHEDULED: before the start; DRAWING: the start has passed; DRAWN: published",
    )
    commitment = serializers.CharField(help_text="SHA-256 of the seed (hex), published before the start")
    seed = serializers.CharField(allow_null=True, help_text="32 bytes (hex), once DRAWN")
    size = serializers.IntegerField(allow_null=True, help_text="places in the pre-queue, once DRAWN")
    listDigest = serializers.CharField(  # noqa: N815
        source="list_digest",
        allow_null=True,
        help_text="SHA-256 of the receipts sorted, concatenated, once DRAWN",
    )
    finalSeed = serializers.CharField(  # noqa: N815
        source="final_seed", allow_null=True, help_text="SHA-256(seed || listDigest), once DRAWN"
    )
    receipt = serializers.CharField(allow_null=True, help_text="the receipt asked for")
    position = serializers.IntegerField(allow_null=True, help_text="its drawn position (1 is first)")
    publicKey = serializers.CharField(  # noqa: N815
        source="public_key",
        help_text="Ed25519 public key (32 bytes, hex) that signs this service's receipts "
        "(GET /api/queue/draw/signed-receipt)",
    )


class DrawView(Endpoint):
    """An event's draw (docs/draw.md): its commitment before the scheduled start; the
    seed and the check's figures after it; with `receipt`, that place's position.
    The whole list is GET /api/queue/draw/receipts."""

    Input, Output, source = DrawInput, DrawOutput, "query"

    @extend_schema(
        operation_id="queue_draw",
        parameters=[DrawInput],
        responses=responses(
            DrawOutput, "VALIDATION_ERROR", "EVENT_NOT_FOUND", "NO_DRAW", "NOT_DRAWN", "RECEIPT_NOT_FOUND"
        ),
    )
    def get(self, request: Request) -> Response:
        return self.answer(draw.published(**self.validated(request)))


class SignedReceiptOutput(serializers.Serializer):
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    receipt = serializers.CharField(help_text="this place's receipt in the draw")
    commitment = serializers.CharField(help_text="the draw's commitment (SHA-256 of its seed)")
    size = serializers.IntegerField(allow_null=True, help_text="places drawn, once DRAWN")
    listDigest = serializers.CharField(  # noqa: N815
        source="list_digest", allow_null=True, help_text="the published list's digest, once DRAWN"
    )
    position = serializers.IntegerField(allow_null=True, help_text="this place's drawn position, once DRAWN")
    publicKey = serializers.CharField(source="public_key", help_text="the signing key's public half (hex)")  # noqa: N815
    signature = serializers.CharField(
        help_text="Ed25519 signature (64 bytes, hex) of the fields above that have a value, as docs/draw.md "
        "writes them; keep this object as a file: docs/verify_draw.py --receipt-file checks it"
    )


class SignedReceiptView(Endpoint):
    """A place of the pre-queue's receipt, signed by the service: proof, for anyone
    to check, that the draw counts this place; once drawn, also its position in the
    published list (docs/draw.md)."""

    Input, Output, source = TokenInput, SignedReceiptOutput, "query"

    @extend_schema(
        operation_id="queue_draw_signed_receipt",
        parameters=[TokenInput],
        responses=responses(
            SignedReceiptOutput,
            "VALIDATION_ERROR",
            "MISSING_TOKEN",
            "INVALID_TOKEN",
            "EVENT_NOT_FOUND",
            "NO_DRAW",
            "NOT_IN_DRAW",
        ),
    )
    def get(self, request: Request) -> Response:
        return self.answer(services.queue_draw_receipt(**self.validated(request)))


class DrawReceiptsView(Endpoint):
    """The published list: one "<receipt> <position>" line per place of the
    pre-queue, in the order they joined (text/plain; the order changes nothing, the
    draw sorts the receipts). docs/verify_draw.py checks it."""

    Input, Output, source = EventInput, DrawOutput, "query"

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple:
        # The list is text whatever the client accepts; errors stay JSON.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="queue_draw_receipts",
        parameters=[EventInput],
        responses={
            # Text, not JSON: keyed by its media type, or the schema would say JSON.
            (200, "text/plain"): OpenApiResponse(
                {"type": "string"},
                description='"<receipt> <position>" lines, in the order they joined',
            ),
            **{
                status: described
                for status, described in responses(
                    DrawOutput, "VALIDATION_ERROR", "EVENT_NOT_FOUND", "NO_DRAW", "NOT_DRAWN"
                ).items()
                if status != 200
            },
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        lines = draw.receipts_lines(**self.validated(request))
        first = next(lines, b"")  # errors (NOT_DRAWN) are raised before the answer starts
        response = StreamingHttpResponse(chain([first], lines), content_type="text/plain; charset=utf-8")
        response["Cache-Control"] = "public, max-age=3600"  # never changes once drawn
        return response


class BoxOutput(serializers.Serializer):
    x = serializers.FloatField()
    y = serializers.FloatField()
    width = serializers.FloatField()
    height = serializers.FloatField()


class SeatRowOutput(serializers.Serializer):
    row = serializers.CharField(help_text="the row's label, as in the seats' ids")
    y = serializers.FloatField(help_text="where the row is drawn, in map units")
    labels = serializers.ListField(
        child=serializers.CharField(),
        help_text="the row's seats, in index order; a seat's id is `<section>-<row>-<label>`",
    )
    xs = serializers.ListField(
        child=serializers.FloatField(), help_text="each seat's x, as labels (an aisle is a gap in x)"
    )


class SectionOutput(serializers.Serializer):
    id = serializers.CharField(help_text="the section's code, the first part of its seats' ids")
    name = serializers.CharField()
    price = serializers.IntegerField(help_text="per seat, in the currency's minor unit")
    places = serializers.IntegerField(help_text="seats in the section, numbered or not")
    numbered = serializers.BooleanField()
    box = BoxOutput(allow_null=True, help_text="where the section is drawn, when the map says")
    rows = SeatRowOutput(
        many=True,
        help_text="a numbered section's seats (else empty), in index order: a seat's index, its "
        "bit in the section's state, is its running position across these rows",
    )


class SeatMapOutput(serializers.Serializer):
    eventId = serializers.CharField()  # noqa: N815
    currency = serializers.CharField(help_text="ISO 4217, of every price here")
    sections = SectionOutput(
        many=True,
        help_text="in the map's order; an event without a map is one unnumbered section, GA",
    )


EVENT_ID = OpenApiParameter(
    "event_id",
    {"type": "string", "pattern": EVENT_ID_PATTERN, "example": settings.EXAMPLE_EVENT_ID},
    OpenApiParameter.PATH,
    description="the event's id",
)
ETAG = OpenApiParameter(
    "ETag",
    str,
    OpenApiParameter.HEADER,
    response=[200, 304],
    description="the layout's version: send it as If-None-Match to be answered 304 while it is the same",
)
# The layout changes only when the map is replaced; a price changed meanwhile is
# seen at the latest when a browser's copy is this old.
LAYOUT_MAX_AGE = 300
CACHE_CONTROL = OpenApiParameter(
    "Cache-Control",
    str,
    OpenApiParameter.HEADER,
    response=[200, 304],
    description=f"public, max-age={LAYOUT_MAX_AGE}: keep it that long, then ask again with If-None-Match",
)


class SeatMapView(Endpoint):
    """An event's seat map as a browser draws it: its sections, their prices, and
    each numbered seat's place, in the order of the seats' state. It changes only
    when the map is replaced, so browsers keep it (Cache-Control, ETag)."""

    Output = SeatMapOutput

    @extend_schema(
        operation_id="event_seat_map",
        parameters=[EVENT_ID, ETAG, CACHE_CONTROL],
        responses={
            **responses(SeatMapOutput, "VALIDATION_ERROR", "EVENT_NOT_FOUND", "DATABASE_UNAVAILABLE"),
            304: OpenApiResponse(description="If-None-Match names this layout's ETag: keep the copy held"),
        },
    )
    def get(self, request: Request, event_id: str) -> Response:
        found = Event.objects.filter(event_id=services.parse_event_id(event_id)).first()
        if found is None:
            raise DomainError("EVENT_NOT_FOUND")
        # Not through Output: a stadium's seats are tens of thousands of values.
        return Response(envelope(seat_map_layout(found)))

    def finalize_response(
        self, request: Request, response: Response, *args: object, **kwargs: object
    ) -> HttpResponse:
        """A layout answered is tagged with a hash of its body, and a request that
        holds that copy already (If-None-Match) is answered 304."""
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code != 200:
            return response
        response.render()
        response["ETag"] = f'"{hashlib.sha256(response.content).hexdigest()}"'
        patch_cache_control(response, public=True, max_age=LAYOUT_MAX_AGE)
        # An event without a map names its section in the language asked for, which
        # the language cookie may choose as well as Accept-Language.
        patch_vary_headers(response, ["Accept-Language", "Cookie"])
        return get_conditional_response(request, etag=response["ETag"], response=response)


class SectionFreeOutput(serializers.Serializer):
    id = serializers.CharField(help_text="the section's code (GA: an event without a map)")
    price = serializers.IntegerField(help_text="per seat, in the currency's minor unit")
    places = serializers.IntegerField()
    free = serializers.IntegerField(help_text="places neither held, sold nor blocked")
    numbered = serializers.BooleanField()
    state = serializers.CharField(
        allow_null=True,
        help_text="a numbered section's seats, base64: 2 bits a seat in the layout's index order, the "
        "first seat in a byte's high bits; 0 free, 1 held, 2 sold, 3 blocked. Null when unnumbered.",
    )


class SeatsOutput(serializers.Serializer):
    eventId = serializers.CharField()  # noqa: N815
    eventStatus = serializers.ChoiceField(choices=["OPEN", "PAUSED", "CLOSED"])  # noqa: N815
    currency = serializers.CharField()
    seatsLeft = serializers.IntegerField()  # noqa: N815
    refreshedAt = serializers.IntegerField(help_text="when this copy was read (ms); at most 200 ms old")  # noqa: N815
    sections = SectionFreeOutput(many=True)


# How long a browser or a proxy may keep the seats' state: as long as each process
# keeps its copy (QUEUE_LINE_REFRESH_MS, rounded up to the second HTTP can say).
SEATS_MAX_AGE = 1


class SeatsView(Endpoint):
    """Which seats are free now: each section's price and places free, and every
    numbered seat's state. Answered from the process's copy, refreshed every 200 ms
    (queue_app/availability.py): a crowd watching the map costs Redis one read per
    process per refresh."""

    Output = SeatsOutput

    @extend_schema(
        operation_id="event_seats",
        parameters=[EVENT_ID],
        responses=responses(SeatsOutput, "VALIDATION_ERROR", "EVENT_NOT_FOUND", "REDIS_UNAVAILABLE"),
    )
    def get(self, request: Request, event_id: str) -> HttpResponse:
        # Not through Output: the copy's JSON is written once per refresh, for everyone.
        body = availability.seats_available_json(services.parse_event_id(event_id))
        response = HttpResponse(body, content_type="application/json")
        patch_cache_control(response, public=True, max_age=SEATS_MAX_AGE)
        return response


# --- Notify me (queue_app/notify.py) ------------------------------------------------


@extend_schema_field(
    {
        "type": "string",
        "format": "email",
        "maxLength": NOTIFY_EMAIL_MAX,
        "description": "Where to send the one mail, when the place is near the front: a link back to it.",
    }
)
class NotifyEmailField(StrictField):
    parse = staticmethod(notify.parse_email)


class NotifyInput(TokenInput):
    email = NotifyEmailField()


class NotifyOutput(serializers.Serializer):
    eventId = serializers.CharField(source="event_id")  # noqa: N815
    email = serializers.EmailField(help_text="the address the mail goes to")
    language = serializers.ChoiceField(
        choices=[code for code, _ in settings.LANGUAGES],
        help_text="the mail's language: the request's (Accept-Language, or the language cookie)",
    )
    status = serializers.ChoiceField(
        choices=["PENDING", "SENDING", "SENT"],
        help_text="PENDING: mailed when the place is near the front; SENDING, SENT: the mail is going, "
        "or went, out (asked again, nothing changes: it is sent once)",
    )
    aheadSeconds = serializers.IntegerField(  # noqa: N815
        source="ahead_seconds",
        help_text="the mail goes out when the estimated wait (etaSeconds) is this or less, or at "
        "admission, whichever comes first",
    )


class NotifyView(Endpoint):
    """Notify me: an email when this place is near the front (a few minutes by its
    estimated wait), once, in the request's language, with a signed link back to the
    place. For a place waiting in line (or in a scheduled start's pre-queue). Asked
    again for the same token, the address changes (201 the first time, 200 after);
    a mail that went out is never sent again."""

    Input, Output = NotifyInput, NotifyOutput
    throttle_classes = [NotifyThrottle]

    @extend_schema(
        operation_id="queue_notify",
        request=NotifyInput,
        responses={
            201: OpenApiResponse(
                enveloped(NotifyOutput), description="asked for this place: it is mailed when near the front"
            ),
            **responses(
                NotifyOutput,
                "VALIDATION_ERROR",
                "MISSING_TOKEN",
                "INVALID_TOKEN",
                "UNSUPPORTED_MEDIA_TYPE",
                "PAYLOAD_TOO_LARGE",
                "REQUEST_TIMEOUT",
                "EVENT_NOT_FOUND",
                "NOT_WAITING",
                "RATE_LIMIT",
                "DATABASE_UNAVAILABLE",
            ),
            200: OpenApiResponse(
                enveloped(NotifyOutput),
                description="asked before for this place: the mail goes to this address now, unless it went "
                "out already (status SENDING, SENT: nothing changed)",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        asked = notify.notify_request(
            **self.validated(request),
            language=translation.get_language() or "",
            site=request.build_absolute_uri("/").rstrip("/"),
        )
        response = self.answer(asked)
        if asked.created:
            response.status_code = 201
        return response
