"""Errors as values with a code, and the one place that turns them into answers.

Services raise `DomainError(code, message, **details)` and know nothing of HTTP.
`STATUS` maps each code to its HTTP status, for every lane: DRF views (through
`drf_exception_handler`), the ASGI fast lane (`ticketing/fastlane.py`) and the pages.
Clients and tests branch on `error.code`, never on the message:
`{"success": false, "error": {"code": ..., "message": ..., **details}}`.
"""

import logging
import math
from collections.abc import Callable

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

STATUS: dict[str, int] = {
    # The client's mistakes: nothing changed, fix the request.
    "VALIDATION_ERROR": 400,
    "MISSING_TOKEN": 400,
    "BAD_REQUEST": 400,
    "BUYER_REQUIRED": 400,
    "ACCOUNT_REQUIRED": 401,
    "EVENT_CLOSED": 403,
    "PROOF_OF_WORK": 403,
    "EMAIL_UNCONFIRMED": 403,
    "NOT_ACTIVE": 403,
    "INVALID_TOKEN": 403,
    "FORBIDDEN": 403,
    "CSRF_FAILED": 403,
    "NOT_FOUND": 404,
    "EVENT_NOT_FOUND": 404,
    "RESERVATION_NOT_FOUND": 404,
    "NO_DRAW": 404,
    "RECEIPT_NOT_FOUND": 404,
    "NOT_IN_DRAW": 404,
    "METHOD_NOT_ALLOWED": 405,
    "NOT_ACCEPTABLE": 406,
    "REQUEST_TIMEOUT": 408,
    "ALREADY_BOOKED": 409,
    "SOLD_OUT": 409,
    "INSUFFICIENT_SEATS": 409,
    "ALREADY_CANCELLED": 409,
    "SEAT_CAP": 409,
    "NOT_DRAWN": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "RATE_LIMIT": 429,
    "TOO_MANY_PLACES": 429,
    # The service's own trouble: try again.
    "INTERNAL_ERROR": 500,
    "REDIS_UNAVAILABLE": 503,
    "DATABASE_UNAVAILABLE": 503,
    "BOOKING_NOT_SAVED": 503,
    "BOOKING_PENDING": 503,
}


class DomainError(Exception):
    """A refusal the client should see: a stable code, a human message, details."""

    def __init__(self, code: str, message: str, *, retry_after: int | None = None, **details: object) -> None:
        super().__init__(message)
        assert code in STATUS, code
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


INTERNAL_ERROR = DomainError("INTERNAL_ERROR", "Something went wrong on our side.")


def rate_limited(wait: float | None) -> DomainError:
    """RATE_LIMIT, with Retry-After: the whole seconds until the window ends."""
    return DomainError(
        "RATE_LIMIT", "Too many requests; slow down.", retry_after=max(1, math.ceil(wait or 1))
    )


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
        return DomainError("PAYLOAD_TOO_LARGE", "The request body is too large.")
    if isinstance(exc, drf.ParseError):
        return validation_error(f"The body is not valid JSON: {exc.detail}")
    if isinstance(exc, drf.UnsupportedMediaType):
        return DomainError("UNSUPPORTED_MEDIA_TYPE", "Send the body as application/json.")
    if isinstance(exc, drf.MethodNotAllowed):
        return DomainError("METHOD_NOT_ALLOWED", str(exc.detail))
    if isinstance(exc, drf.NotAcceptable):
        return DomainError("NOT_ACCEPTABLE", "This endpoint answers application/json.")
    if isinstance(exc, drf.NotFound):
        return DomainError("NOT_FOUND", "No such resource.")
    if isinstance(exc, drf.PermissionDenied) and str(exc.detail).startswith("CSRF Failed"):
        # A signed-in request without the page's CSRF token (DRF's SessionAuthentication).
        return DomainError("CSRF_FAILED", "Send the X-CSRFToken header of the page's csrftoken cookie.")
    if isinstance(exc, drf.ValidationError):
        return validation_error(_first_message(exc.detail))
    if isinstance(exc, drf.Throttled):
        return rate_limited(exc.wait)
    if isinstance(exc, SuspiciousOperation):
        return DomainError("BAD_REQUEST", "The request was refused.")
    if isinstance(exc, REDIS_ERRORS):
        log.error("Redis at %s: %r", unreachable.redis_address(), exc)
        return DomainError("REDIS_UNAVAILABLE", "The waiting room is briefly unavailable; try again.")
    if isinstance(exc, DatabaseError):
        log.error("Postgres at %s: %r", unreachable.database_address(), exc)
        return DomainError("DATABASE_UNAVAILABLE", "The service is briefly unavailable; try again.")
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
    err = (describe(exception) if exception else None) or DomainError("BAD_REQUEST", "Bad request.")
    return _page(request, err)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _page(request, DomainError("FORBIDDEN", "Forbidden."))


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
