"""What the tests share besides their fixtures (which live in the conftest.py files):
clients for both lanes (clients.py), an event's line and clock in Redis (line.py),
booking (booking.py), and the app servers and Redis servers a test starts
(servers.py). An ordinary package, imported by name, as healthchecks' hc/test.py.

This module: whether a missing service skips a test or fails it, and a thread
whose failure fails its test."""

import os
import threading

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(condition: bool, reason: str) -> None:
    """Skip when a service is missing on a developer's machine; fail in CI."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


class CheckedThread(threading.Thread):
    """A test's thread whose exception reaches the test: `join()` raises it again in
    the test's thread, naming the thread, so the failure says what went wrong there."""

    error: BaseException | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:  # noqa: B036 - raised again by join(), whatever it is
            self.error = exc

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.is_alive():
            raise AssertionError(f"thread {self.name} still runs after {timeout} s")
        if self.error is not None:
            raise AssertionError(f"thread {self.name} failed: {self.error!r}") from self.error
