"""The two lanes are one API, and it is the API the committed schema describes.

Production answers join, rejoin, leave and poll from the ASGI fast lane
(ticketing/fastlane.py) and everything else from Django's lane; the tests of each
behaviour run on both lanes, but each asserts only what it cares about. Here every
operation, every refusal of substance (EVENT_NOT_FOUND, EVENT_CLOSED, ALREADY_BOOKED,
RATE_LIMIT, ...) and every row of the bad-input table (queue_app/tests/test_errors.py)
is sent through Django's test Client and through `LaneClient` (the production ASGI
application, in-process) against the same state, and the two answers must be equal:
the same status and the same parsed body. Only what differs between any two calls
(a fresh token, joinedAt, the jittered nextPollMs, the reservationId of two separate
bookings) is compared by its shape instead of its value.

Every answer is also held to docs/openapi.yaml, with schemathesis' own checks: its
status is documented for the operation, its content type too, and its body matches the
documented schema (a 2xx's data, an error's envelope). Every error body, documented
operation or not, matches the ErrorEnvelope schema. A body is read in the charset its
Content-Type declares, the same on both lanes. Last, the committed schema is the
one the DRF declarations generate now, and the schema and docs pages answer, the docs
page with local assets only (the service may run where no CDN is reachable).
"""

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
import schemathesis
import yaml
from django.conf import settings
from django.core.management import call_command
from django.http import HttpResponse
from django.test import Client
from django.utils import timezone
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from booking_app.tests.conftest import admit_all
from conftest import LaneClient, unknown_token
from queue_app import draw
from queue_app import services as queue
from queue_app.tests import test_errors

SCHEMA_FILE = Path(settings.BASE_DIR) / "docs" / "openapi.yaml"
Lane = Client | LaneClient

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
    """One request, as both lanes are sent it."""

    method: str
    path: str
    body: bytes | None = None
    content_type: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def json_call(method: str, path: str, payload: object, **extra: str) -> Call:
    return Call(method, path, json.dumps(payload).encode(), "application/json", extra)


def send(lane: Lane, call: Call) -> HttpResponse:
    if call.body is None:
        return lane.generic(call.method, call.path, **call.extra)
    return lane.generic(call.method, call.path, call.body, call.content_type, **call.extra)


def _is_uuid(value: object) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# What a field that differs between two calls must look like.
SHAPES: dict[str, Callable[[object], bool]] = {
    "token": _is_uuid,
    "reservationId": _is_uuid,
    "joinedAt": lambda value: _is_count(value) and value > 0,
    "nextPollMs": _is_count,
    "receipt": lambda value: isinstance(value, str) and re.fullmatch("[0-9a-f]{16}", value) is not None,
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
    django: HttpResponse, fast: HttpResponse, varying: frozenset[str] = frozenset()
) -> dict:
    """Both lanes gave the same status, JSON, and body (varying fields by shape).
    Returns Django's body."""
    assert django["Content-Type"].startswith("application/json"), django.content
    assert fast["Content-Type"].startswith("application/json"), fast.content
    ours, theirs = json.loads(django.content), json.loads(fast.content)
    assert (django.status_code, masked(ours, varying)) == (fast.status_code, masked(theirs, varying))
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
    body = json.loads(response.content)
    if response.status_code >= 400:
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


# All the fast lane writes; Django's lane adds its middleware's (X-Frame-Options, Vary, ...).
FAST_LANE_HEADERS = {"content-type", "x-content-type-options", "content-length", "retry-after"}


def by_the_fast_lane(response: HttpResponse) -> bool:
    """The fast lane answered itself (it did not hand the request to Django)."""
    return {name.lower() for name in response.headers} <= FAST_LANE_HEADERS


def on_both_lanes(
    lanes: tuple[Client, LaneClient],
    make_call: Callable[[], Call],
    varying: frozenset[str] = frozenset(),
    *,
    fast: bool = True,
) -> tuple[int, dict]:
    """`make_call()` for each lane (it sets up that lane's state, the same for both),
    sent; both answers documented and equal, and the second answered by the fast lane
    itself if `fast`. Returns the status and body."""
    answers = []
    for lane in lanes:
        call = make_call()
        response = send(lane, call)
        assert_documented(call, response)
        answers.append(response)
    assert not by_the_fast_lane(answers[0])
    assert by_the_fast_lane(answers[1]) == fast, answers[1].headers
    return answers[0].status_code, assert_same_answer(*answers, varying=varying)


@pytest.fixture
def lanes(client: Client) -> tuple[Client, LaneClient]:
    client.raise_request_exception = False
    return client, LaneClient(client)


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
    queue.event_publish(event)


# --- The crowd's operations ---------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [{"eventId": "<event>"}, {}, None, {"eventId": "<event>", "unknown": [1, 2]}],
    ids=["event-id", "empty-object", "no-body", "extra-field"],
)
def test_join_answers_the_same_on_both_lanes(lanes, event, settings, body) -> None:
    settings.EVENT_ID = event.event_id  # the default event, for the bodies without one
    if body is None:
        call = Call("POST", "/api/queue/join")
    else:
        payload = {k: event.event_id if v == "<event>" else v for k, v in body.items()}
        call = json_call("POST", "/api/queue/join", payload)
    status, body = on_both_lanes(lanes, lambda: call, varying=frozenset({"token", "joinedAt"}))
    assert status == 200
    data = body["data"]
    assert data["eventId"] == event.event_id
    # Both joins queued a person.
    assert queue.event_live_numbers(event.event_id)["waiting"] == 2


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
        (_rejoin_waiting, frozenset(), {"rejoined": True, "status": "WAITING", "joinedAt": None}),
        (_rejoin_active, frozenset(), {"rejoined": True, "status": "ACTIVE", "joinedAt": None}),
        (_rejoin_unknown, frozenset({"token", "joinedAt"}), {"rejoined": False, "status": "WAITING"}),
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
    queue.event_publish(event)
    return token


def _poll_closed(event, client: Client) -> str:
    token = _poll_waiting(event, client)
    _close(event)
    return token


def _poll_unknown(event, client: Client) -> str:
    _joined(event.event_id)
    return unknown_token(event.event_id)


@pytest.mark.parametrize(
    ("situation", "status"),
    [
        (_poll_waiting, "WAITING"),
        (_poll_active, "ACTIVE"),
        (_poll_booked, "BOOKED"),
        (_poll_paused, "WAITING"),
        (_poll_closed, "EXPIRED"),
        (_poll_unknown, "NOT_FOUND"),
    ],
    ids=["waiting", "active", "booked", "paused", "closed", "unknown"],
)
def test_poll_answers_the_same_on_both_lanes(lanes, event, snapshot, situation, status) -> None:
    token = situation(event, lanes[0])
    before = snapshot(event.event_id)
    call = Call("GET", f"/api/status/poll?token={token}&eventId={event.event_id}")
    # Jittered while there is something to wait for; else 0 on both.
    varying = frozenset({"nextPollMs"} if status in {"WAITING", "ACTIVE"} else ())
    answered, body = on_both_lanes(lanes, lambda: call, varying=varying)
    assert (answered, body["data"]["status"]) == (200, status)
    assert snapshot(event.event_id) == before  # a poll reads: the same state for both


def _scheduled(make_event, state: str):
    """An event with a scheduled start, and a person of its pre-queue, in `state`."""
    event = make_event(opens_at=timezone.now() + timedelta(hours=1))
    token = _joined(event.event_id)
    _joined(event.event_id)
    if state != "PRE_QUEUE":
        type(event).objects.filter(pk=event.pk).update(opens_at=timezone.now())
        event.refresh_from_db()
        queue.event_publish(event)
        assert queue.event_admit(event.event_id).outcome == "DRAW_DUE"
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
        status, body = on_both_lanes(lanes, lambda: join, varying=frozenset({"token", "joinedAt", "receipt"}))
        assert status == 200 and body["data"]["receipt"]
    # The draw's own endpoints are Django's lane on both clients, and documented.
    for path in (f"/api/queue/draw?eventId={event.event_id}&receipt={data['receipt']}",):
        if state != "WAITING":
            path = f"/api/queue/draw?eventId={event.event_id}"
        status, body = on_both_lanes(lanes, lambda p=path: Call("GET", p), fast=False)
        assert status == 200
        assert (
            body["data"]["status"]
            == {"PRE_QUEUE": "SCHEDULED", "DRAWING": "DRAWING", "WAITING": "DRAWN"}[state]
        )


# --- Booking and cancelling (Django's lane on both clients) ----------------------------


def test_booking_and_cancel_answer_the_same_on_both_lanes(lanes, make_event) -> None:
    event = make_event(total_seats=10)
    tokens = iter(_admitted(event, 2))
    booked: list[tuple[str, str]] = []
    cancels: list[HttpResponse] = []
    bookings: list[HttpResponse] = []
    # Each lane books and cancels in turn: 10 seats left before each booking.
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
def test_rate_limit_answers_the_same_on_both_lanes(lanes, event, settings, operation) -> None:
    settings.RATE_LIMIT_JOIN = 1
    settings.RATE_LIMIT_LEAVE = 1
    token = _joined(event.event_id)
    refused = []
    for lane in lanes:
        address = _address()  # each lane its own client: its own count
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
    assert not any(by_the_fast_lane(answer) for answer in answers)  # refusals of form are Django's
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
    """The body is read in the charset its Content-Type declares, on both lanes."""
    body = json.dumps({"eventId": event.event_id}).encode(encoding)
    call = Call("POST", "/api/queue/join", body, f"application/json; charset={charset}")
    answers = [send(lane, call) for lane in lanes]
    for answer in answers:
        assert_documented(call, answer)
    assert_same_answer(
        *answers, varying=frozenset({"token", "joinedAt"} if answers[0].status_code == 200 else ())
    )


# --- The schema itself -------------------------------------------------------------------


def test_the_committed_schema_is_what_the_declarations_generate(tmp_path) -> None:
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(generated))
    assert generated.read_text() == SCHEMA_FILE.read_text(), "docs/openapi.yaml is stale: make schema"


def test_the_schema_and_docs_pages_answer_with_local_assets_only(client) -> None:
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert yaml.safe_load(schema.content) == yaml.safe_load(SCHEMA_FILE.read_text())
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assets = re.findall(r"""<(?:script|link)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)""", html)
    assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets), assets
    assert all(a.startswith("/") and not a.startswith("//") for a in assets), assets
    assert "https://" not in html and "http://" not in html
