"""Proof of work at join, in headless Chromium as a phone: a phone-sized touch
screen and the page's CPU slowed 4x (DevTools' CPU throttling). The waiting room
solves the event's ALTCHA challenge in the background with the vendored widget,
then joins with the solution. The measured solve time goes to
test-artifacts/pow.json (bench/pow_browser.py measures it per difficulty). The pages,
and the requests the tests send themselves, go to the production server
(test_browser.py)."""

import json
import re
import time
from pathlib import Path

import altcha
import pytest
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from booking_app.models import Reservation
from queue_app import events
from queue_app.models import SUGGESTED_PROOF_OF_WORK
from testsupport.line import admit_all
from ticketing.tests.browser import rank_shown, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts"
CHECKING = "Checking that you are a person… (this takes a second or two)"
CHECK_FAILED = "The check did not pass. Trying again…"
# Every (state, status line) the room shows, from the first paint: a status shown for
# a moment is still seen by the test.
RECORD_STATUS = """
window.__statuses = [];
document.addEventListener("DOMContentLoaded", () => {
  const room = document.getElementById("room");
  if (!room) return;
  const note = () => {
    const seen = [room.dataset.state, document.getElementById("joining").textContent];
    const last = window.__statuses[window.__statuses.length - 1];
    if (!last || last[0] !== seen[0] || last[1] !== seen[1]) window.__statuses.push(seen);
  };
  note();
  const all = { attributes: true, childList: true, subtree: true, characterData: true };
  new MutationObserver(note).observe(room, all);
});
"""


@pytest.fixture
def phone(browser, production_server, console, make_event):  # noqa: F811 (the fixtures imported above)
    """A phone: small touch screen, English, and a CPU 4x slower than this machine's.
    Closed before the test's events are wiped (it asks for `make_event` so that it is
    set up after it, and torn down before): a page still retrying would see them go."""
    context = browser.new_context(
        locale="en-US",
        viewport={"width": 390, "height": 844},
        device_scale_factor=3,
        is_mobile=True,
        has_touch=True,
        base_url=production_server,
    )
    console.watch(context)
    context.add_init_script(RECORD_STATUS)
    page = context.new_page()
    page.set_default_timeout(30_000)
    context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 4})
    yield page
    context.close()


def statuses(page) -> list[tuple[str, str]]:
    return [tuple(s) for s in page.evaluate("window.__statuses")]


def api_join(base: str, event_id: str, altcha: str | None = None) -> dict:
    """A join sent to the server `base` as an API client sends it."""
    body = {"eventId": event_id} | ({"altcha": altcha} if altcha else {})
    answer = requests.post(f"{base}{reverse('queue-join')}", json=body, timeout=30)
    return {"status": answer.status_code, **answer.json()}


def test_the_whole_journey_with_proof_of_work(phone, make_event, production_server):
    event = make_event(name="KTX Seollal 07:00", total_seats=10, proof_of_work=SUGGESTED_PROOF_OF_WORK)

    with phone.expect_request(lambda r: r.url.endswith("/api/queue/join") and r.method == "POST") as joined:
        phone.goto(f"/events/{event.event_id}/")
    payload = joined.value.post_data_json.get("altcha")
    assert payload, "the join carried no proof of work"
    phone.wait_for_function("document.querySelector('#position').textContent.includes('number 1')")
    assert ("joining", CHECKING) in statuses(phone)  # the person was told what was happening
    assert phone.locator("altcha-widget").count() == 0  # nothing left on the page

    solve_ms = int(phone.evaluate("document.documentElement.dataset.powMs"))
    workers = phone.evaluate("navigator.hardwareConcurrency")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    figures = {
        "difficulty": SUGGESTED_PROOF_OF_WORK,
        "cpuThrottling": 4,
        "workers": workers,
        "solveMs": solve_ms,
    }
    (ARTIFACTS / "pow.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nproof of work {SUGGESTED_PROOF_OF_WORK:,}: {solve_ms} ms (CPU 4x slower, {workers} workers)")

    # A solution works once: the same payload, sent again, is refused.
    again = api_join(production_server, event.event_id, payload)
    assert (again["status"], again["error"]["code"]) == (403, "PROOF_OF_WORK")
    assert events.event_live_numbers(event.event_id)["waiting"] == 1

    admit_all(event.event_id)
    phone.wait_for_url(re.compile(r"/book/$"))
    phone.select_option("#id_seat_count", "2")
    phone.fill("#id_buyer_name", "Park Jisoo")
    phone.fill("#id_buyer_email", "jisoo@example.com")
    phone.get_by_role("button", name="Confirm booking").click()
    phone.wait_for_url(re.compile(r"/reservations/"))
    rid = phone.locator("#reservation-id").inner_text()
    row = Reservation.objects.get(reservation_id=rid)
    assert (row.seat_count, row.status) == (2, "CONFIRMED")


def test_an_account_event_asks_a_signed_out_person_to_sign_in(phone, make_event):
    event = make_event(require_account=True, proof_of_work=SUGGESTED_PROOF_OF_WORK)
    asked: list[str] = []
    phone.on("request", lambda r: asked.append(r.url) if "/api/queue/" in r.url else None)

    phone.goto(f"/events/{event.event_id}/")
    phone.get_by_role("heading", name="Sign in to join this line.").wait_for()
    link = phone.locator("#signin-link")
    assert link.inner_text() == "Sign in"
    assert link.get_attribute("href") == f"{reverse('login')}?next=/events/{event.event_id}/"
    (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
    phone.screenshot(path=str(ARTIFACTS / "screenshots" / "pow-sign-in.png"), full_page=True)
    assert asked == []  # no challenge solved, no join tried
    numbers = events.event_live_numbers(event.event_id)
    assert (numbers["waiting"], numbers["active"]) == (0, 0)


def test_a_signed_in_person_joins_an_account_event(phone, make_event, production_server):
    event = make_event(require_account=True, proof_of_work=10_000)
    user = get_user_model().objects.create_user("minji", password="not-used-here-1")
    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    phone.context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": production_server}]
    )

    with phone.expect_request(lambda r: r.url.endswith("/api/queue/join") and r.method == "POST") as joined:
        phone.goto(f"/events/{event.event_id}/")
    assert joined.value.post_data_json.get("altcha")
    assert joined.value.headers.get("x-csrftoken")  # a signed-in join is checked for CSRF
    phone.wait_for_function("document.querySelector('#position').textContent.includes('number 1')")


def test_a_rejoin_at_the_back_solves_only_when_asked(phone, console, make_event, production_server):  # noqa: F811
    event = make_event(proof_of_work=10_000)
    console.expect(r"status of 403 .*/api/queue/rejoin")  # the rejoin without a solution: PROOF_OF_WORK
    phone.goto(f"/events/{event.event_id}/")
    phone.wait_for_function("document.querySelector('#position').textContent.includes('number 1')")
    token = phone.evaluate(f"localStorage.getItem('queueToken:{event.event_id}')")
    left = requests.delete(
        f"{production_server}{reverse('queue-leave')}?token={token}&eventId={event.event_id}", timeout=30
    )
    assert left.status_code == 200
    rejoins: list[dict] = []
    phone.on(
        "request", lambda r: rejoins.append(r.post_data_json) if r.url.endswith("/api/queue/rejoin") else None
    )

    phone.reload()  # the line forgot this token: rejoin, at the back
    phone.wait_for_function(f"localStorage.getItem('queueToken:{event.event_id}') !== '{token}'")
    phone.wait_for_function("document.querySelector('#position').textContent.includes('number 1')")
    assert [("altcha" in body) for body in rejoins] == [False, True]  # first without, then solved


def test_a_refused_solution_is_solved_again(phone, console, make_event):  # noqa: F811
    """An expired or used solution: a new challenge, solved again, and the place."""
    event = make_event(proof_of_work=10_000)
    console.expect(r"status of 403 .*/api/queue/join")  # join_route's refusal
    refusals = {"left": 1}

    def join_route(route):
        if refusals["left"]:
            refusals["left"] -= 1
            route.fulfill(
                status=403,
                content_type="application/json",
                body='{"success": false, "error": {"code": "PROOF_OF_WORK", "message": "used before"}}',
            )
        else:
            route.continue_()

    phone.route("**/api/queue/join", join_route)
    phone.goto(f"/events/{event.event_id}/")
    phone.wait_for_function("document.querySelector('#position').textContent.includes('number 1')")
    assert ("joining", CHECK_FAILED) in statuses(phone)
    assert rank_shown(phone) == 1


def test_solutions_refused_again_and_again_are_retried_slowly(phone, console, make_event):  # noqa: F811
    event = make_event(proof_of_work=10_000)
    console.expect(r"status of 403 .*/api/queue/join")  # join_route's refusals
    joins: list[tuple[float, str]] = []  # when each arrived, and its solution

    def join_route(route):
        joins.append((time.monotonic(), route.request.post_data_json["altcha"]))
        route.fulfill(
            status=403,
            content_type="application/json",
            body='{"success": false, "error": {"code": "PROOF_OF_WORK", "message": "expired"}}',
        )

    phone.route("**/api/queue/join", join_route)
    phone.goto(f"/events/{event.event_id}/")
    phone.locator("#error").get_by_text(CHECK_FAILED).wait_for()
    # The third refusal is on screen; the next try comes after the retries' back-off
    # (its answer: by then join_route has noted it).
    with phone.expect_response(lambda r: r.url.endswith("/api/queue/join"), timeout=60_000):
        (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
        phone.screenshot(path=str(ARTIFACTS / "screenshots" / "pow-check-failed.png"), full_page=True)
        assert len(joins) == 3 and len({solution for _, solution in joins}) == 3  # three, each solved
    # A pause of the back-off's first step (2 s) before the fourth, not a busy loop.
    assert joins[3][0] - joins[2][0] >= 2.0, joins


# The refusal of a connection at its cap of places, as the room shows it.
CAP_REFUSAL = {
    "en": (
        "This connection already has as many places in line as this event allows.",
        "mobile data instead of Wi-Fi",
        "Try again",
    ),
    "ko": (
        "이 인터넷 연결로 잡을 수 있는 대기 자리가 이미 모두 찼습니다.",
        "Wi-Fi 대신 모바일 데이터",
        "다시 시도",
    ),
}


def solved(base: str, event_id: str) -> str:
    """A challenge fetched from the server `base`, solved as an API client solves it."""
    answer = requests.get(f"{base}{reverse('queue-challenge')}", params={"eventId": event_id}, timeout=30)
    challenge = altcha.Challenge.from_dict(answer.json()["data"]["challenge"])
    return altcha.Payload(challenge, altcha.solve_challenge(challenge)).to_base64()


def test_an_address_at_its_cap_is_told_so(phone, console, make_event, production_server):  # noqa: F811
    event = make_event(max_places_per_address=1)
    assert api_join(production_server, event.event_id)["status"] == 200  # this address's one place
    console.expect(r"status of 429 .*/api/queue/join")  # the browser's join: TOO_MANY_PLACES

    phone.goto(f"/events/{event.event_id}/")
    heading, advice, again = CAP_REFUSAL["en"]
    phone.get_by_role("heading", name=heading).wait_for()
    assert advice in phone.locator('#room [data-show="refused"]').inner_text()
    assert phone.get_by_role("button", name=again).is_visible()
    assert events.event_live_numbers(event.event_id)["waiting"] == 1


@pytest.mark.parametrize(
    ("lang", "viewport"),
    [("en", {"width": 1280, "height": 800}), ("ko", {"width": 390, "height": 844})],
    ids=["desktop-en", "phone-ko"],
)
def test_the_third_person_on_an_address_is_refused_before_any_proof_of_work(
    browser, console, make_event, production_server, lang, viewport
):  # noqa: F811
    """Two places taken from one address (cap 2, proof of work on): the third
    person's page learns of the cap from the challenge, and says so in plain words
    with no challenge solved and no join sent. Once a place on that connection is
    freed, "Try again" solves a challenge and joins."""
    event = make_event(max_places_per_address=2, proof_of_work=10_000)
    base, event_id = production_server, event.event_id
    taken = [api_join(base, event_id, solved(base, event_id)) for _ in range(2)]
    assert [answer["status"] for answer in taken] == [200, 200]
    context = browser.new_context(
        locale={"en": "en-US", "ko": "ko-KR"}[lang], viewport=viewport, base_url=production_server
    )
    console.watch(context)
    console.expect(r"status of 429 .*/api/queue/challenge")  # the cap, answered at the challenge
    page = context.new_page()
    page.set_default_timeout(30_000)
    asked: list[tuple[str, str]] = []
    page.on("request", lambda r: "/api/" in r.url and asked.append((r.method, r.url.partition("?")[0])))

    page.goto(f"/events/{event.event_id}/")
    heading, advice, again = CAP_REFUSAL[lang]
    page.get_by_role("heading", name=heading).wait_for()
    panel = page.locator('#room [data-show="refused"]')
    assert advice in panel.inner_text()
    assert page.locator("#error").is_hidden()
    shot(page, f"cap-refused-{lang}")
    assert asked == [("GET", f"{production_server}{reverse('queue-challenge')}")]  # nothing solved, no join
    assert page.evaluate("document.documentElement.dataset.powMs") is None
    assert events.event_live_numbers(event.event_id)["waiting"] == 2

    # Someone on this connection leaves: trying again solves a challenge, and joins.
    token = taken[0]["data"]["token"]
    left = requests.delete(
        f"{production_server}{reverse('queue-leave')}?token={token}&eventId={event.event_id}", timeout=30
    )
    assert left.json()["data"]["removed"] is True
    with page.expect_request(lambda r: r.url.endswith("/api/queue/join") and r.method == "POST") as joined:
        page.get_by_role("button", name=again).click()
    assert joined.value.post_data_json.get("altcha")
    page.wait_for_function("document.querySelector('#position').textContent.includes('2')")
    assert rank_shown(page) == 2
    context.close()
