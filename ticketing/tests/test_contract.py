"""The production server and Django's lane are one API, and it is the API the
committed schema describes.

Production serves everything through gunicorn with uvicorn workers (the Procfile's
`web`): join, rejoin, leave, poll and the challenge from the ASGI fast lane
(ticketing/fastlane.py), everything else from Django's lane in a pool of threads.
Here every operation (the crowd's, booking, cancelling, the draw, the challenge,
/health), every refusal of substance (EVENT_NOT_FOUND, EVENT_CLOSED, ALREADY_BOOKED,
RATE_LIMIT, ...) and every row of the bad-input table (queue_app/tests/test_errors.py)
is sent to that server, started as the Procfile starts it and spoken to over HTTP
(`production_server`), and to the DRF views through Django's test Client (checking
CSRF, as production does), against the same state (the test database, committed at
once as in production, and the test Redis), and the two answers
must be equal: the same status and the same parsed body. Only what differs between
any two calls (a fresh token, joinedAt, the jittered nextPollMs, the reservationId of
two separate bookings, a challenge's random parts) is compared by its shape instead of
its value. The tests of each behaviour run on both lanes in-process (`lane`); this is
where the server itself is held to the declarations.

Every answer is also held to docs/openapi.yaml, with schemathesis' own checks: its
status is documented for the operation, its content type too, and its body matches the
documented schema (a 2xx's data, an error's envelope). Every error body, documented
operation or not, matches the ErrorEnvelope schema. A body is read in the charset its
Content-Type declares, the same on both sides. Last, the committed schema is the
one the DRF declarations generate now, and the schema and docs pages answer, the docs
page with local assets only (the service may run where no CDN is reachable), which
the server serves.
"""

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jsonschema
import pytest
import requests
import schemathesis
import yaml
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.utils import timezone
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from booking_app.models import Reservation
from queue_app import admission, crowd_messages, draw, events
from queue_app import services as queue
from queue_app.models import Event
from queue_app.tests import test_errors
from testsupport.clients import ServerClient
from testsupport.line import admit_all, unknown_token
from testsupport.servers import SERVER_EVENT_ID, server_env, start_gunicorn, stop_gunicorn
from ticketing.fastlane import find_routes

SCHEMA_FILE = Path(settings.BASE_DIR) / "docs" / "openapi.yaml"
Lane = Client | ServerClient

# The bad-input table, as test_errors declares it: (method, path, body, content_type, status, code).
BAD_INPUT: list[tuple] = next(
    mark.args[1]
    for mark in test_errors.test_bad_requests_get_a_4xx_envelope_and_change_nothing.pytestmark
    if mark.name == "parametrize"
)

# More of the same kinds, on the operations the table does not send them to.
BAD_INPUT_TOO: list[tuple] = [
    ("post", "/api/queue/join", b'{"eventId": "x"}', "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
    # An id is matched in full: not with a trailing newline.
    ("post", "/api/queue/join", b'{"eventId": "ktx\\n"}', "application/json", 400, "VALIDATION_ERROR"),
    (
        "get",
        "/api/status/poll?token=" + str(uuid.UUID(int=1)) + "&eventId=ktx%0A",
        None,
        None,
        400,
        "VALIDATION_ERROR",
    ),
    (
        "post",
        "/api/queue/rejoin",
        b"token=x",
        "application/x-www-form-urlencoded",
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    ),
    (
        "post",
        "/api/queue/rejoin",
        b'{"pad": "' + b"x" * 20_000 + b'"}',
        "application/json",
        413,
        "PAYLOAD_TOO_LARGE",
    ),
    (
        "post",
        "/api/booking",
        b'{"pad": "' + b"x" * 20_000 + b'"}',
        "application/json",
        413,
        "PAYLOAD_TOO_LARGE",
    ),
    ("delete", "/api/queue/leave?eventId=x", None, None, 400, "MISSING_TOKEN"),
    # JSON nested deeper than the parsers recurse (6 KB, under the 10 KB limit).
    (
        "post",
        "/api/queue/join",
        b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        "application/json",
        400,
        "VALIDATION_ERROR",
    ),
    (
        "get",
        "/api/status/poll?token=" + str(uuid.UUID(int=1)) + "&eventId=-x",
        None,
        None,
        400,
        "VALIDATION_ERROR",
    ),
]

BAD_INPUT_IDS = [
    f"{i}-{method}-{path.partition('?')[0]}-{status}-{code}"
    for i, (method, path, _, _, status, code) in enumerate(BAD_INPUT + BAD_INPUT_TOO)
]

# --- The calls and their comparison -----------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request, as both sides are sent it."""

    method: str
    path: str
    body: bytes | None = None
    content_type: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


# What differs between two joins' answers (a new place each), first poll included.
JOINED = frozenset({"token", "joinedAt", "rank", "totalWaiting", "ahead", "nextPollMs"})
KEPT = frozenset({"nextPollMs"})  # a rejoin that kept its place: its first poll's jitter


def json_call(method: str, path: str, payload: object, **extra: str) -> Call:
    return Call(method, path, json.dumps(payload).encode(), "application/json", extra)


def send(lane: Lane, call: Call) -> HttpResponse:
    if call.body is None:
        response = lane.generic(call.method, call.path, **call.extra)
    else:
        response = lane.generic(call.method, call.path, call.body, call.content_type, **call.extra)
    if response.streaming:  # (the draw's list) read whole, as the HTTP client reads it
        whole = HttpResponse(b"".join(response.streaming_content), status=response.status_code)
        for name, value in response.items():
            whole[name] = value
        return whole
    return response


def _is_uuid(value: object) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _is_hex(value: object, length: int | None = None) -> bool:
    pattern = "[0-9a-f]" + ("+" if length is None else f"{{{length}}}")
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# What a field that differs between two calls must look like.
SHAPES: dict[str, Callable[[object], bool]] = {
    "token": _is_uuid,
    "reservationId": _is_uuid,
    "joinedAt": lambda value: _is_count(value) and value > 0,
    "nextPollMs": _is_count,
    # A join's first poll: the other lane's join stood ahead of it (no rank in a pre-queue).
    "rank": lambda value: value is None or (_is_count(value) and value > 0),
    "totalWaiting": _is_count,
    "ahead": lambda value: value is None or _is_count(value),
    "receipt": lambda value: _is_hex(value, 16),
    "timestamp": lambda value: _is_count(value) and value > 0,
    # A proof-of-work challenge's random and time-bound parts (queue_app/proof.py).
    "keyPrefix": _is_hex,
    "nonce": _is_hex,
    "salt": _is_hex,
    "keySignature": _is_hex,
    "signature": _is_hex,
    "expiresAt": lambda value: _is_count(value) and value > 0,
}


def masked(body: object, varying: frozenset[str]) -> object:
    """The body with each varying field, once it has its shape, replaced by `<name>`."""
    if isinstance(body, list):
        return [masked(item, varying) for item in body]
    if not isinstance(body, dict):
        return body
    out = {}
    for name, value in body.items():
        if name in varying:
            assert SHAPES[name](value), f"{name}: {value!r}"
            out[name] = f"<{name}>"
        else:
            out[name] = masked(value, varying)
    return out


def assert_same_answer(
    django: HttpResponse, server: HttpResponse, varying: frozenset[str] = frozenset()
) -> dict:
    """Both sides gave the same status, JSON, and body (varying fields by shape).
    Returns Django's body."""
    assert django["Content-Type"].startswith("application/json"), django.content
    assert server["Content-Type"].startswith("application/json"), server.content
    ours, theirs = json.loads(django.content), json.loads(server.content)
    assert (django.status_code, masked(ours, varying)) == (server.status_code, masked(theirs, varying))
    return ours


# --- The schema ----------------------------------------------------------------------


@cache
def openapi() -> Any:
    return schemathesis.openapi.from_path(SCHEMA_FILE)


@cache
def error_envelope() -> jsonschema.protocols.Validator:
    document = yaml.safe_load(SCHEMA_FILE.read_text())
    schema = {"$ref": "#/components/schemas/ErrorEnvelope", "components": document["components"]}
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


def assert_documented(call: Call, response: HttpResponse) -> None:
    """The answer is one docs/openapi.yaml documents (status, content type, body);
    an error's body is the ErrorEnvelope whatever its path."""
    if response.status_code >= 400:
        body = json.loads(response.content)
        error_envelope().validate(body)
        assert body["success"] is False
    path = call.path.partition("?")[0]
    operation = openapi().find_operation_by_path(call.method, path)
    if operation is None:
        assert response.status_code >= 400, (
            f"{call.method} {path} answered {response.status_code}, undocumented"
        )
        return
    request = requests.Request(
        call.method,
        f"http://testserver{call.path}",
        data=call.body,
        headers={"Content-Type": call.content_type} if call.content_type else {},
    ).prepare()
    answer = schemathesis.Response(
        response.status_code,
        {name.lower(): [value] for name, value in response.items()},
        response.content,
        request=request,
        elapsed=0.0,
        verify=False,
    )
    template = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(operation.path))
    path_parameters = re.fullmatch(template, path).groupdict()  # type: ignore[union-attr]
    operation.Case(path_parameters=path_parameters).validate_response(answer, checks=CHECKS)


# All the fast lane writes, and uvicorn's Date; Django's lane adds its middleware's
# (X-Frame-Options, Vary, ...).
FAST_LANE_HEADERS = {"content-type", "x-content-type-options", "content-length", "retry-after", "date"}


def by_the_fast_lane(response: HttpResponse) -> bool:
    """The fast lane answered itself (it did not hand the request to Django)."""
    return {name.lower() for name in response.headers} <= FAST_LANE_HEADERS


def on_both_lanes(
    lanes: tuple[Client, ServerClient],
    make_call: Callable[[], Call],
    varying: frozenset[str] = frozenset(),
    *,
    fast: bool = True,
) -> tuple[int, dict]:
    """`make_call()` for each side (it sets up that side's state, the same for both),
    sent; both answers documented and equal, and the server's answered by the fast
    lane itself if `fast`, else by Django's lane. Returns the status and body."""
    answers = []
    for lane in lanes:
        call = make_call()
        response = send(lane, call)
        assert_documented(call, response)
        answers.append(response)
    assert not by_the_fast_lane(answers[0])
    assert by_the_fast_lane(answers[1]) == fast, answers[1].headers
    return answers[0].status_code, assert_same_answer(*answers, varying=varying)


def django_client() -> Client:
    """Django's test Client, checking CSRF as production does (by default it does not)."""
    client = Client(enforce_csrf_checks=True)
    client.raise_request_exception = False
    return client


@pytest.fixture
def db(django_db_setup, django_db_blocker) -> Iterator[None]:
    """The database as production has it, in place of pytest-django's `db` (which
    conftest's make_event asks for): no transaction around the test, so that what it
    writes, and what Django's lane writes in-process, is committed at once and the
    server sees it. Afterwards the apps' tables are emptied (a few ms; pytest-django's
    transaction=True empties every table and rebuilds the content types and
    permissions: most of a second a test)."""
    assert connection.settings_dict["NAME"].startswith("test_"), "not the test database"
    with django_db_blocker.unblock():
        yield
        Reservation.objects.all().delete()  # (PROTECTed from their event's delete)
        Event.objects.all().delete()  # (its draw with it)


@pytest.fixture
def lanes(production_server: str) -> tuple[Client, ServerClient]:
    """Django's test Client (the DRF views, in-process) and the production server."""
    return django_client(), ServerClient(production_server)


@pytest.fixture(scope="module")
def limited_server(django_db_setup) -> Iterator[str]:
    """A production server with the rate limits of test_rate_limit_..., which it
    reads from its environment, believing X-Forwarded-For from this machine so that
    each test client is counted as an address of its own."""
    env = server_env(RATE_LIMIT_JOIN="1", RATE_LIMIT_LEAVE="1", TRUSTED_PROXIES="127.0.0.1")
    base, proc = start_gunicorn(env)
    yield base
    stop_gunicorn(proc)


def _joined(event_id: str) -> str:
    return queue.queue_join(event_id=event_id).token


def _admitted(event, n: int) -> list[str]:
    """`n` people who joined and were admitted (the default rate admits dozens a second)."""
    assert event.admit_per_second >= n
    tokens = [_joined(event.event_id) for _ in range(n)]
    admit_all(event.event_id)
    return tokens


def _nowhere() -> str:
    return f"nope-{uuid.uuid4().hex[:12]}"


def _book(client: Client, token: str, event_id: str, seats: int = 1) -> str:
    response = send(
        client, json_call("POST", "/api/booking", {"token": token, "seatCount": seats, "eventId": event_id})
    )
    assert response.status_code == 200, response.content
    return json.loads(response.content)["data"]["reservationId"]


def _close(event) -> None:
    event.status = "CLOSED"
    events.event_publish(event)


# --- The crowd's operations ---------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [{"eventId": "<event>"}, {}, None, {"eventId": "<event>", "unknown": [1, 2]}],
    ids=["event-id", "empty-object", "no-body", "extra-field"],
)
def test_join_answers_the_same_on_both_lanes(lanes, make_event, settings, body) -> None:
    # The server's default event, for the bodies without one, is Django's too.
    event = make_event(event_id=SERVER_EVENT_ID)
    settings.EVENT_ID = event.event_id
    if body is None:
        call = Call("POST", "/api/queue/join")
    else:
        payload = {k: event.event_id if v == "<event>" else v for k, v in body.items()}
        call = json_call("POST", "/api/queue/join", payload)
    status, body = on_both_lanes(lanes, lambda: call, varying=JOINED)
    assert status == 200
    data = body["data"]
    assert data["eventId"] == event.event_id
    # Both joins queued a person.
    assert events.event_live_numbers(event.event_id)["waiting"] == 2


def _rejoin_waiting(event) -> Callable[[], Call]:
    token = _joined(event.event_id)
    return lambda: json_call("POST", "/api/queue/rejoin", {"token": token, "eventId": event.event_id})


def _rejoin_active(event) -> Callable[[], Call]:
    token = _joined(event.event_id)
    admit_all(event.event_id)
    return lambda: json_call("POST", "/api/queue/rejoin", {"token": token, "eventId": event.event_id})


def _rejoin_unknown(event) -> Callable[[], Call]:
    # A token issued but unknown to the line goes to the back, with a new token: each
    # lane a stranger of its own.
    return lambda: json_call(
        "POST", "/api/queue/rejoin", {"token": unknown_token(event.event_id), "eventId": event.event_id}
    )


@pytest.mark.parametrize(
    ("situation", "varying", "expected"),
    [
        (_rejoin_waiting, KEPT, {"rejoined": True, "status": "WAITING", "joinedAt": None}),
        (_rejoin_active, KEPT, {"rejoined": True, "status": "ACTIVE", "joinedAt": None}),
        (_rejoin_unknown, JOINED, {"rejoined": False, "status": "WAITING"}),
    ],
    ids=["waiting-keeps-its-place", "active-keeps-its-window", "unknown-goes-to-the-back"],
)
def test_rejoin_answers_the_same_on_both_lanes(lanes, event, situation, varying, expected) -> None:
    status, body = on_both_lanes(lanes, situation(event), varying=varying)
    assert status == 200
    assert expected.items() <= body["data"].items()


@pytest.mark.parametrize("state", ["waiting", "active", "unknown"])
def test_leave_answers_the_same_on_both_lanes(lanes, event, snapshot, state) -> None:
    def make_call() -> Call:
        # Each lane's own person in the same state (leaving changes the line).
        token = unknown_token(event.event_id) if state == "unknown" else _joined(event.event_id)
        if state == "active":
            admit_all(event.event_id)
        return Call("DELETE", f"/api/queue/leave?token={token}&eventId={event.event_id}")

    status, body = on_both_lanes(lanes, make_call)
    assert (status, body["data"]) == (200, {"removed": state == "waiting"})


def _poll_waiting(event, client: Client) -> str:
    _joined(event.event_id)
    return _joined(event.event_id)


def _poll_active(event, client: Client) -> str:
    token = _joined(event.event_id)
    admit_all(event.event_id)
    return token


def _poll_booked(event, client: Client) -> str:
    token = _poll_active(event, client)
    _book(client, token, event.event_id, 2)
    return token


def _poll_paused(event, client: Client) -> str:
    token = _poll_waiting(event, client)
    event.status = "PAUSED"
    events.event_publish(event)
    return token


def _poll_closed(event, client: Client) -> str:
    token = _poll_waiting(event, client)
    _close(event)
    return token


def _poll_unknown(event, client: Client) -> str:
    _joined(event.event_id)
    return unknown_token(event.event_id)


def _with_a_message(situation: Callable[[Any, Client], str]) -> Callable[[Any, Client], str]:
    """`situation` with an operator's message to the crowd shown (queue_app/crowd_messages.py)."""

    def messaged(event, client: Client) -> str:
        token = situation(event, client)
        crowd_messages.event_message_post(
            event_id=event.event_id, text_ko="입장이 10분 늦어집니다.", text_en="Doors open 10 minutes late."
        )
        return token

    return messaged


@pytest.mark.parametrize(
    ("situation", "status"),
    [
        (_poll_waiting, "WAITING"),
        (_poll_active, "ACTIVE"),
        (_poll_booked, "BOOKED"),
        (_poll_paused, "WAITING"),
        (_poll_closed, "EXPIRED"),
        (_poll_unknown, "NOT_FOUND"),
        (_with_a_message(_poll_waiting), "WAITING"),  # the copy of the line answers
        (_with_a_message(_poll_active), "ACTIVE"),  # Redis answers
    ],
    ids=["waiting", "active", "booked", "paused", "closed", "unknown", "waiting-message", "active-message"],
)
def test_poll_answers_the_same_on_both_lanes(lanes, event, snapshot, situation, status) -> None:
    token = situation(event, lanes[0])
    before = snapshot(event.event_id)
    call = Call("GET", f"/api/status/poll?token={token}&eventId={event.event_id}")
    # Jittered while there is something to wait for; else 0 on both.
    varying = frozenset({"nextPollMs"} if status in {"WAITING", "ACTIVE"} else ())
    answered, body = on_both_lanes(lanes, lambda: call, varying=varying)
    assert (answered, body["data"]["status"]) == (200, status)
    # A free event's booking is confirmed at once; no other status has a booking's.
    assert body["data"]["reservationStatus"] == ("CONFIRMED" if status == "BOOKED" else None)
    assert (body["data"]["message"] is not None) == (situation.__name__ == "messaged")
    assert snapshot(event.event_id) == before  # a poll reads: the same state for both


def _scheduled(make_event, state: str):
    """An event with a scheduled start, and a person of its pre-queue, in `state`."""
    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    token = _joined(event.event_id)
    _joined(event.event_id)
    if state != "PRE_QUEUE":
        type(event).objects.filter(pk=event.pk).update(opens_at=timezone.now())
        event.refresh_from_db()
        events.event_publish(event)
        assert admission.event_admit(event.event_id).outcome == "DRAW_DUE"
    if state == "WAITING":
        draw.run(event.event_id)
    return event, token


@pytest.mark.parametrize("state", ["PRE_QUEUE", "DRAWING", "WAITING"])
def test_a_scheduled_start_answers_the_same_on_both_lanes(lanes, make_event, snapshot, state) -> None:
    event, token = _scheduled(make_event, state)
    before = snapshot(event.event_id)
    call = Call("GET", f"/api/status/poll?token={token}&eventId={event.event_id}")
    answered, body = on_both_lanes(lanes, lambda: call, varying=frozenset({"nextPollMs"}))
    data = body["data"]
    assert (answered, data["status"]) == (200, state)
    assert data["opensAt"] == int(event.opens_at.timestamp() * 1000)
    assert re.fullmatch("[0-9a-f]{16}", data["receipt"])
    assert (data["drawPosition"] is not None) == (state == "WAITING")
    assert snapshot(event.event_id) == before
    if state == "PRE_QUEUE":
        join = json_call("POST", "/api/queue/join", {"eventId": event.event_id})
        status, body = on_both_lanes(lanes, lambda: join, varying=JOINED | {"receipt"})
        assert status == 200 and body["data"]["receipt"]
    # The draw's own endpoints are Django's lane on the server, and documented.
    for path in (f"/api/queue/draw?eventId={event.event_id}&receipt={data['receipt']}",):
        if state != "WAITING":
            path = f"/api/queue/draw?eventId={event.event_id}"
        status, body = on_both_lanes(lanes, lambda p=path: Call("GET", p), fast=False)
        assert status == 200
        assert (
            body["data"]["status"]
            == {"PRE_QUEUE": "SCHEDULED", "DRAWING": "DRAWING", "WAITING": "DRAWN"}[state]
        )
    # The place's signed receipt: the same signature from both (Ed25519 signs
    # deterministically, and the server has this process's key).
    signed = Call("GET", f"/api/queue/draw/signed-receipt?eventId={event.event_id}&token={token}")
    status, body = on_both_lanes(lanes, lambda: signed, fast=False)
    assert (status, body["data"]["receipt"]) == (200, data["receipt"])
    assert (body["data"]["position"] is not None) == (state == "WAITING")
    # The published list: refused until the draw, then the same text from both.
    receipts = Call("GET", f"/api/queue/draw/receipts?eventId={event.event_id}")
    if state != "WAITING":
        status, body = on_both_lanes(lanes, lambda: receipts, fast=False)
        assert (status, body["error"]["code"]) == (409, "NOT_DRAWN")
        return
    answers = [send(lane, receipts) for lane in lanes]
    for answer in answers:
        assert_documented(receipts, answer)
    listed = [(a.status_code, a["Content-Type"], a.content) for a in answers]
    assert listed[0] == listed[1]
    assert listed[0][:2] == (200, "text/plain; charset=utf-8")
    assert len(listed[0][2].splitlines()) == 2  # the pre-queue's two places


# --- Booking and cancelling (Django's lane on the server) ------------------------------


def test_booking_and_cancel_answer_the_same_on_both_lanes(lanes, make_event) -> None:
    event = make_event(total_seats=10)
    tokens = iter(_admitted(event, 2))
    booked: list[tuple[str, str]] = []
    cancels: list[HttpResponse] = []
    bookings: list[HttpResponse] = []
    # Each side books and cancels in turn: 10 seats left before each booking.
    for lane in lanes:
        token = next(tokens)
        call = json_call("POST", "/api/booking", {"token": token, "seatCount": 3, "eventId": event.event_id})
        bookings.append(send(lane, call))
        assert_documented(call, bookings[-1])
        rid = json.loads(bookings[-1].content)["data"]["reservationId"]
        booked.append((rid, token))
        call = Call("DELETE", f"/api/booking/{rid}?token={token}")
        cancels.append(send(lane, call))
        assert_documented(call, cancels[-1])
    varying = frozenset({"reservationId"})
    data = assert_same_answer(*bookings, varying=varying)["data"]
    assert (data["seatCount"], data["remainingSeats"], data["status"]) == (3, 7, "CONFIRMED")
    data = assert_same_answer(*cancels, varying=varying)["data"]
    assert (data["seatCount"], data["status"]) == (3, "CANCELLED")
    assert [json.loads(r.content)["data"]["reservationId"] for r in cancels] == [rid for rid, _ in booked]


def _booking(token: str | None, event_id: str, seats: object = 1) -> Call:
    payload = {"seatCount": seats, "eventId": event_id} | ({"token": token} if token else {})
    return json_call("POST", "/api/booking", payload)


@pytest.mark.parametrize(
    ("refusal", "status", "code"),
    [
        ("waiting-token", 403, "NOT_ACTIVE"),
        ("booked-token", 409, "ALREADY_BOOKED"),
        ("unknown-event", 404, "EVENT_NOT_FOUND"),
        ("forged-token", 403, "INVALID_TOKEN"),
        ("other-events-token", 403, "INVALID_TOKEN"),
        ("closed-event", 403, "EVENT_CLOSED"),
        ("too-many-seats", 400, "VALIDATION_ERROR"),
        ("seat-count-as-text", 400, "VALIDATION_ERROR"),
        ("no-token", 400, "MISSING_TOKEN"),
        ("form-body", 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("cancel-unknown", 404, "RESERVATION_NOT_FOUND"),
        ("cancel-twice", 409, "ALREADY_CANCELLED"),
        ("cancel-not-a-uuid", 400, "VALIDATION_ERROR"),
        ("cancel-no-token", 400, "MISSING_TOKEN"),
    ],
)
def test_booking_refusals_answer_the_same_on_both_lanes(
    lanes, make_event, snapshot, refusal, status, code
) -> None:
    event = make_event(total_seats=10)
    eid = event.event_id
    active, spare = _admitted(event, 2)
    waiting = _joined(eid)
    rid = None
    if refusal == "closed-event":
        _close(event)
    elif refusal == "booked-token":
        rid = _book(lanes[0], active, eid)
    elif refusal == "cancel-twice":
        rid = _book(lanes[0], spare, eid)
        assert send(lanes[0], Call("DELETE", f"/api/booking/{rid}?token={spare}")).status_code == 200
    nowhere = _nowhere()
    calls: dict[str, Callable[[], Call]] = {
        "waiting-token": lambda: _booking(waiting, eid),
        "booked-token": lambda: _booking(active, eid),
        "unknown-event": lambda: _booking(unknown_token(nowhere), nowhere),
        "forged-token": lambda: _booking(str(uuid.uuid4()), eid),
        "other-events-token": lambda: _booking(active, nowhere),
        "closed-event": lambda: _booking(active, eid),
        "too-many-seats": lambda: _booking(active, eid, 99),
        "seat-count-as-text": lambda: _booking(active, eid, "2"),
        "no-token": lambda: _booking(None, eid),
        "form-body": lambda: Call(
            "POST", "/api/booking", b"seatCount=1", "application/x-www-form-urlencoded"
        ),
        "cancel-unknown": lambda: Call("DELETE", f"/api/booking/{uuid.uuid4()}?token={active}"),
        "cancel-twice": lambda: Call("DELETE", f"/api/booking/{rid}?token={spare}"),
        "cancel-not-a-uuid": lambda: Call("DELETE", f"/api/booking/abc?token={active}"),
        "cancel-no-token": lambda: Call("DELETE", f"/api/booking/{uuid.uuid4()}"),
    }
    before = snapshot(eid)
    answered, body = on_both_lanes(lanes, calls[refusal], fast=False)
    assert (answered, body["error"]["code"]) == (status, code)
    if refusal == "booked-token":
        assert body["error"]["reservationId"] == rid
    assert snapshot(eid) == before


# --- Refusals of substance on the fast lane --------------------------------------------


@pytest.mark.parametrize(
    ("operation", "setup", "status", "code"),
    [
        ("join", "unknown-event", 404, "EVENT_NOT_FOUND"),
        ("rejoin", "unknown-event", 404, "EVENT_NOT_FOUND"),
        ("leave", "unknown-event", 404, "EVENT_NOT_FOUND"),
        ("poll", "unknown-event", 404, "EVENT_NOT_FOUND"),
        ("challenge", "unknown-event", 404, "EVENT_NOT_FOUND"),
        ("rejoin", "forged-token", 403, "INVALID_TOKEN"),
        ("leave", "forged-token", 403, "INVALID_TOKEN"),
        ("poll", "forged-token", 403, "INVALID_TOKEN"),
        ("rejoin", "altered-token", 403, "INVALID_TOKEN"),
        ("poll", "other-events-token", 403, "INVALID_TOKEN"),
        ("join", "closed-event", 403, "EVENT_CLOSED"),
        ("rejoin", "closed-event", 403, "EVENT_CLOSED"),
        ("rejoin", "booked-token", 409, "ALREADY_BOOKED"),
    ],
)
def test_refusals_of_substance_answer_the_same_on_both_lanes(
    lanes, event, snapshot, operation, setup, status, code
) -> None:
    token = _joined(event.event_id)
    event_id = event.event_id
    rid = None
    if setup == "unknown-event":
        event_id = _nowhere()
        token = unknown_token(event_id)  # issued for it: only the event is unknown
    elif setup == "forged-token":
        token = str(uuid.uuid4())
    elif setup == "altered-token":
        token = token[:-1] + ("0" if token[-1] != "0" else "1")
    elif setup == "other-events-token":
        event_id = _nowhere()
    elif setup == "closed-event":
        _close(event)
    elif setup == "booked-token":
        token = _admitted(event, 1)[0]
        rid = _book(lanes[0], token, event_id)
    call = {
        "join": json_call("POST", "/api/queue/join", {"eventId": event_id}),
        "rejoin": json_call("POST", "/api/queue/rejoin", {"token": token, "eventId": event_id}),
        "leave": Call("DELETE", f"/api/queue/leave?token={token}&eventId={event_id}"),
        "poll": Call("GET", f"/api/status/poll?token={token}&eventId={event_id}"),
        "challenge": Call("GET", f"/api/queue/challenge?eventId={event_id}"),
    }[operation]
    before = snapshot(event.event_id)
    answered, body = on_both_lanes(lanes, lambda: call)
    assert (answered, body["error"]["code"]) == (status, code)
    if rid is not None:
        assert body["error"]["reservationId"] == rid
    assert snapshot(event.event_id) == before


def _address() -> str:
    n = uuid.uuid4().int
    return f"10.{n % 250}.{n // 250 % 250}.{n // 62500 % 250}"


@pytest.mark.parametrize("operation", ["join", "rejoin", "leave"])
def test_rate_limit_answers_the_same_on_both_lanes(limited_server, event, settings, operation) -> None:
    settings.RATE_LIMIT_JOIN = 1
    settings.RATE_LIMIT_LEAVE = 1
    token = _joined(event.event_id)
    refused = []
    for lane in (django_client(), ServerClient(limited_server)):
        address = _address()  # each side its own client: its own count
        call = {
            "join": json_call("POST", "/api/queue/join", {"eventId": event.event_id}, REMOTE_ADDR=address),
            "rejoin": json_call(
                "POST", "/api/queue/rejoin", {"token": token, "eventId": event.event_id}, REMOTE_ADDR=address
            ),
            "leave": Call(
                "DELETE",
                f"/api/queue/leave?token={unknown_token(event.event_id)}&eventId={event.event_id}",
                extra={"REMOTE_ADDR": address},
            ),
        }[operation]
        first, second = send(lane, call), send(lane, call)
        assert first.status_code == 200, first.content
        assert_documented(call, second)
        refused.append(second)
    assert by_the_fast_lane(refused[1])
    body = assert_same_answer(*refused)
    assert (refused[0].status_code, body["error"]["code"]) == (429, "RATE_LIMIT")
    assert [r.get("Retry-After") for r in refused] == ["1", "1"]


# --- Health and the proof-of-work challenge -------------------------------------------


def test_health_answers_the_same_on_both_lanes(lanes) -> None:
    """The seed's bare shape that load balancers read: outside the envelope and the
    schema of the API."""
    answers = [send(lane, Call("GET", "/health")) for lane in lanes]
    body = assert_same_answer(*answers, varying=frozenset({"timestamp"}))
    assert (answers[0].status_code, body["status"]) == (200, "ok")
    assert not by_the_fast_lane(answers[1])


# A challenge's own parts: random, signed, or of the second it was made in.
CHALLENGE_PARTS = frozenset({"keyPrefix", "nonce", "salt", "keySignature", "signature", "expiresAt"})


@pytest.mark.parametrize("difficulty", [0, 10_000], ids=["not-asked", "asked"])
def test_a_challenge_answers_the_same_on_both_lanes(lanes, make_event, difficulty) -> None:
    event = make_event(proof_of_work=difficulty)
    call = Call("GET", f"/api/queue/challenge?eventId={event.event_id}")
    status, body = on_both_lanes(lanes, lambda: call, varying=CHALLENGE_PARTS)
    data = body["data"]
    assert (status, data["required"]) == (200, difficulty > 0)
    assert data["challenge"]["parameters"]["data"] == {"event": event.event_id, "difficulty": difficulty}


# --- Hosts and content negotiation, on every fast route ----------------------------------

# The fast routes, and what varies between two of their answers.
FAST_ROUTES = {
    "/api/queue/join": JOINED,
    "/api/queue/rejoin": KEPT,
    "/api/queue/leave": frozenset(),
    "/api/status/poll": frozenset({"nextPollMs"}),
    "/api/queue/challenge": CHALLENGE_PARTS,
}

# (id, headers, query, status, code, answered by the server's fast lane itself).
ASKED: list[tuple] = [
    # Django refuses a Host outside ALLOWED_HOSTS before any view; the fast lane hands
    # it over.
    ("foreign-host", {"HTTP_HOST": "tickets.example.org"}, {}, 400, "BAD_REQUEST", False),
    # DRF's negotiation, before any field is read or any throttle counted.
    ("accept-html", {"HTTP_ACCEPT": "text/html"}, {}, 406, "NOT_ACCEPTABLE", True),
    ("accept-xml", {"HTTP_ACCEPT": "application/xml"}, {}, 406, "NOT_ACCEPTABLE", True),
    ("accept-any-text", {"HTTP_ACCEPT": "text/*"}, {}, 406, "NOT_ACCEPTABLE", True),
    ("format-xml", {}, {"format": "xml"}, 404, "NOT_FOUND", True),
    ("no-accept", {}, {}, 200, None, True),
    ("accept-any", {"HTTP_ACCEPT": "*/*"}, {}, 200, None, True),
    ("accept-json", {"HTTP_ACCEPT": "application/json"}, {}, 200, None, True),
    ("accept-any-application", {"HTTP_ACCEPT": "application/*"}, {}, 200, None, True),
    (
        "accept-of-a-page",
        {"HTTP_ACCEPT": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
        {},
        200,
        None,
        True,
    ),
    # DRF reads no q-values: JSON even at q=0, or after a text/html preferred.
    ("accept-json-at-q0", {"HTTP_ACCEPT": "application/json;q=0"}, {}, 200, None, True),
    ("accept-html-first", {"HTTP_ACCEPT": "text/html;q=1.0, application/json;q=0.1"}, {}, 200, None, True),
    ("accept-json-twice", {"HTTP_ACCEPT": "application/json, application/json"}, {}, 200, None, True),
    ("format-json", {}, {"format": "json"}, 200, None, True),
    # Indented JSON is Django's lane's to write.
    ("accept-json-indented", {"HTTP_ACCEPT": "application/json; indent=4"}, {}, 200, None, False),
]


@cache
def fast_routes() -> dict:
    return find_routes()


def _fast_call(route: str, event_id: str, token: str, query: dict, headers: dict) -> Call:
    """A call the fast route serves (a waiting person's token; leave's a stranger's,
    so that both lanes answer alike), with `query` and `headers` added."""
    method = fast_routes()[route].method
    params = {
        "/api/queue/leave": {"token": unknown_token(event_id), "eventId": event_id},
        "/api/status/poll": {"token": token, "eventId": event_id},
        "/api/queue/challenge": {"eventId": event_id},
    }.get(route, {})
    target = route + ("?" + urlencode(params | query) if params or query else "")
    if method != "POST":
        return Call(method, target, extra=headers)
    body = {"eventId": event_id} | ({"token": token} if route == "/api/queue/rejoin" else {})
    return Call(method, target, json.dumps(body).encode(), "application/json", headers)


def test_the_rows_below_call_every_fast_route() -> None:
    assert set(FAST_ROUTES) == set(fast_routes())


@pytest.mark.parametrize("route", FAST_ROUTES)
@pytest.mark.parametrize(
    ("headers", "query", "status", "code", "fast"), [row[1:] for row in ASKED], ids=[row[0] for row in ASKED]
)
def test_hosts_and_negotiation_answer_the_same_on_both_lanes(
    lanes, event, snapshot, route, headers, query, status, code, fast
) -> None:
    token = _joined(event.event_id)
    before = snapshot(event.event_id)
    answered, body = on_both_lanes(
        lanes,
        lambda: _fast_call(route, event.event_id, token, query, headers),
        varying=FAST_ROUTES[route] if status == 200 else frozenset(),
        fast=fast,
    )
    assert answered == status
    if code is not None:
        assert body["error"]["code"] == code
        assert snapshot(event.event_id) == before  # refused before anything was done


# --- The bad-input table ---------------------------------------------------------------


def _bad_call(event_id: str, method: str, path: str, body: bytes | None, content_type: str | None) -> Call:
    if "?" in path and method != "post" and "eventId" not in path:
        path += f"&eventId={event_id}"  # as test_errors sends it
    return Call(method.upper(), path, body, content_type)


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "status", "code"), BAD_INPUT + BAD_INPUT_TOO, ids=BAD_INPUT_IDS
)
def test_bad_input_answers_the_same_on_both_lanes(
    lanes, event, snapshot, method, path, body, content_type, status, code
) -> None:
    _joined(event.event_id)
    before = snapshot(event.event_id)
    call = _bad_call(event.event_id, method, path, body, content_type)
    answers = [send(lane, call) for lane in lanes]
    # Refusals of form are Django's; but a body over the limit, which the server's
    # ASGI layer refuses (with Django's answer) before any lane reads it.
    assert code == "PAYLOAD_TOO_LARGE" or not any(by_the_fast_lane(answer) for answer in answers)
    for answer in answers:
        error_envelope().validate(json.loads(answer.content))
    data = assert_same_answer(*answers)
    assert (answers[0].status_code, data["error"]["code"]) == (status, code)
    assert snapshot(event.event_id) == before


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "status", "code"), BAD_INPUT + BAD_INPUT_TOO, ids=BAD_INPUT_IDS
)
def test_bad_input_answers_are_documented(
    lanes, event, method, path, body, content_type, status, code
) -> None:
    call = _bad_call(event.event_id, method, path, body, content_type)
    for lane in lanes:
        assert_documented(call, send(lane, call))


@pytest.mark.parametrize(
    ("charset", "encoding"),
    [("utf-8", "utf-8"), ("utf-16", "utf-16"), ("utf-16", "ascii"), ("utf-32", "ascii"), ("cp500", "ascii")],
    ids=[
        "utf-8",
        "utf-16-body",
        "ascii-body-labelled-utf-16",
        "ascii-body-labelled-utf-32",
        "ascii-body-labelled-cp500",
    ],
)
def test_a_declared_charset_is_read_the_same_on_both_lanes(lanes, event, charset, encoding) -> None:
    """The body is read in the charset its Content-Type declares, on both sides."""
    body = json.dumps({"eventId": event.event_id}).encode(encoding)
    call = Call("POST", "/api/queue/join", body, f"application/json; charset={charset}")
    answers = [send(lane, call) for lane in lanes]
    for answer in answers:
        assert_documented(call, answer)
    assert_same_answer(*answers, varying=JOINED if answers[0].status_code == 200 else frozenset())


# --- The schema's examples, sent as they are ----------------------------------------------

# A value only a person's own earlier call can give ("Try it out" cannot hold one):
# the words its doc uses to say where it comes from, which the test follows.
OWN_VALUES = {"token": "POST /api/queue/join"}


def _body_examples() -> list[tuple[str, str, str, dict]]:
    """(method, path, name, example) of every request body example the schema shows."""
    found = []
    for path, operations in yaml.safe_load(SCHEMA_FILE.read_text())["paths"].items():
        for method, operation in operations.items():
            media = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            found += [(method, path, name, example) for name, example in media.get("examples", {}).items()]
    return found


BODY_EXAMPLES = _body_examples()


def _own_value(lane: Lane, name: str, described: str, event_id: str) -> str:
    """A person's own value, got as its doc says (a token: from a join, admitted so
    that it may book)."""
    assert OWN_VALUES[name] in described, f"{name}: the doc does not say how to get one: {described!r}"
    method, path = OWN_VALUES[name].split()
    joined = send(lane, json_call(method, path, {"eventId": event_id}))
    assert joined.status_code == 200, joined.content
    admit_all(event_id)
    return json.loads(joined.content)["data"][name]


def test_the_schema_shows_an_example_body_for_join_rejoin_and_booking() -> None:
    shown = {(method, path) for method, path, _, _ in BODY_EXAMPLES}
    assert {("post", "/api/queue/join"), ("post", "/api/queue/rejoin"), ("post", "/api/booking")} <= shown


@pytest.mark.parametrize(
    ("method", "path", "name", "example"), BODY_EXAMPLES, ids=[f"{m}-{p}-{n}" for m, p, n, _ in BODY_EXAMPLES]
)
def test_each_example_body_works_as_sent(lanes, make_event, method, path, name, example) -> None:
    """Swagger's "Try it out" sends an operation's example as it is: on the event it
    names (the dev stack's), it succeeds; a value only a person's own call can give
    is one its doc says how to get, and it is filled in so."""
    body = dict(example["value"])
    event = make_event(event_id=body.get("eventId", settings.EVENT_ID))
    for lane in lanes:
        sent = {
            field: _own_value(lane, field, example.get("description", ""), event.event_id)
            if field in OWN_VALUES
            else value
            for field, value in body.items()
        }
        call = json_call(method.upper(), path, sent)
        response = send(lane, call)
        assert response.status_code == 200, response.content
        assert_documented(call, response)


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/api/status/poll"), ("get", "/api/queue/challenge"), ("delete", "/api/queue/leave")],
)
def test_each_query_works_with_the_examples_of_its_parameters(lanes, make_event, method, path) -> None:
    """The query's parameters as "Try it out" fills them (each one's example); one
    without an example is a person's own, got as its description says."""
    parameters = yaml.safe_load(SCHEMA_FILE.read_text())["paths"][path][method]["parameters"]
    examples = {p["name"]: p["schema"]["example"] for p in parameters if "example" in p["schema"]}
    event = make_event(event_id=examples["eventId"])
    for lane in lanes:
        query = dict(examples)
        for p in parameters:
            if p["name"] not in query and p.get("required"):
                query[p["name"]] = _own_value(lane, p["name"], p.get("description", ""), event.event_id)
        call = Call(method.upper(), f"{path}?{urlencode(query)}")
        response = send(lane, call)
        assert response.status_code == 200, response.content
        assert_documented(call, response)


# --- The schema itself -------------------------------------------------------------------


def test_the_committed_schema_is_what_the_declarations_generate(tmp_path) -> None:
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(generated))
    assert generated.read_text() == SCHEMA_FILE.read_text(), "docs/openapi.yaml is stale: make schema"


def test_the_schema_and_docs_pages_answer_with_local_assets_only(production_server) -> None:
    server = ServerClient(production_server)
    for lane in (django_client(), server):
        schema = lane.generic("GET", "/api/schema/")
        assert schema.status_code == 200
        assert yaml.safe_load(schema.content) == yaml.safe_load(SCHEMA_FILE.read_text())
        docs = lane.generic("GET", "/api/docs/")
        assert docs.status_code == 200
        html = docs.content.decode()
        assets = re.findall(r"""<(?:script|link)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)""", html)
        assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets), assets
        assert all(a.startswith("/") and not a.startswith("//") for a in assets), assets
        assert "https://" not in html and "http://" not in html
    # The server serves them (its collected static files), cached for ever: each
    # name is of its content.
    for asset in assets:
        answer = server.generic("GET", asset)
        assert answer.status_code == 200, asset
        assert "max-age=315360000" in answer["Cache-Control"], asset
