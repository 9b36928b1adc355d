"""The crowd's endpoints on ASGI, served from their DRF declarations.

Join, rejoin, leave and poll arrive by the hundred thousand a second during a sale.
Django's request cycle costs more than their own work (one Redis round trip), so for
every view in the URL conf that names a `fast_service` (ticketing/api.py), this lane
answers that view's method at that view's path itself:

- the view's `Input` fields read the query string or the JSON body,
- its throttle classes count (`acheck`, the same Redis limiter),
- its renderer is chosen as DRF chooses it (`Accept`, `?format=`): what DRF refuses
  (text/html, application/xml) is refused here in the same words, what it accepts is
  answered here (but JSON asked with parameters, such as indent, goes to Django's lane),
- its async service runs (one EVALSHA on redis.asyncio),
- its `Output` fields shape the answer, which orjson writes.

Everything else goes to Django's ASGI application: other paths and methods, and any
request the lane would refuse for its form (a body that is not a JSON object, a bad
or missing field, a Host outside ALLOWED_HOSTS), with its body replayed. So every
refusal of form is DRF's (or Django's) own answer, and the lane needs no rules of its
own. Refusals of substance (an unknown event, a closed one, RATE_LIMIT) are
`DomainError`s, rendered as DRF renders them.

What the lane does in DRF's place (renderers, parsers, permissions, authentication,
negotiation, versioning) it does for DRF's declarations of it (`HONOURED`). A fast view
that declares anything else is refused when the routes are read, at start-up: served
here it would answer by rules it does not declare.

The production server hands the lane a fast route's request whole, body and all,
without ASGI's messages (`FastLane.whole`, ticketing/gunicorn_conf.py: Protocol);
the lane answers it as it answers through ASGI (`serve`), from the same `_asked`
and `answer`.

Every request's body, on either lane, is read whole here first, up to the body
limit (DATA_UPLOAD_MAX_MEMORY_SIZE, whatever the content type; a larger one is
refused 413 at once): a client that sends its body slowly, or never finishes it,
holds a coroutine until the server's deadline cuts it (ticketing/gunicorn_conf.py),
never one of Django's threads.
"""

import gc
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl

import orjson
from django.conf import settings
from django.core.exceptions import DisallowedHost, ImproperlyConfigured, RequestDataTooBig
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404, HttpRequest
from django.urls import URLPattern, URLResolver, get_resolver
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import exceptions as drf
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from ticketing import metrics, store
from ticketing.api import StrictField
from ticketing.errors import INTERNAL_ERROR, STATUS, DomainError, describe
from ticketing.parsers import JSONParser
from ticketing.ratelimit import client_ip

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


# What the lane does in DRF's place, as the DRF declarations that mean it (DRF's
# defaults, as settings.REST_FRAMEWORK sets them); a fast view may declare one of these.
HONOURED: dict[str, tuple] = {
    # orjson writes the envelope, as JSONRenderer would (compact UTF-8; indent is
    # Django's lane's); `Accept` and `?format=` are negotiated against it.
    "renderer_classes": ([JSONRenderer],),
    # A JSON body is read here; any other goes to Django's lane, whose parsers answer.
    "parser_classes": ([JSONParser],),
    "permission_classes": ([], [AllowAny]),
    # The lane has no session: a request with a session cookie goes to Django's lane.
    "authentication_classes": ([], [SessionAuthentication]),
    "content_negotiation_class": (DefaultContentNegotiation,),
    "versioning_class": (None,),
}
# APIView's methods that read those declarations: a view that overrides one decides
# by code the lane does not run.
_READERS = (
    "initial",
    "get_renderers",
    "get_parsers",
    "get_permissions",
    "get_authenticators",
    "get_content_negotiator",
    "get_throttles",
    "perform_content_negotiation",
    "determine_version",
    "check_permissions",
)


def _named(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_named(item) for item in value) + "]"
    return getattr(value, "__name__", None) or repr(value)


def refuse_undeclared(view: type) -> None:
    """ImproperlyConfigured, naming the view and the declaration, unless the lane
    honours every declaration of the view."""
    where = f"{view.__module__}.{view.__qualname__}"
    for name, honoured in HONOURED.items():
        value = getattr(view, name)
        if isinstance(value, (list, tuple)):
            value = list(value)
        if value not in honoured:
            raise ImproperlyConfigured(
                f"{where}.{name} = {_named(value)}: the fast lane honours only "
                f"{' or '.join(_named(h) for h in honoured)}. Serve the view on Django's lane "
                "(no fast_service), or teach ticketing/fastlane.py what it declares."
            )
    for name in _READERS:
        if getattr(view, name) is not getattr(APIView, name):
            raise ImproperlyConfigured(
                f"{where}.{name}() is overridden: the fast lane reads the declarations only. "
                "Serve the view on Django's lane (no fast_service)."
            )


class FastRoute:
    """One view's declarations, read once: what a request costs is a few calls."""

    __slots__ = (
        "path",
        "method",
        "source",
        "fields",
        "throttles",
        "service",
        "output",
        "counted",
        "client",
        "by_session",
    )

    def __init__(self, path: str, view: type) -> None:
        methods = [m for m in ("get", "post", "delete") if hasattr(view, m)]
        if len(methods) != 1:
            raise ValueError(f"{view.__name__}: a fast view serves exactly one method, not {methods}")
        refuse_undeclared(view)
        self.path = path
        self.method = methods[0].upper()
        self.source = view.source
        inputs = view.Input().fields.items() if view.Input else ()
        self.fields = [(name, field.source, _reader(view, name, field)) for name, field in inputs]
        self.throttles = [throttle() for throttle in view.throttle_classes]
        self.service = view.fast_service
        self.counted = view.counted_refusals
        self.client = view.fast_client
        # Who signed in is known on Django's lane only.
        self.by_session = self.client is not None or SessionAuthentication in view.authentication_classes
        self.output = _outputs(view.Output())


def _reader(view: type, name: str, field: serializers.Field) -> Callable[[Any], Any]:
    """How the field reads a request's value: the plain function of a StrictField
    (ticketing/api.py), called with None for an absent value as for null, as its
    run_validation calls it; both lanes refuse alike only what such a field reads."""
    if not isinstance(field, StrictField) or type(field).run_validation is not StrictField.run_validation:
        raise ImproperlyConfigured(
            f"{view.__module__}.{view.__qualname__}.Input.{name}: a fast view's input fields are StrictFields"
        )
    return type(field).parse


# Output fields whose to_representation gives back a value of this exact type
# unchanged: such a value is written as it is, without the call.
_SHOWN_AS_IS = {
    serializers.IntegerField: int,
    serializers.CharField: str,
    serializers.ChoiceField: str,  # (the choices are strings that stand for themselves)
    serializers.BooleanField: bool,
}


def _shown_as_is(field: serializers.Field) -> type | None:
    """The type of value the output field writes unchanged, if any (`_SHOWN_AS_IS`; and
    an object for a JSONField that writes objects as they are, as DRF's own does when
    not binary: the service shaped it, and shares it between answers)."""
    if (
        isinstance(field, serializers.JSONField)
        and not field.binary
        and type(field).to_representation is serializers.JSONField.to_representation
    ):
        return dict
    return _SHOWN_AS_IS.get(type(field))


def _outputs(serializer: serializers.Serializer) -> Callable[[Any], dict]:
    """The function that writes a result as the output serializer's fields would:
    one made for these fields, reading each attribute by name (as dataclasses makes
    an `__init__`), since a loop over the fields (a join's answer has thirty) cost
    more than the rest of the shaping. A value of the type a field writes as it is
    (`_shown_as_is`) is written without the field's call."""
    scope: dict[str, Any] = {}
    reads, items = [], []
    for i, (name, field) in enumerate(serializer.fields.items()):
        if not field.source.isidentifier():
            where = f"{type(serializer).__name__}.{name}"
            raise ImproperlyConfigured(f"{where}: a fast view's output reads its result's attributes by name")
        scope[f"kind{i}"], scope[f"shape{i}"] = _shown_as_is(field), _shaper(field)
        reads.append(f"    v{i} = result.{field.source}")
        items.append(f"{name!r}: v{i} if v{i} is None or type(v{i}) is kind{i} else shape{i}(v{i})")
    code = "\n".join(["def shaped(result):", *reads, "    return {" + ", ".join(items) + "}"])
    exec(code, scope)  # noqa: S102 (the code is made from the serializer's own field names)
    return scope["shaped"]


def _shaper(field: serializers.Field) -> Callable[[Any], Any]:
    """How a value of the field is written: a nested serializer's object by its own
    fields, as the answer itself is (the join's first poll); anything else by the
    field."""
    if isinstance(field, serializers.Serializer):
        return _outputs(field)
    return field.to_representation


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
        route = self.route_of(scope)
        if route is not None:
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

    def route_of(self, scope: Scope) -> FastRoute | None:
        """The fast route a request's path and method name, if any."""
        route = self.routes.get(scope["path"])
        return route if route is not None and scope["method"] == route.method else None

    async def serve(self, route: FastRoute, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        body = None
        if route.source != "query":
            try:
                body = await _read_body(scope, receive)
            except _TooLarge:
                return await _send(send, _TOO_LARGE.status, _JSON, orjson.dumps(_TOO_LARGE.body()))
            if body is None:
                return  # the client left
        asked = _asked(route, scope, body)
        if asked is None:
            return await self.django(scope, receive, send, body)
        await _send(send, *await self.answer(route, scope, asked, start))

    def whole(
        self, route: FastRoute, scope: Scope, body: bytes
    ) -> Coroutine[Any, Any, tuple[int, list, bytes]] | None:
        """The answer to a request of the fast route (`route_of`) that a server holds
        whole, body and all, up to the body limit (DATA_UPLOAD_MAX_MEMORY_SIZE),
        without ASGI's messages (ticketing/gunicorn_conf.py): (status, headers,
        payload), once awaited. None when the lane would not answer it itself (a form
        Django's lane answers): the server then runs the ASGI application, which
        answers it as always."""
        start = time.perf_counter()
        asked = _asked(route, scope, None if route.source == "query" else body)
        return None if asked is None else self.answer(route, scope, asked, start)

    async def answer(
        self, route: FastRoute, scope: Scope, asked: "_Ask", start: float
    ) -> tuple[int, list, bytes]:
        """The route's answer to what the request asks: its service's, or a refusal,
        in the envelope; the request's latency observed (from `start`)."""
        kwargs, refusal = asked
        try:
            if refusal is not None:
                raise refusal.with_traceback(None)  # (one instance, remembered: no frames kept)
            # (Every Redis command of the lane is bounded by the batcher's timer.)
            if route.throttles or route.client is not None:
                address = _address(scope)
                for throttle in route.throttles:
                    await throttle.acheck(address)
                if route.client is not None:
                    kwargs["client"] = route.client(address)
            data = route.output(await route.service(**kwargs))
            status, headers, payload = 200, _JSON, orjson.dumps({"success": True, "data": data})
        except Exception as exc:  # every answer is in the envelope, a bug's too
            if isinstance(exc, TimeoutError):
                exc = RedisTimeoutError("no answer from Redis in time")
            err = describe(exc)
            if err is None:
                log.exception("%s %s failed", scope["method"], scope["path"])
                err = INTERNAL_ERROR
            elif err.code in route.counted:
                store.count_refusal(kwargs.get("event_id", settings.EVENT_ID), route.counted[err.code])
            status, payload = STATUS[err.code], orjson.dumps(err.body())
            headers = _JSON + [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
        metrics.observe_request(route.path, time.perf_counter() - start)  # not when Django's lane answers
        return status, headers, payload

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
                await store.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


# What a request asks of its route's service: its fields, and DRF's refusal of its
# negotiation, if any.
_Ask = tuple[dict[str, Any], DomainError | None]


def _asked(route: FastRoute, scope: Scope, body: bytes | None) -> _Ask | None:
    """What the request asks (its body read whole, or None for a route that reads the
    query), or None when its form is one Django's lane answers (a Host outside
    ALLOWED_HOSTS, a session, a bad field ...): nothing is counted or run before."""
    try:
        host = accept = content_type = None
        cookies = False
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"content-type":
                content_type = value
            elif name == b"accept":  # (repeated, joined as Django joins them)
                accept = value if accept is None else accept + b"," + value
            elif name == b"cookie":
                cookies = True
        if host is None or not _allowed_host(host):
            return None  # Django's lane refuses it, as it refuses any other
        if cookies and route.by_session and _has_session(scope):
            return None  # a signed-in person: Django's lane knows the account
        data = _input(scope, body, content_type)
        # DRF negotiates first: before it reads a field or counts a throttle.
        fmt = data.get(_FORMAT) if body is None else _format(scope)
        if fmt or (accept is not None and accept not in _PLAIN_ACCEPTS):
            refusal = _refusal(accept, fmt or None)
            if refusal is not None:
                return {}, refusal
        return {source: read(data.get(name)) for name, source, read in route.fields}, None
    except (_Refused, DomainError):
        return None


def _input(scope: Scope, body: bytes | None, content_type: bytes | None) -> dict:
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
    if content_type not in _JSON_TYPES:
        raise _Refused  # DRF decides what else it accepts (other charsets too), and says so
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _Refused from None
    if not isinstance(data, dict):
        raise _Refused
    return data


# `Accept` headers DRF answers with JSONRenderer as plain application/json (held to
# it by a test): no negotiation for them. Without a header DRF reads */*.
_PLAIN_ACCEPTS = frozenset({b"*/*", b"application/json"})
_FORMAT = api_settings.URL_FORMAT_OVERRIDE  # ?format=json
_FORMAT_BYTES = _FORMAT.encode() if _FORMAT else b""


def _format(scope: Scope) -> str | None:
    """The `?format=` DRF reads (the last given) beside a body, or None."""
    query = scope["query_string"]
    if not _FORMAT or (_FORMAT_BYTES not in query and b"%" not in query):
        return None
    try:
        return _query(query.decode("ascii")).get(_FORMAT)
    except UnicodeDecodeError:
        raise _Refused from None


def _refusal(accept: bytes | None, fmt: str | None) -> DomainError | None:
    """DRF's refusal of what the request asks for (as Django's lane describes it), or
    None when DRF answers JSON as this lane writes it; _Refused for JSON that DRF
    writes otherwise (indented): Django's lane writes it."""
    verdict = (
        _negotiate(accept, fmt) if accept is not None and len(accept) > 256 else _remembered(accept, fmt)
    )
    if verdict is False:
        raise _Refused
    return None if verdict is True else verdict


class _Asked:
    """What DRF's negotiation reads of a request."""

    def __init__(self, accept: bytes | None, fmt: str | None) -> None:
        self.headers = {} if accept is None else {"accept": accept.decode("latin-1")}
        self.query_params = {} if fmt is None else {_FORMAT: fmt}


_RENDERERS = [renderer() for renderer in HONOURED["renderer_classes"][0]]


def _negotiate(accept: bytes | None, fmt: str | None) -> DomainError | bool:
    """DRF's own negotiation: its refusal, or whether the JSON it writes is the
    lane's (False: indented, as `application/json; indent=4` asks)."""
    try:
        renderer, media_type = DefaultContentNegotiation().select_renderer(_Asked(accept, fmt), _RENDERERS)
    except Http404:  # a ?format= no renderer has (as DRF's own exception handler reads it)
        return describe(drf.NotFound())
    except drf.NotAcceptable as exc:
        return describe(exc)
    return renderer.get_indent(media_type, {}) is None


# The verdicts on the headers seen most (short ones only: the header is the client's).
_remembered = lru_cache(maxsize=256)(_negotiate)


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
    if setting == "SESSION_COOKIE_NAME":
        _session_cookie.cache_clear()


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
    name = _session_cookie()
    for key, value in scope["headers"]:
        if key == b"cookie" and name in value:
            return True
    return False


@lru_cache(maxsize=1)
def _session_cookie() -> bytes:
    return settings.SESSION_COOKIE_NAME.encode() + b"="


def _address(scope: Scope) -> str:
    """The client's address, as `client_ip` reads it from the parts of a WSGI environ
    it reads: the peer and X-Forwarded-For."""
    meta = {"REMOTE_ADDR": scope["client"][0] if scope.get("client") else ""}
    hops = [value.decode("latin-1") for name, value in scope["headers"] if name == b"x-forwarded-for"]
    if hops:
        meta["HTTP_X_FORWARDED_FOR"] = ",".join(hops)  # as Django joins repeated headers
    return client_ip(meta)
