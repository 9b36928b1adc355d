"""The crowd's endpoints on ASGI, served from their DRF declarations.

Join, rejoin, leave and poll arrive by the hundred thousand a second during a sale.
Django's request cycle costs more than their own work (one Redis round trip), so for
every view in the URL conf that names a `fast_service` (ticketing/api.py), this lane
answers that view's method at that view's path itself:

- the view's `Input` fields read the query string or the JSON body,
- its throttle classes count (`acheck`, the same Redis limiter),
- its async service runs (one EVALSHA on redis.asyncio),
- its `Output` fields shape the answer, which orjson writes.

Everything else goes to Django's ASGI application: other paths and methods, and any
request the lane would refuse for its form (a body that is not a JSON object, a bad
or missing field, a Host outside ALLOWED_HOSTS), with its body replayed. So every
refusal of form is DRF's (or Django's) own answer, and the lane needs no rules of its
own. Refusals of substance (an unknown event, a closed one, RATE_LIMIT) are
`DomainError`s, rendered as DRF renders them.

Every request's body, on either lane, is read whole here first, up to the body
limit (DATA_UPLOAD_MAX_MEMORY_SIZE, whatever the content type; a larger one is
refused 413 at once): a client that sends its body slowly, or never finishes it,
holds a coroutine until the server's deadline cuts it (ticketing/gunicorn_conf.py),
never one of Django's threads.
"""

import gc
import logging
import time
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl

import orjson
from django.conf import settings
from django.core.exceptions import DisallowedHost, ImproperlyConfigured, RequestDataTooBig
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest
from django.urls import URLPattern, URLResolver, get_resolver
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import serializers
from rest_framework.fields import empty

from ticketing import metrics
from ticketing import redis as r
from ticketing.errors import INTERNAL_ERROR, STATUS, DomainError, describe

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_JSON = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff")]
# Bodies the lane reads itself: JSON in UTF-8, the only encoding orjson reads.
_JSON_TYPES = {
    b"application/json",
    b"application/json; charset=utf-8",
    b"application/json; charset=UTF-8",
    b"application/json;charset=utf-8",
    b"application/json;charset=UTF-8",
}


class FastRoute:
    """One view's declarations, read once: what a request costs is a few calls."""

    __slots__ = ("path", "method", "source", "fields", "throttles", "service", "output", "counted", "client")

    def __init__(self, path: str, view: type) -> None:
        methods = [m for m in ("get", "post", "delete") if hasattr(view, m)]
        if len(methods) != 1:
            raise ValueError(f"{view.__name__}: a fast view serves exactly one method, not {methods}")
        self.path = path
        self.method = methods[0].upper()
        self.source = view.source
        inputs = view.Input().fields.items() if view.Input else ()
        self.fields = [(name, field.source, field.run_validation) for name, field in inputs]
        self.throttles = [throttle() for throttle in view.throttle_classes]
        self.service = view.fast_service
        self.counted = view.counted_refusals
        self.client = view.fast_client
        self.output = [
            (name, field.source, _SHOWN_AS_IS.get(type(field)), field.to_representation)
            for name, field in view.Output().fields.items()
        ]


# Output fields whose to_representation gives back a value of this exact type
# unchanged: such a value is written as it is, without the call.
_SHOWN_AS_IS = {
    serializers.IntegerField: int,
    serializers.CharField: str,
    serializers.ChoiceField: str,  # (the choices are strings that stand for themselves)
    serializers.BooleanField: bool,
}


def find_routes(patterns: list | None = None, prefix: str = "/") -> dict[str, FastRoute]:
    """Path -> FastRoute, for every view of the URL conf that names a fast service."""
    found: dict[str, FastRoute] = {}
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            found |= find_routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            view = getattr(pattern.callback, "cls", None)
            if getattr(view, "fast_service", None) is not None and not pattern.pattern.converters:
                path = prefix + str(pattern.pattern)
                found[path] = FastRoute(path, view)
    return found


class _Refused(Exception):
    """The request's form is not one the lane serves: Django's lane answers it."""


class _TooLarge(Exception):
    """The body is over the limit, as declared or as it came."""


# Django's lane's answer to a body over the limit (RequestDataTooBig), given here.
_TOO_LARGE = describe(RequestDataTooBig())


async def _read_body(scope: Scope, receive: Receive) -> bytes | None:
    """The request's whole body, or None when the client left first; _TooLarge past
    DATA_UPLOAD_MAX_MEMORY_SIZE, declared or sent (the rest is never read)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    for name, value in scope["headers"]:
        if name == b"content-length" and int(value) > limit:  # (httptools let only digits through)
            raise _TooLarge
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            raise _TooLarge
        if not message.get("more_body", False):
            return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for Django: the body read, then the client's connection (its end)."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _measured(scope: Scope, body: bytes) -> Scope:
    """The scope Django gets: a chunked body (no Content-Length) is given the length
    of what was read, so that Django's WSGI request reads it rather than nothing."""
    headers = scope["headers"]
    if not any(name == b"transfer-encoding" for name, _ in headers):
        return scope
    kept = [(name, value) for name, value in headers if name not in (b"transfer-encoding", b"content-length")]
    return {**scope, "headers": [*kept, (b"content-length", str(len(body)).encode())]}


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], payload: bytes) -> None:
    # With its length known, the answer goes out whole, not as chunks.
    headers = [*headers, (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class FastLane:
    """ASGI: the fast routes, then Django's lane (`app`) for everything else."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._routes: dict[str, FastRoute] | None = None

    @property
    def routes(self) -> dict[str, FastRoute]:
        if self._routes is None:
            if settings.USE_X_FORWARDED_HOST:
                raise ImproperlyConfigured("USE_X_FORWARDED_HOST: the fast lane checks the Host header only")
            self._routes = find_routes()
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = self.routes.get(scope["path"])
        if route is not None and scope["method"] == route.method:
            return await self.serve(route, scope, receive, send)
        await self.django(scope, receive, send)

    async def django(self, scope: Scope, receive: Receive, send: Send, body: bytes | None = None) -> None:
        """Django's lane, once the whole body is read (or with `body`, read already)."""
        if body is None:
            try:
                body = await _read_body(scope, receive)
            except _TooLarge:
                return await _send(send, _TOO_LARGE.status, _JSON, orjson.dumps(_TOO_LARGE.body()))
            if body is None:
                return  # the client left
        await self.app(_measured(scope, body), _replay(body, receive), send)

    async def serve(self, route: FastRoute, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        body = None
        try:
            if route.source != "query":
                body = await _read_body(scope, receive)
                if body is None:
                    return  # the client left
            if not _host_allowed(scope):
                raise _Refused  # Django's lane refuses it, as it refuses any other
            if route.client is not None and _has_session(scope):
                raise _Refused  # a signed-in person: Django's lane knows the account
            data = _input(route, scope, body)
            kwargs = {source: parse(data.get(name, empty)) for name, source, parse in route.fields}
        except _TooLarge:
            return await _send(send, _TOO_LARGE.status, _JSON, orjson.dumps(_TOO_LARGE.body()))
        except (_Refused, DomainError):
            return await self.django(scope, receive, send, body)
        try:
            # (Every Redis command of the lane is bounded by the batcher's timer.)
            if route.throttles or route.client is not None:
                meta = _meta(scope)
                for throttle in route.throttles:
                    await throttle.acheck(meta)
                if route.client is not None:
                    kwargs["client"] = route.client(meta)
            result = await route.service(**kwargs)
            data = {}
            for name, source, kind, shape in route.output:
                value = getattr(result, source)
                data[name] = value if value is None or type(value) is kind else shape(value)
            status, headers, payload = 200, _JSON, orjson.dumps({"success": True, "data": data})
        except Exception as exc:  # every answer is in the envelope, a bug's too
            if isinstance(exc, TimeoutError):
                exc = RedisTimeoutError("no answer from Redis in time")
            err = describe(exc)
            if err is None:
                log.exception("%s %s failed", scope["method"], scope["path"])
                err = INTERNAL_ERROR
            elif err.code in route.counted:
                await r.acount_refusal(kwargs.get("event_id", settings.EVENT_ID), route.counted[err.code])
            status, payload = STATUS[err.code], orjson.dumps(err.body())
            headers = _JSON + [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
        await _send(send, status, headers, payload)
        metrics.observe_request(route.path, time.perf_counter() - start)  # not when Django's lane answered

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.routes  # noqa: B018 (read the declarations once, before the first request)
                # Everything loaded so far lives as long as the worker: out of the
                # collector's sight, a full collection no longer walks it (which
                # otherwise stalls every request in flight for tens of ms).
                gc.collect()
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await r.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _input(route: FastRoute, scope: Scope, body: bytes | None) -> dict:
    """The request's input as the view's Input reads it (the query string, or the
    JSON body), or _Refused."""
    if body is None:
        try:
            query = scope["query_string"].decode("ascii")
        except UnicodeDecodeError:
            raise _Refused from None
        return _query(query)
    if not body:
        return {}  # `curl -X POST`: no body is {}
    content_type = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value
    if content_type not in _JSON_TYPES:
        raise _Refused  # DRF decides what else it accepts (other charsets too), and says so
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _Refused from None
    if not isinstance(data, dict):
        raise _Refused
    return data


def _host_allowed(scope: Scope) -> bool:
    """Whether Django's lane would accept the request's Host; without one (HTTP/1.0)
    it takes the server's own name, and decides."""
    for name, value in scope["headers"]:
        if name == b"host":
            return _allowed_host(value)
    return False


@lru_cache(maxsize=64)
def _allowed_host(host: bytes) -> bool:
    """Django's own check (HttpRequest.get_host: ALLOWED_HOSTS, and DEBUG's local
    names when it is empty), once per Host a process sees."""
    request = HttpRequest()
    request.META = {"HTTP_HOST": host.decode("latin-1")}
    try:
        request.get_host()
    except DisallowedHost:
        return False
    return True


@receiver(setting_changed)
def _forget_hosts(*, setting: str, **kwargs: Any) -> None:
    if setting in ("ALLOWED_HOSTS", "DEBUG"):  # tests change them
        _allowed_host.cache_clear()


def _query(query: str) -> dict[str, str]:
    """The query string's fields, as `parse_qsl` reads them (blank values kept, the
    last of a repeated name wins); without escapes, split here, at a fraction of its
    cost on every poll."""
    if "%" in query or "+" in query:
        return dict(parse_qsl(query, keep_blank_values=True))
    fields = {}
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            fields[name] = value
    return fields


def _has_session(scope: Scope) -> bool:
    name = settings.SESSION_COOKIE_NAME.encode() + b"="
    return any(key == b"cookie" and name in value for key, value in scope["headers"])


def _meta(scope: Scope) -> dict[str, str]:
    """The parts of a WSGI environ the throttles read: the peer and X-Forwarded-For."""
    meta = {"REMOTE_ADDR": scope["client"][0] if scope.get("client") else ""}
    hops = [value.decode("latin-1") for name, value in scope["headers"] if name == b"x-forwarded-for"]
    if hops:
        meta["HTTP_X_FORWARDED_FOR"] = ",".join(hops)  # as Django joins repeated headers
    return meta
