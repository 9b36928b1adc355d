"""Errors as values with a code, and the one place that renders the JSON envelope.

Clients and tests branch on `error.code`, never on the message, so every refusal
has a stable code: `{"success": false, "error": {"code": ..., "message": ...}}`.
"""

import logging
from collections.abc import Callable

import redis
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework import exceptions as drf
from rest_framework.response import Response

log = logging.getLogger(__name__)

# Any trouble with Redis: unreachable, too slow, read-only after a failover, busy
# with a script, out of memory, or a key of the wrong type. None of it is the
# client's fault: it gets a 503 and may retry.
REDIS_ERRORS = (redis.RedisError,)


class ApiError(Exception):
    """A refusal the client should see: HTTP status, stable code, human message."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict | None = None, **extra: object
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers  # e.g. Retry-After of RATE_LIMIT
        self.extra = extra  # e.g. the existing reservationId of ALREADY_BOOKED

    def body(self) -> dict:
        return {"success": False, "error": {"code": self.code, "message": self.message, **self.extra}}


def validation_error(message: str) -> ApiError:
    return ApiError(400, "VALIDATION_ERROR", message)


def envelope(data: dict) -> dict:
    return {"success": True, "data": data}


def api_error_for(exc: Exception) -> ApiError | None:
    """The client's view of an exception; None for a bug (a 500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        return ApiError(413, "PAYLOAD_TOO_LARGE", "The request body is too large.")
    if isinstance(exc, drf.ParseError):
        return validation_error(f"The body is not valid JSON: {exc.detail}")
    if isinstance(exc, drf.UnsupportedMediaType):
        return ApiError(415, "UNSUPPORTED_MEDIA_TYPE", "Send the body as application/json.")
    if isinstance(exc, drf.MethodNotAllowed):
        return ApiError(405, "METHOD_NOT_ALLOWED", str(exc.detail))
    if isinstance(exc, drf.NotAcceptable):
        return ApiError(406, "NOT_ACCEPTABLE", "This endpoint answers application/json.")
    if isinstance(exc, drf.NotFound):
        return ApiError(404, "NOT_FOUND", "No such resource.")
    if isinstance(exc, drf.ValidationError):
        return validation_error(str(exc.detail))
    if isinstance(exc, drf.Throttled):
        return ApiError(429, "RATE_LIMIT", "Too many requests.")
    if isinstance(exc, drf.APIException):
        return ApiError(exc.status_code, exc.default_code.upper(), str(exc.detail))
    if isinstance(exc, SuspiciousOperation):
        return ApiError(400, "BAD_REQUEST", "The request was refused.")
    if isinstance(exc, REDIS_ERRORS):
        # Not the client's fault: say "try again" rather than 500.
        log.error("Redis error: %r", exc)
        return ApiError(503, "REDIS_UNAVAILABLE", "The waiting room is briefly unavailable; try again.")
    if isinstance(exc, DatabaseError):
        log.error("database error: %r", exc)
        return ApiError(503, "DATABASE_UNAVAILABLE", "The service is briefly unavailable; try again.")
    return None


def drf_exception_handler(exc: Exception, context: dict) -> Response | None:
    err = api_error_for(exc)
    if err is None:
        return None  # a bug: Django's handler500 renders it
    return Response(err.body(), status=err.status, headers=err.headers)


def _wants_html(request: HttpRequest) -> bool:
    # The JSON API always answers in the envelope; a browser on a page gets a page.
    if request.path.startswith(("/api/", "/health")):
        return False
    return "text/html" in request.headers.get("Accept", "")


def _page(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    if _wants_html(request):
        try:
            return render(request, f"{status}.html", {"message": message}, status=status)
        except Exception:  # a broken page template must not hide the original error
            log.exception("error page %s failed", status)
            return HttpResponse(message, status=status, content_type="text/plain")
    return JsonResponse(ApiError(status, code, message).body(), status=status)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    err = (api_error_for(exception) if exception else None) or ApiError(400, "BAD_REQUEST", "Bad request.")
    return _page(request, err.status, err.code, err.message)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _page(request, 403, "FORBIDDEN", "Forbidden.")


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    return _page(request, 403, "CSRF_FAILED", "The form expired; reload the page and try again.")


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _page(request, 404, "NOT_FOUND", f"No such page: {request.path}")


class ServiceTroubleMiddleware:
    """Redis or the database in trouble while a page or a DRF view is served: a 503
    with a code (a page for a browser, else the envelope), never a bare 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (*REDIS_ERRORS, DatabaseError)):
            return None
        err = api_error_for(exception)
        return _page(request, err.status, err.code, err.message)


def handler500(request: HttpRequest) -> HttpResponse:
    return _page(request, 500, "INTERNAL_ERROR", "Something went wrong on our side.")
