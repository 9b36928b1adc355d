"""The whole journey of one person, for Locust: join, poll as told, book once ACTIVE.

    .venv/bin/python bench/run.py --serve &        # the stack and a 1/s admission tick
    .venv/bin/locust -f bench/locustfile.py --headless -u 200 -r 50 -t 60s \\
        --host http://127.0.0.1:8000 --event-id bench-journey

Each simulated person joins, then polls exactly as the server says (`nextPollMs`),
books one seat as soon as a poll answers ACTIVE, and stops (`--repeat`: starts over
as a new person instead). Besides the three endpoints, the stats show one line per
journey outcome under the type JOURNEY, whose response time is the whole journey:
join to booked, i.e. the time spent in line plus the requests.

Expected refusals are not failures: RATE_LIMIT on join (the client waits
Retry-After and tries again) and SOLD_OUT / INSUFFICIENT_SEATS on booking. They are
counted under their own names so that they stay visible.
"""

import time

from locust import HttpUser, events, task
from locust.exception import StopUser

SOLD_OUT = {"SOLD_OUT", "INSUFFICIENT_SEATS"}


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--event-id", default="", help="event to queue for (default: the server's EVENT_ID)")
    parser.add_argument("--seat-count", type=int, default=1, help="seats per booking")
    parser.add_argument("--repeat", action="store_true", help="after a journey, start over as a new person")


def _code(response) -> str:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


class Person(HttpUser):
    """One person in the waiting room."""

    def on_start(self) -> None:
        """Read the command-line options; start as a person without a token."""
        options = self.environment.parsed_options
        self.event_id = getattr(options, "event_id", "") or ""
        self.seat_count = getattr(options, "seat_count", 1)
        self.repeat = getattr(options, "repeat", False)
        self._reset()

    def _reset(self) -> None:
        self.token: str | None = None
        self.pause = 0.0
        self.started = time.monotonic()

    def wait_time(self) -> float:
        """What the server asked for (nextPollMs, Retry-After); nothing before joining."""
        return self.pause

    @task
    def step(self) -> None:
        """Join first; then poll (which books once ACTIVE)."""
        if self.token is None:
            self.join()
        else:
            self.poll()

    def join(self) -> None:
        """POST /api/queue/join; on 429 wait Retry-After and try again."""
        body = {"eventId": self.event_id} if self.event_id else {}
        with self.client.post("/api/queue/join", json=body, catch_response=True) as response:
            if response.status_code == 200:
                self.token = response.json()["data"]["token"]
                self.started = time.monotonic()
                self.pause = 0.0
            elif response.status_code == 429:
                response.success()
                self.pause = float(response.headers.get("Retry-After", "1"))
                self._event("rate limited on join, retried", ok=True)
            else:
                response.failure(_code(response))
                self.pause = 1.0

    def poll(self) -> None:
        """GET /api/status/poll; wait what nextPollMs says; book when ACTIVE."""
        params = {"token": self.token}
        if self.event_id:
            params["eventId"] = self.event_id
        with self.client.get(
            "/api/status/poll", params=params, name="/api/status/poll", catch_response=True
        ) as response:
            if response.status_code != 200:
                response.failure(_code(response))
                self.pause = 1.0
                return
            data = response.json()["data"]
        status = data["status"]
        self.pause = data["nextPollMs"] / 1000
        if status == "ACTIVE":
            self.book()
        elif status != "WAITING":
            # EXPIRED (window passed, event closed) or NOT_FOUND: the journey ends here.
            self._finish(f"ended {status}", ok=status == "EXPIRED" and data.get("eventStatus") == "CLOSED")

    def book(self) -> None:
        """POST /api/booking for the ACTIVE token; the journey ends either way."""
        body = {"token": self.token, "seatCount": self.seat_count}
        if self.event_id:
            body["eventId"] = self.event_id
        with self.client.post("/api/booking", json=body, catch_response=True) as response:
            if response.status_code == 200:
                outcome, ok = "booked", True
            elif (code := _code(response)) in SOLD_OUT:
                response.success()
                outcome, ok = "sold out", True
            else:
                response.failure(code)
                outcome, ok = f"booking refused {code}", False
        # Outside the `with`: a StopUser inside it would keep the request unreported.
        self._finish(outcome, ok=ok)

    def _event(self, name: str, *, ok: bool, elapsed_ms: float = 0.0) -> None:
        events.request.fire(
            request_type="JOURNEY",
            name=name,
            response_time=elapsed_ms,
            response_length=0,
            exception=None if ok else RuntimeError(name),
            context={},
        )

    def _finish(self, outcome: str, *, ok: bool) -> None:
        self._event(outcome, ok=ok, elapsed_ms=(time.monotonic() - self.started) * 1000)
        if not self.repeat:
            raise StopUser()
        self._reset()
