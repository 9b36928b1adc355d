"""The sign-up flood of bench/floods.py: N sign-ups from one address, as fast as they
go, and how many were accepted and refused (docs/fairness.md).

    .venv/bin/python bench/floods.py signup --url http://127.0.0.1:8000 [-n 40] [--concurrency 8]
        [--address 203.0.113.7] [--json]

Each sign-up is a browser of its own, as a script makes them: the sign-up page (its
CSRF cookie, and its proof-of-work challenge when an event asks for one), then the
form with a fresh username. A challenge is solved as the page solves it (the
`altcha` package), so the flood pays what a person pays; the time it took is
reported. `--address` sends X-Forwarded-For, which the server believes only from
TRUSTED_PROXIES; without it the flood comes from this machine's own address.

An answer is accepted (302: the account was made), refused by the client's limit
(429, RATE_LIMIT_SIGN_UP), or refused by the form (200: proof of work, or any other
reason the page gives).
"""

import json
import re
import sys
import threading
import time
import uuid
from collections import Counter

import altcha
import requests

PASSWORD = "flood-Seat-7781"
CHALLENGE = re.compile(r'<script id="proof-challenge" type="application/json">(.*?)</script>')


def sign_up(base: str, username: str, address: str | None) -> tuple[str, float]:
    """One sign-up: its outcome (accepted, limit, form) and the seconds spent solving."""
    headers = {"Accept": "text/html"} | ({"X-Forwarded-For": address} if address else {})
    browser = requests.Session()
    page = browser.get(f"{base}/accounts/signup/", headers=headers, timeout=60)
    page.raise_for_status()
    form = {
        "csrfmiddlewaretoken": browser.cookies["csrftoken"],
        "username": username,
        "password1": PASSWORD,
        "password2": PASSWORD,
    }
    solving = 0.0
    found = CHALLENGE.search(page.text)
    if found:
        started = time.perf_counter()
        challenge = altcha.Challenge.from_dict(json.loads(found.group(1)))
        form["altcha"] = altcha.Payload(challenge, altcha.solve_challenge(challenge)).to_base64()
        solving = time.perf_counter() - started
    answer = browser.post(
        f"{base}/accounts/signup/", data=form, headers=headers, timeout=60, allow_redirects=False
    )
    outcome = {302: "accepted", 429: "limit", 200: "form"}.get(answer.status_code, str(answer.status_code))
    return outcome, solving


def run(base: str, n: int = 40, concurrency: int = 8, address: str | None = None) -> dict:
    """Send `n` sign-ups from one address, `concurrency` at a time."""
    tag = uuid.uuid4().hex[:8]
    outcomes: Counter[str] = Counter()
    solving: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(first: int) -> None:
        for i in range(first, n, concurrency):
            try:
                outcome, solved = sign_up(base, f"flood-{tag}-{i}", address)
            except (requests.RequestException, KeyError) as exc:
                with lock:
                    errors.append(exc)
                continue
            with lock:
                outcomes[outcome] += 1
                if solved:
                    solving.append(solved)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(min(concurrency, n))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "signUps": n,
        "seconds": round(time.perf_counter() - started, 1),
        "accepted": outcomes["accepted"],
        "refused": n - outcomes["accepted"] - len(errors),
        "byOutcome": dict(outcomes),
        "challengesSolved": len(solving),
        "solvingSeconds": round(sum(solving), 2),  # summed over the sign-ups
        "errors": [repr(e) for e in errors[:5]],
    }


def report(result: dict, as_json: bool = False) -> int:
    """Print the result; the exit status: 1 when a sign-up failed to be sent."""
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(result["byOutcome"].items()) if k != "accepted")
        print(
            f"{result['signUps']} sign-ups from one address in {result['seconds']} s: "
            f"accepted {result['accepted']}, refused {result['refused']}" + (f" ({why})" if why else "")
        )
        if result["challengesSolved"]:
            print(
                f"proof of work: {result['challengesSolved']} challenges solved, "
                f"{result['solvingSeconds']} s summed over the sign-ups"
            )
        for error in result["errors"]:
            print(f"error: {error}", file=sys.stderr)
    return 1 if result["errors"] else 0
