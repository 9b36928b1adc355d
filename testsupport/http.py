"""A person on a running server, over HTTP, as the stack's and checkout's end-to-end
tests drive it: join, poll, and waiting for something the server does in its time."""

import time
from collections.abc import Callable
from typing import Any

import requests


def join(base: str, event_id: str, timeout: float = 10) -> str:
    """POST /api/queue/join on the server at `base`: the new person's token."""
    resp = requests.post(f"{base}/api/queue/join", json={"eventId": event_id}, timeout=timeout)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]["token"]


def poll(base: str, token: str, event_id: str, timeout: float = 10) -> dict:
    """GET /api/status/poll: the answer's data."""
    resp = requests.get(
        f"{base}/api/status/poll", params={"token": token, "eventId": event_id}, timeout=timeout
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def wait_until(what: str, check: Callable[[], Any], seconds: float = 60) -> Any:
    """`check()`'s first true value, asked every 0.1 s; fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)
