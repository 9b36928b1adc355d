"""Log lines with fields: JSON objects for a log pipeline, or key=value text for people.

A line that matters to operators (an admission tick, a booking decision: see
ticketing/metrics.py) is logged with its numbers in `extra`, not formatted into the
message, so that a log pipeline can filter and graph them without parsing prose.
`LOG_FORMAT=json` (settings.LOGGING) picks `JsonFormatter`; the default,
`KeyValueFormatter`, appends the same fields to the usual text line.
"""

import datetime
import json
import logging
import re
from typing import Any

# Every attribute a LogRecord has before `extra` is applied: what is left over is extra.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

# Values printed bare in key=value text; anything else (spaces, quotes, newlines: a
# client's input could carry them) is quoted as JSON, so one record stays one line.
_BARE = re.compile(r"[\w.:/@+-]+")


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields the caller passed in `extra`, in the order given."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the
    record's `extra` fields, and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **extra_fields(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    text = str(value)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """The usual text line, with the record's `extra` fields after the message as
    key=value (before a traceback, which stays on the lines below)."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{k}={_text(v)}" for k, v in extra_fields(record).items())
        if not fields:
            return line
        head, newline, rest = line.partition("\n")
        return f"{head} {fields}{newline}{rest}"
