"""One structured line per admission tick and per booking decision: JSON objects with
LOG_FORMAT=json, key=value text otherwise."""

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.conf import settings

import ticketing.asgi  # noqa: F401 (its django.setup() reconfigures logging: at import, not under caplog)
from queue_app import events
from queue_app import services as queue
from ticketing.logs import JsonFormatter, KeyValueFormatter
from ticketing.tests.test_metrics import book, join, tick


@pytest.fixture
def lines() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    """What the JSON formatter writes for the tick's and the bookings' loggers."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger("ticketing.tick"), logging.getLogger("ticketing.booking")]
    for logger in loggers:
        logger.addHandler(handler)
    yield out
    for logger in loggers:
        logger.removeHandler(handler)


def parsed(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_tick_logs_one_json_line_per_event(lines, make_event):
    event = make_event()
    queue.queue_join(event_id=event.event_id)
    queue.queue_join(event_id=event.event_id)
    tick(event.event_id)
    ours = [line for line in parsed(lines) if line.get("event") == event.event_id]
    assert ours[-1] | {"time": None, "ms": None} == {
        "time": None,
        "level": "INFO",
        "logger": "ticketing.tick",
        "message": "admission tick",
        "event": event.event_id,
        "outcome": "ADMITTED",
        "admitted": 2,
        "waiting": 0,
        "active": 2,
        "ms": None,
    }
    assert ours[-1]["ms"] > 0
    assert ours[-1]["time"].endswith("+00:00")


def test_each_booking_decision_logs_one_json_line(lines, client, make_event, db):
    event = make_event(total_seats=10)
    token = join(client, event.event_id)
    stranger = join(client, event.event_id)
    event.admit_per_second = 1
    event.save()
    events.event_publish(event)
    tick(event.event_id)  # admits `token` only
    status, body = book(client, token, event.event_id, 2)
    assert status == 200
    assert book(client, stranger, event.event_id, 1)[1]["error"]["code"] == "NOT_ACTIVE"
    confirmed, refused = [line for line in parsed(lines) if line["logger"] == "ticketing.booking"]
    assert {k: confirmed[k] for k in ("message", "reservation", "event", "outcome", "seats")} == {
        "message": "booking decided",
        "reservation": body["data"]["reservationId"],
        "event": event.event_id,
        "outcome": "CONFIRMED",
        "seats": 2,
    }
    assert isinstance(confirmed["ms"], float) and confirmed["ms"] > 0
    assert (refused["outcome"], refused["reservation"], refused["seats"]) == ("NOT_ACTIVE", None, 1)


def _with(extra: dict) -> logging.LogRecord:
    record = logging.LogRecord(
        "ticketing.booking", logging.INFO, __file__, 1, "booking %s", ("decided",), None
    )
    record.__dict__.update(extra)
    return record


def test_the_text_format_puts_the_fields_after_the_message_on_one_line():
    formatter = KeyValueFormatter("%(levelname)s %(name)s %(message)s")
    # A client's input may carry quotes and newlines: quoted, one record stays one line.
    line = formatter.format(_with({"event": "ktx-1", "seats": 2, "buyer": 'Kim "x"\nEvil=1'}))
    assert line == 'INFO ticketing.booking booking decided event=ktx-1 seats=2 buyer="Kim \\"x\\"\\nEvil=1"'
    assert formatter.format(_with({})) == "INFO ticketing.booking booking decided"


def test_a_json_line_carries_the_traceback():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = _with({"event": "ktx-1"})
        record.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(record))
    assert line["event"] == "ktx-1" and "RuntimeError: boom" in line["exception"]


def _process(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"import django, logging; django.setup(); {code}"],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "ticketing.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_log_format_json_makes_every_line_a_json_object():
    said = "logging.getLogger('ticketing.booking').info('booking decided', extra={'event': 'e', 'seats': 2})"
    result = _process(said, LOG_FORMAT="json")
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stderr.strip().splitlines()[-1])
    assert (line["logger"], line["message"], line["event"], line["seats"]) == (
        "ticketing.booking",
        "booking decided",
        "e",
        2,
    )
    result = _process(said, LOG_FORMAT="")
    assert (
        result.stderr.strip().splitlines()[-1].endswith("ticketing.booking booking decided event=e seats=2")
    )
    result = _process("", LOG_FORMAT="xml")
    assert result.returncode != 0 and "LOG_FORMAT" in result.stderr
