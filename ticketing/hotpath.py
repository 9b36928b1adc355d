"""The hot JSON endpoints, answered straight from the WSGI environ.

A sale's crowd sends join, rejoin, leave, poll (and, once admitted, book) millions
of times. Django's request handling, middleware, URL resolving and DRF together
cost more than these requests' own work (one Redis round trip; for a booking, one
more and a Postgres commit): docs/benchmarks.md has the profiles. So these
handlers take the environ, call one service and answer in the envelope.

`HotPaths` wraps the WSGI application (ticketing/wsgi.py). `HotPathMiddleware`
serves the same handlers at the top of the middleware stack, for requests that
enter through Django itself (the test client, runserver).
"""

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import NamedTuple
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.signals import request_finished, request_started
from django.http import HttpRequest, HttpResponse

from ticketing.errors import ApiError, api_error_for, envelope, validation_error

log = logging.getLogger(__name__)

Environ = Mapping[str, object]
Handler = Callable[[Environ], dict]
Answer = tuple[int, list[tuple[str, str]], bytes]


class Route(NamedTuple):
    method: str
    handler: Handler
    database: bool = False  # does it use the database (then it gets Django's request signals)?


def json_body(environ: Environ) -> dict:
    """The body as a JSON object; an empty body is `{}` (`curl -X POST`)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise validation_error("Content-Length is not a number.") from None
    if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise ApiError(413, "PAYLOAD_TOO_LARGE", "The request body is too large.")
    if length <= 0:
        return {}
    body = environ["wsgi.input"].read(length)
    content_type = str(environ.get("CONTENT_TYPE", "")).split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        raise ApiError(415, "UNSUPPORTED_MEDIA_TYPE", "Send the body as application/json.")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise validation_error(f"The body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise validation_error("The body must be a JSON object.")
    return data


def query(environ: Environ) -> dict[str, str]:
    """The query string's parameters (the last of repeated ones, as QueryDict.get)."""
    # WSGI hands the raw bytes over as latin-1; percent-escapes are UTF-8.
    raw = str(environ.get("QUERY_STRING", "")).encode("latin-1").decode("utf-8", "replace")
    return dict(parse_qsl(raw, keep_blank_values=True))


_ROUTES: dict[str, Route] = {}


def routes() -> dict[str, Route]:
    """Path -> Route, collected from the apps on first use."""
    if not _ROUTES:
        from booking_app.api import ROUTES as booking
        from queue_app.api import ROUTES as queue

        _ROUTES.update(queue)
        _ROUTES.update(booking)
    return _ROUTES


def route_for(environ: Environ) -> Route | None:
    """The hot-path route of a request, or None when its path is not one."""
    return routes().get(str(environ.get("PATH_INFO", "")))


def respond(route: Route, environ: Environ) -> Answer:
    method, handler, _ = route
    headers = [("Content-Type", "application/json"), ("X-Content-Type-Options", "nosniff")]
    if environ.get("REQUEST_METHOD") != method:
        err = ApiError(405, "METHOD_NOT_ALLOWED", f'Method "{environ.get("REQUEST_METHOD")}" not allowed.')
        return 405, [*headers, ("Allow", method)], _dumps(err.body())
    try:
        return 200, headers, _dumps(envelope(handler(environ)))
    except Exception as exc:  # every answer is in the envelope, a bug's too
        err = api_error_for(exc)
        if err is None:
            log.exception("%s %s failed", method, environ.get("PATH_INFO"))
            err = ApiError(500, "INTERNAL_ERROR", "Something went wrong on our side.")
        return err.status, headers + list((err.headers or {}).items()), _dumps(err.body())


def _dumps(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class HotPaths:
    """WSGI: the hot endpoints, then the Django application for everything else."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        route = route_for(environ)
        if route is None:
            return self.app(environ, start_response)
        if not route.database:
            status, headers, body = respond(route, environ)
        else:
            # Django's request signals, as its own handler sends them: they drop
            # broken or expired database connections.
            request_started.send(sender=self.__class__, environ=environ)
            try:
                status, headers, body = respond(route, environ)
            finally:
                request_finished.send(sender=self.__class__)
        start_response(
            f"{status} {HTTPStatus(status).phrase}", [*headers, ("Content-Length", str(len(body)))]
        )
        return [body]


class HotPathMiddleware:
    """The same handlers for requests that enter through Django (tests, runserver)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        route = route_for(request.META)
        if route is None:
            return self.get_response(request)
        status, headers, body = respond(route, request.META)
        return HttpResponse(body, status=status, headers=dict(headers))
