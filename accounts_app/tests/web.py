"""A person at a browser, as the limits' tests need one: Django's forms posted to an
app server over HTTP with their CSRF token, from a client address of the test's
choosing (sent as X-Forwarded-For, which the server believes from TRUSTED_PROXIES)."""

import json
import re
from dataclasses import dataclass

import altcha
import requests

PASSWORD = "queue-Seat-7781"
TOO_MANY_SIGN_INS = "Too many sign-in attempts"
TOO_MANY_SIGN_UPS = "Too many sign-ups"


@dataclass
class Answer:
    status: int
    text: str
    location: str


class Browser:
    """One browser (its own cookies) at one client address."""

    def __init__(self, base: str, address: str) -> None:
        self.base = base
        self.address = address
        self.session = requests.Session()

    def get(self, path: str) -> Answer:
        return self._answer(self.session.get(self.base + path, headers=self._headers(), timeout=60))

    def post(self, path: str, fields: dict) -> Answer:
        """The form at `path`, filled in and sent (the page first: its CSRF cookie)."""
        if "csrftoken" not in self.session.cookies:
            self.get(path)
        data = {"csrfmiddlewaretoken": self.session.cookies["csrftoken"], **fields}
        answer = self.session.post(
            self.base + path, data=data, headers=self._headers(), timeout=60, allow_redirects=False
        )
        return self._answer(answer)

    def sign_in(self, path: str, username: str, password: str) -> Answer:
        return self.post(path, {"username": username, "password": password})

    def sign_up(self, username: str, **fields: str) -> Answer:
        form = {"username": username, "password1": PASSWORD, "password2": PASSWORD}
        return self.post("/accounts/signup/", {**form, **fields})

    def join(self, event_id: str) -> tuple[int, dict]:
        """A join of the event's line as the waiting room's page sends it, signed in
        (the session cookie, and the CSRF token Django's lane checks then)."""
        headers = {**self._headers(), "Accept": "application/json"}
        if "csrftoken" in self.session.cookies:
            headers["X-CSRFToken"] = self.session.cookies["csrftoken"]
        answer = self.session.post(
            f"{self.base}/api/queue/join", json={"eventId": event_id}, headers=headers, timeout=60
        )
        return answer.status_code, answer.json()

    def signed_in_as(self) -> str | None:
        """The account the server sees, from the header of the event list."""
        found = re.search(r'<span class="user">([^<]+)</span>', self.get("/").text)
        return found.group(1) if found else None

    def solved_challenge(self) -> str:
        """The sign-up page's proof-of-work challenge, solved as the page's widget
        solves it: the payload the form sends as `altcha`."""
        page = self.get("/accounts/signup/").text
        found = re.search(r'<script id="proof-challenge" type="application/json">(.*?)</script>', page)
        assert found, "the sign-up page asks for no proof of work"
        return solve(json.loads(found.group(1)))

    def _headers(self) -> dict[str, str]:
        return {"X-Forwarded-For": self.address, "Accept": "text/html"}

    @staticmethod
    def _answer(answer: requests.Response) -> Answer:
        return Answer(answer.status_code, answer.text, answer.headers.get("Location", ""))


def solve(challenge: dict) -> str:
    """A proof-of-work challenge solved: the payload a form or a join sends as `altcha`."""
    parsed = altcha.Challenge.from_dict(challenge)
    return altcha.Payload(parsed, altcha.solve_challenge(parsed)).to_base64()
