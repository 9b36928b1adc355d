"""Bad input gets a clear 4xx in the envelope and changes nothing; never a 500."""

import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from testsupport.line import unknown_token


def assert_envelope(body: dict, code: str) -> None:
    assert body["success"] is False
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "status", "code"),
    [
        ("post", "/api/queue/join", b"\xff\xfe\x00garbage", "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/join", b"{not json", "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/join", b"[1, 2]", "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/join", b'"string"', "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/join", b"null", "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/join", b'{"eventId": 123}', "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/join", b'{"eventId": ["a"]}', "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/join", b'{"eventId": "{bad}:x"}', "application/json", 400, "VALIDATION_ERROR"),
        (
            "post",
            "/api/queue/join",
            b'{"eventId": "' + b"x" * 65 + b'"}',
            "application/json",
            400,
            "VALIDATION_ERROR",
        ),
        (
            "post",
            "/api/queue/join",
            b"eventId=x",
            "application/x-www-form-urlencoded",
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "post",
            "/api/queue/join",
            b'{"pad": "' + b"x" * 20_000 + b'"}',
            "application/json",
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        ("post", "/api/queue/rejoin", b'{"token": 123}', "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/rejoin", b'{"token": "abc"}', "application/json", 400, "VALIDATION_ERROR"),
        ("post", "/api/queue/rejoin", b'{"token": {"a": 1}}', "application/json", 400, "VALIDATION_ERROR"),
        (
            "post",
            "/api/queue/rejoin",
            b'{"token": "' + b"a" * 5000 + b'"}',
            "application/json",
            400,
            "VALIDATION_ERROR",
        ),
        ("post", "/api/queue/rejoin", b"{}", "application/json", 400, "MISSING_TOKEN"),
        ("get", "/api/status/poll?token=%ff%fe", None, None, 400, "VALIDATION_ERROR"),
        ("get", "/api/status/poll?token=" + "1" * 100, None, None, 400, "VALIDATION_ERROR"),
        ("get", "/api/status/poll?token=", None, None, 400, "MISSING_TOKEN"),
        (
            "get",
            "/api/status/poll?token=" + str(uuid.UUID(int=1)) + "&eventId=%00",
            None,
            None,
            400,
            "VALIDATION_ERROR",
        ),
        ("delete", "/api/queue/leave?token=zzz", None, None, 400, "VALIDATION_ERROR"),
        ("get", "/api/queue/join", None, None, 405, "METHOD_NOT_ALLOWED"),
        ("put", "/api/status/poll", None, None, 405, "METHOD_NOT_ALLOWED"),
        ("post", "/health", None, None, 405, "METHOD_NOT_ALLOWED"),
        ("get", "/api/nowhere", None, None, 404, "NOT_FOUND"),
    ],
)
def test_bad_requests_get_a_4xx_envelope_and_change_nothing(
    api, event, snapshot, method, path, body, content_type, status, code
):
    api.token(event.event_id)
    before = snapshot(event.event_id)
    if "?" in path and method != "post":
        path += f"&eventId={event.event_id}" if "eventId" not in path else ""
    kwargs = {"data": body, "content_type": content_type} if body is not None else {}
    resp = getattr(api.client, method)(path, **kwargs)
    assert resp.status_code == status, resp.content
    assert resp["Content-Type"].startswith("application/json")
    assert_envelope(resp.json(), code)
    assert snapshot(event.event_id) == before


@pytest.mark.urls("queue_app.tests.urls_with_a_bug")
def test_a_bug_is_a_500_in_the_envelope(api):
    resp = api.client.get("/boom")
    assert resp.status_code == 500
    assert_envelope(resp.json(), "INTERNAL_ERROR")


def test_redis_down_is_503_not_500(api, event):
    nowhere = {"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=nowhere):
        stranger = unknown_token(event.event_id)
        resp = api.client.get(f"/api/status/poll?token={stranger}&eventId={event.event_id}")
    assert resp.status_code == 503
    assert_envelope(resp.json(), "REDIS_UNAVAILABLE")


def test_each_code_has_one_status_meaning_and_message():
    from ticketing.errors import CODES, STATUS, DomainError

    assert STATUS == {code: c.status for code, c in CODES.items()}
    for code, c in CODES.items():
        assert 400 <= c.status < 600 and c.meaning and c.message.endswith("."), code
        err = DomainError(code)
        assert (err.status, err.message) == (c.status, c.message)
    assert DomainError("SOLD_OUT", "Gone.").message == "Gone."  # a refusal may say more
    with pytest.raises(KeyError):
        DomainError("NO_SUCH_CODE")
