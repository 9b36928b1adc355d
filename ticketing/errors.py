"""Errors as values with a code, and the one place that turns them into answers.

Services raise `DomainError(code, message, **details)` and know nothing of HTTP.
`CODES` holds each code once: its HTTP status, for every lane (DRF views through
`drf_exception_handler`, the ASGI fast lane `ticketing/fastlane.py`, the pages), its
meaning for the schema, and the message a refusal carries unless it says more.
Clients and tests branch on `error.code`, never on the message:
`{"success": false, "error": {"code": ..., "message": ..., **details}}`.
"""

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import redis
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.settings import api_settings

from ticketing import unreachable

log = logging.getLogger(__name__)

# Any trouble with Redis: unreachable, too slow, read-only after a failover, busy
# with a script, out of memory, or a key of the wrong type; on a Redis Cluster also
# a cluster that is down or a slot no node serves, which redis-py raises partly as
# RedisClusterException, no RedisError. None of it is the client's fault: it gets a
# 503 and may retry.
REDIS_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)


@dataclass(frozen=True, slots=True)
class Code:
    status: int
    meaning: str  # what it tells a client, for the schema's error responses
    message: str  # what the envelope says, unless the refusal says more


# Every code the service answers, once. Clients and tests branch on the code.
CODES: dict[str, Code] = {
    # The client's mistakes: nothing changed, fix the request.
    "VALIDATION_ERROR": Code(
        400, "a field is missing, of the wrong type, or out of range", "The request is not valid."
    ),
    "MISSING_TOKEN": Code(400, "no token was sent", "token is required."),
    "BAD_REQUEST": Code(400, "the request could not be read", "Bad request."),
    "BUYER_REQUIRED": Code(
        400,
        "this event caps seats per buyer: name the buyer (`buyerEmail`, or sign in)",
        "This event caps the seats per buyer: send buyerEmail, or sign in.",
    ),
    "ACCOUNT_REQUIRED": Code(
        401, "this event needs a signed-in account (a session cookie)", "Sign in to take part in this event."
    ),
    "EVENT_CLOSED": Code(403, "the event does not accept this now", "This event's sale is not open."),
    "EVENT_REJECTING": Code(
        403,
        "the operator has stopped new places for now (the event's mode is reject); places already "
        "in line are kept",
        "This line is not taking new people right now. Please try again later.",
    ),
    "PROOF_OF_WORK": Code(
        403,
        "this event needs a solved challenge (GET /api/queue/challenge) in `altcha`; it was missing, "
        "wrong, expired, used before, or of a challenge easier than the event asks now",
        "This event needs a proof of work: GET /api/queue/challenge.",
    ),
    "EMAIL_UNCONFIRMED": Code(
        403,
        "this event needs an account whose email address is confirmed (ACCOUNTS_REQUIRE_CONFIRMED_EMAIL): "
        "the link sent from /accounts/confirm/ confirms it",
        "Confirm your email address to join this event's line.",
    ),
    # A presale (queue_app/presale.py): a new place needs a code or the allow-list.
    "PRESALE_CODE_REQUIRED": Code(
        403,
        "the event is in its presale: a new place needs a presale code (`presaleCode`) or a signed-in "
        "account on the event's allow-list",
        "This sale is in its presale: join with a presale code, or sign in with an account on its list.",
    ),
    "PRESALE_CODE_INVALID": Code(
        403,
        "the event is in its presale and `presaleCode` is none of its codes; nothing was spent",
        "This presale code is not valid for this sale.",
    ),
    "NOT_ACTIVE": Code(
        403,
        "the token is not in its booking window",
        "This token is not in its booking window (wait in line, or rejoin).",
    ),
    "INVALID_TOKEN": Code(
        403,
        "the token was not issued by this service for this event",
        "This token was not issued for this event.",
    ),
    "FORBIDDEN": Code(403, "not allowed", "Forbidden."),
    "CSRF_FAILED": Code(
        403,
        "a signed-in request without the X-CSRFToken header of its csrftoken cookie",
        "Send the X-CSRFToken header of the page's csrftoken cookie.",
    ),
    "NOT_FOUND": Code(404, "no such resource", "No such resource."),
    "EVENT_NOT_FOUND": Code(404, "no such event", "No such event."),
    "RESERVATION_NOT_FOUND": Code(
        404, "no such reservation for this token", "No such reservation for this token."
    ),
    "NO_DRAW": Code(
        404, "the event has no scheduled start, so no draw", "This event has no scheduled start, so no draw."
    ),
    "RECEIPT_NOT_FOUND": Code(
        404, "no place of this draw has this receipt", "No place of this draw has this receipt."
    ),
    "NOT_IN_DRAW": Code(
        404,
        "this place is not in the draw: it joined after the scheduled start, or left",
        "This place is not in the draw: it joined after the start, or left.",
    ),
    "METHOD_NOT_ALLOWED": Code(405, "another HTTP method is expected", "Method not allowed."),
    "NOT_ACCEPTABLE": Code(
        406,
        "the Accept header names no type this endpoint answers (it answers application/json)",
        "This endpoint answers application/json.",
    ),
    "REQUEST_TIMEOUT": Code(
        408,
        "the request did not arrive whole within the server's deadline (10 s by default); "
        "the connection is closed",
        "The request did not arrive in time.",
    ),
    "ALREADY_BOOKED": Code(
        409, "the token has booked (reservationId names the booking)", "This token has already booked."
    ),
    "PRESALE_CODE_USED_UP": Code(
        409,
        "the event is in its presale and `presaleCode` has given all the places it gives",
        "This presale code has been used as many times as it allows.",
    ),
    "NOT_WAITING": Code(
        409,
        "the token is not waiting for its turn (admitted, booked, expired, or it left the line): "
        "there is nothing to notify it of",
        "This place is not waiting in line, so there is nothing to notify you of.",
    ),
    "SOLD_OUT": Code(409, "no seats left", "Sold out."),
    "SECTION_SOLD_OUT": Code(
        409,
        "no places left in the section asked for (other sections may have some)",
        "This section is sold out.",
    ),
    "SECTION_NOT_FOUND": Code(404, "the event's seat map has no such section", "No such section."),
    "SEAT_NOT_FOUND": Code(
        404, "seats names seat ids the event's map does not have (seats lists them)", "No such seat."
    ),
    "SEAT_TAKEN": Code(
        409,
        "a seat asked for is held, sold or blocked (seats lists which); nothing was held",
        "Someone else just took a seat you chose.",
    ),
    "NO_ADJACENT_SEATS": Code(
        409,
        "the section has no run of that many adjacent free seats (remainingSeats: its places left)",
        "No seats side by side are left in this section.",
    ),
    "INSUFFICIENT_SEATS": Code(
        409,
        "fewer seats left than asked for (remainingSeats says how many)",
        "Not enough seats left for this booking.",
    ),
    "ALREADY_CANCELLED": Code(
        409, "the reservation was cancelled before", "This reservation was already cancelled."
    ),
    "NOT_HELD": Code(
        409,
        "the reservation is not awaiting payment (status says what it is)",
        "This booking is not awaiting payment.",
    ),
    "HOLD_EXPIRED": Code(
        409,
        "the hold ran out before the payment: its seats went back on sale and nothing was charged",
        "The time to pay ran out; the seats went back on sale and nothing was charged.",
    ),
    "SEAT_CAP": Code(
        409,
        "this buyer (account or email) would hold more than the event's most seats per buyer "
        "(seatsAllowed says how many more)",
        "This buyer may book no more seats for this event.",
    ),
    "NOT_DRAWN": Code(
        409,
        "the draw happens at the scheduled start; this is published after it",
        "The order is drawn at the scheduled start.",
    ),
    "PAYMENT_DECLINED": Code(
        402,
        "the payment provider declined the payment; the seats went back on sale",
        "The payment was declined; nothing was charged and the seats went back on sale.",
    ),
    "PAYLOAD_TOO_LARGE": Code(413, "the body is over 10 KB", "The request body is too large."),
    "UNSUPPORTED_MEDIA_TYPE": Code(
        415, "the body is not application/json", "Send the body as application/json."
    ),
    "RATE_LIMIT": Code(
        429, "too many requests from this client; wait Retry-After seconds", "Too many requests; slow down."
    ),
    # Shared connections (a household's Wi-Fi, an office, a mobile carrier's NAT) put
    # many people behind one address: the refusal says so, and what each can do,
    # without telling them they hold places they may never have taken.
    "TOO_MANY_PLACES": Code(
        429,
        "this client address already holds the event's most live places",
        "This connection already has as many places in line as this event allows. Connections "
        "are often shared: by a household, an office, or many people on one mobile carrier. Try "
        "another connection (for example mobile data instead of Wi-Fi), or try again later: a "
        "place frees up when someone on this connection leaves the line, books, or their turn ends.",
    ),
    # The service's own trouble: try again.
    "INTERNAL_ERROR": Code(500, "a fault of the service; it is logged", "Something went wrong on our side."),
    "REDIS_UNAVAILABLE": Code(
        503,
        "the waiting room's store is briefly unavailable; try again",
        "The waiting room is briefly unavailable; try again.",
    ),
    "DATABASE_UNAVAILABLE": Code(
        503,
        "the database is briefly unavailable; try again",
        "The service is briefly unavailable; try again.",
    ),
    "PAYMENT_UNAVAILABLE": Code(
        503,
        "the payment provider did not answer; the seats stay held until the hold ends: try again",
        "The payment could not be completed just now; your seats are still held. Try again.",
    ),
    "BOOKING_NOT_SAVED": Code(503, "nothing was booked; try again", "Nothing was booked; try again."),
    "BOOKING_PENDING": Code(
        503,
        "the seats are held and the booking is being saved; poll to see it",
        "The booking is being confirmed; poll to see it.",
    ),
}
# Each code's HTTP status, for every lane.
STATUS: dict[str, int] = {code: c.status for code, c in CODES.items()}


class DomainError(Exception):
    """A refusal the client should see: a stable code, a human message, details."""

    def __init__(
        self, code: str, message: str | None = None, *, retry_after: int | None = None, **details: object
    ) -> None:
        """`message` only where the refusal says more than its code's (CODES)."""
        message = message or CODES[code].message
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after  # seconds, for RATE_LIMIT's Retry-After header
        self.details = details  # e.g. the existing reservationId of ALREADY_BOOKED

    @property
    def status(self) -> int:
        return STATUS[self.code]

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}

    def body(self) -> dict:
        return {"success": False, "error": {"code": self.code, "message": self.message, **self.details}}


def validation_error(message: str) -> DomainError:
    return DomainError("VALIDATION_ERROR", message)


def envelope(data: dict) -> dict:
    return {"success": True, "data": data}


INTERNAL_ERROR = DomainError("INTERNAL_ERROR")


def rate_limited(wait: float | None) -> DomainError:
    """RATE_LIMIT, with Retry-After: the whole seconds until the window ends."""
    return DomainError("RATE_LIMIT", retry_after=max(1, math.ceil(wait or 1)))


def _first_message(detail: object) -> str:
    """The first message of a DRF ValidationError's detail, prefixed by its field."""
    if isinstance(detail, dict):
        name, inner = next(iter(detail.items()))
        text = _first_message(inner)
        return text if name == api_settings.NON_FIELD_ERRORS_KEY else f"{name}: {text}"
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def describe(exc: Exception) -> DomainError | None:
    """The client's view of an exception; None for a bug (a 500)."""
    if isinstance(exc, DomainError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        return DomainError("PAYLOAD_TOO_LARGE")
    if isinstance(exc, drf.ParseError):
        return validation_error(f"The body is not valid JSON: {exc.detail}")
    if isinstance(exc, drf.UnsupportedMediaType):
        return DomainError("UNSUPPORTED_MEDIA_TYPE")
    if isinstance(exc, drf.MethodNotAllowed):
        return DomainError("METHOD_NOT_ALLOWED", str(exc.detail))
    if isinstance(exc, drf.NotAcceptable):
        return DomainError("NOT_ACCEPTABLE")
    if isinstance(exc, drf.NotFound):
        return DomainError("NOT_FOUND")
    if isinstance(exc, drf.PermissionDenied) and str(exc.detail).startswith("CSRF Failed"):
        # A signed-in request without the page's CSRF token (DRF's SessionAuthentication).
        return DomainError("CSRF_FAILED")
    if isinstance(exc, drf.ValidationError):
        return validation_error(_first_message(exc.detail))
    if isinstance(exc, drf.Throttled):
        return rate_limited(exc.wait)
    if isinstance(exc, SuspiciousOperation):
        return DomainError("BAD_REQUEST", "The request was refused.")
    if isinstance(exc, REDIS_ERRORS):
        log.error("Redis at %s: %r", unreachable.redis_address(), exc)
        return DomainError("REDIS_UNAVAILABLE")
    if isinstance(exc, DatabaseError):
        log.error("Postgres at %s: %r", unreachable.database_address(), exc)
        return DomainError("DATABASE_UNAVAILABLE")
    return None


def drf_exception_handler(exc: Exception, context: dict) -> Response:
    err = describe(exc)
    if err is None:
        request = context.get("request")
        log.exception("%s %s failed", request.method if request else "", request.path if request else "")
        err = INTERNAL_ERROR
    return Response(err.body(), status=err.status, headers=err.headers)


def _wants_html(request: HttpRequest) -> bool:
    # The JSON API always answers in the envelope; a browser on a page gets a page.
    if request.path.startswith(("/api/", "/health")):
        return False
    return "text/html" in request.headers.get("Accept", "")


def _page(request: HttpRequest, err: DomainError) -> HttpResponse:
    if _wants_html(request):
        try:
            return render(request, f"{err.status}.html", {"message": err.message}, status=err.status)
        except Exception:  # a broken page template must not hide the original error
            log.exception("error page %s failed", err.status)
            return HttpResponse(err.message, status=err.status, content_type="text/plain")
    return JsonResponse(err.body(), status=err.status)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    err = (describe(exception) if exception else None) or DomainError("BAD_REQUEST")
    return _page(request, err)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _page(request, DomainError("FORBIDDEN"))


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    return _page(request, DomainError("CSRF_FAILED", "The form expired; reload the page and try again."))


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _page(request, DomainError("NOT_FOUND", f"No such page: {request.path}"))


def handler500(request: HttpRequest) -> HttpResponse:
    return _page(request, INTERNAL_ERROR)


class ServiceTroubleMiddleware:
    """Redis or the database in trouble while a page is served: a 503 with a code
    (a page for a browser, else the envelope), never a bare 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (*REDIS_ERRORS, DatabaseError)):
            return None
        return _page(request, describe(exception))
