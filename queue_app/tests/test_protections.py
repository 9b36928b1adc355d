"""An event's protections at join (docs/fairness.md): proof of work, a cap on live
places per client address, accounts with one place each. Each is off by default,
and each refusal changes nothing and is counted for the operator."""

import threading
import uuid

import altcha
import pytest
import requests
from django.contrib.auth import get_user_model

from queue_app import admission, events, proof, services
from queue_app.tokens import parse_token
from testsupport.line import end_windows, event_state, refusals, unknown_token
from ticketing.errors import CODES


def solve(event_id: str, api=None) -> str:
    """What a client does: fetch a challenge, solve it, send the payload."""
    if api is None:
        data = proof.challenge(event_id, 1_000)
    else:
        status, body = api.call("get", f"/api/queue/challenge?eventId={event_id}")
        assert status == 200, body
        data = body["data"]["challenge"]
    challenge = altcha.Challenge.from_dict(data)
    return altcha.Payload(challenge, altcha.solve_challenge(challenge)).to_base64()


def join(api, event_id: str, **body) -> tuple[int, dict]:
    extra = {k: body.pop(k) for k in list(body) if k.isupper()}
    return api.call("post", "/api/queue/join", {"eventId": event_id, **body}, **extra)


def at_once(n: int, join_once) -> list[str]:
    """`join_once` in n threads released together: each one's token, or its error code."""
    outcomes, barrier = [], threading.Barrier(n)

    def attempt() -> None:
        barrier.wait()
        try:
            outcomes.append(join_once().token)
        except services.DomainError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=attempt) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def refused(event_id: str, total: int = 0) -> dict:
    return refusals(event_id, total)


def _ipv4() -> str:
    n = uuid.uuid4().int
    return f"198.18.{n % 250}.{n // 250 % 250}"


def _net64() -> str:
    n = uuid.uuid4().int
    return f"2001:db8:{n % 65536:x}:{n // 65536 % 65536:x}"


# --- Proof of work ---------------------------------------------------------------


def test_the_challenge_says_whether_the_event_asks_for_proof(lanes_api, make_event):
    plain, hot = make_event(), make_event(proof_of_work=2_000)
    status, body = lanes_api.call("get", f"/api/queue/challenge?eventId={plain.event_id}")
    assert status == 200 and body["data"]["required"] is False
    assert body["data"]["challenge"]["parameters"]["data"] == {"event": plain.event_id, "difficulty": 0}
    status, body = lanes_api.call("get", f"/api/queue/challenge?eventId={hot.event_id}")
    assert status == 200 and body["data"]["required"] is True
    params = body["data"]["challenge"]["parameters"]
    # The event, and the difficulty it asked, signed with the challenge.
    assert params["algorithm"] == "SHA-256" and params["data"] == {"event": hot.event_id, "difficulty": 2_000}
    assert lanes_api.call("get", "/api/queue/challenge?eventId=no-such-event")[1]["error"]["code"] == (
        "EVENT_NOT_FOUND"
    )


def test_a_join_without_a_solution_is_refused_and_changes_nothing(lanes_api, make_event):
    event = make_event(proof_of_work=1_000)
    before = event_state(event.event_id)
    status, body = join(lanes_api, event.event_id)
    assert (status, body["error"]["code"]) == (403, "PROOF_OF_WORK")
    assert event_state(event.event_id) == before
    assert refused(event.event_id, 1) == {"proof_of_work": 1}


def test_a_solution_works_once(lanes_api, make_event):
    event = make_event(proof_of_work=1_000)
    payload = solve(event.event_id, lanes_api)
    status, body = join(lanes_api, event.event_id, altcha=payload)
    assert status == 200, body
    before = event_state(event.event_id)
    status, body = join(lanes_api, event.event_id, altcha=payload)
    assert (status, body["error"]["code"]) == (403, "PROOF_OF_WORK")
    assert "used before" in body["error"]["message"]
    assert event_state(event.event_id) == before
    # A new solution is a new place.
    assert join(lanes_api, event.event_id, altcha=solve(event.event_id, lanes_api))[0] == 200


def test_a_reused_solution_wins_once_among_concurrent_joins(make_event):
    """Eight threads send the same solution at once: one place, seven refusals."""
    event = make_event(proof_of_work=1_000)
    payload = solve(event.event_id)
    outcomes = at_once(8, lambda: services.queue_join(event_id=event.event_id, proof=payload))
    assert sorted(outcomes).count("PROOF_OF_WORK") == 7
    assert events.event_live_numbers(event.event_id)["waiting"] == 1


def _served(base: str, event_id: str) -> str:
    """`solve`, with the challenge fetched from a server."""
    answer = requests.get(f"{base}/api/queue/challenge", params={"eventId": event_id}, timeout=10).json()
    challenge = altcha.Challenge.from_dict(answer["data"]["challenge"])
    return altcha.Payload(challenge, altcha.solve_challenge(challenge)).to_base64()


def test_challenges_stocked_before_proof_of_work_was_on_are_refused_after(production_server, make_event):
    """The review's script, on the production server: 30 challenges fetched while
    the event asked no proof of work (the easiest: solved at once), then Hot sale
    turns it on. Each of those solutions is refused and changes nothing (before: 24
    of 30 joined); a challenge fetched now buys a place."""
    event = make_event()
    stocked = [_served(production_server, event.event_id) for _ in range(30)]
    event.apply_hot_sale()
    event.save()
    events.event_publish(event)
    before = event_state(event.event_id)
    for payload in stocked:
        answer = requests.post(
            f"{production_server}/api/queue/join",
            json={"eventId": event.event_id, "altcha": payload},
            timeout=10,
        )
        assert (answer.status_code, answer.json()["error"]["code"]) == (403, "PROOF_OF_WORK")
        assert "more proof of work" in answer.json()["error"]["message"]
    assert event_state(event.event_id) == before
    assert refused(event.event_id, 30) == {"proof_of_work": 30}
    payload = _served(production_server, event.event_id)
    answer = requests.post(
        f"{production_server}/api/queue/join", json={"eventId": event.event_id, "altcha": payload}, timeout=10
    )
    assert answer.status_code == 200, answer.text


def test_a_challenge_holds_while_the_event_asks_no_more_than_when_it_was_issued(lanes_api, make_event):
    event = make_event(proof_of_work=2_000)
    harder = solve(event.event_id, lanes_api)
    event.proof_of_work = 1_000
    events.event_publish(event)
    easier = solve(event.event_id, lanes_api)
    assert join(lanes_api, event.event_id, altcha=harder)[0] == 200  # the event asks less now
    event.proof_of_work = 2_000
    events.event_publish(event)
    before = event_state(event.event_id)
    status, body = join(lanes_api, event.event_id, altcha=easier)
    assert (status, body["error"]["code"]) == (403, "PROOF_OF_WORK")
    assert event_state(event.event_id) == before
    token = join(lanes_api, event.event_id, altcha=solve(event.event_id, lanes_api))[1]["data"]["token"]
    lanes_api.leave(token, event.event_id)
    before = event_state(event.event_id)
    body = {"token": token, "eventId": event.event_id, "altcha": easier}  # a rejoin to the back, too
    status, answer = lanes_api.call("post", "/api/queue/rejoin", body)
    assert (status, answer["error"]["code"]) == (403, "PROOF_OF_WORK")
    assert event_state(event.event_id) == before


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda p, e: solve("another-event"), id="another-event"),
        pytest.param(lambda p, e: p[:-8] + "AAAAAAA=", id="altered"),
        pytest.param(lambda p, e: "bm90IGEgcGF5bG9hZA==", id="not-a-payload"),
        pytest.param(lambda p, e: "%%%", id="not-base64"),
    ],
)
def test_a_wrong_solution_is_refused(lanes_api, make_event, spoil):
    event = make_event(proof_of_work=1_000)
    before = event_state(event.event_id)
    status, body = join(lanes_api, event.event_id, altcha=spoil(solve(event.event_id), event))
    assert (status, body["error"]["code"]) == (403, "PROOF_OF_WORK")
    assert event_state(event.event_id) == before


def test_an_expired_challenge_is_refused(lanes_api, make_event, monkeypatch):
    event = make_event(proof_of_work=1_000)
    monkeypatch.setattr(proof, "VALID_SECONDS", -1)
    stale = solve(event.event_id)
    monkeypatch.undo()
    status, body = join(lanes_api, event.event_id, altcha=stale)
    assert (status, body["error"]["code"]) == (403, "PROOF_OF_WORK") and "expired" in body["error"]["message"]


@pytest.mark.parametrize("path", ["/api/queue/join", "/api/queue/rejoin"])
def test_a_wrong_solution_does_not_hide_an_unknown_event(lanes_api, event, path):
    """An unknown event is EVENT_NOT_FOUND whatever altcha says (Swagger's body made
    from the schema sends "string"); on a known event that payload is still refused,
    and changes nothing."""
    unknown = f"no-such-{uuid.uuid4().hex[:8]}"
    body = {"eventId": unknown, "altcha": "string"}
    if path.endswith("rejoin"):
        body["token"] = unknown_token(unknown)
    status, answer = lanes_api.call("post", path, body)
    assert (status, answer["error"]["code"]) == (404, "EVENT_NOT_FOUND")
    body["eventId"] = event.event_id
    if path.endswith("rejoin"):
        body["token"] = unknown_token(event.event_id)  # a stranger: to the back, so a new place
    before = event_state(event.event_id)
    status, answer = lanes_api.call("post", path, body)
    assert (status, answer["error"]["code"]) == (403, "PROOF_OF_WORK")
    assert "not an ALTCHA payload" in answer["error"]["message"]
    assert event_state(event.event_id) == before


@pytest.mark.parametrize("value", [42, ["x"], "x" * (proof.MAX_PAYLOAD + 1)])
def test_an_altcha_that_is_not_a_payload_string_is_a_validation_error(lanes_api, event, value):
    status, body = join(lanes_api, event.event_id, altcha=value)
    assert (status, body["error"]["code"]) == (400, "VALIDATION_ERROR")


def test_a_rejoin_that_keeps_its_place_needs_no_proof_but_one_to_the_back_does(lanes_api, make_event):
    event = make_event(proof_of_work=1_000)
    token = join(lanes_api, event.event_id, altcha=solve(event.event_id))[1]["data"]["token"]
    status, body = lanes_api.rejoin(token, event.event_id)
    assert status == 200 and body["data"]["rejoined"] is True
    lanes_api.leave(token, event.event_id)
    status, body = lanes_api.rejoin(token, event.event_id)
    assert (status, body["error"]["code"]) == (403, "PROOF_OF_WORK")
    body = {"token": token, "eventId": event.event_id, "altcha": solve(event.event_id)}
    status, answer = lanes_api.call("post", "/api/queue/rejoin", body)
    assert status == 200 and answer["data"]["rejoined"] is False


# --- Live places per client address -------------------------------------------------


def test_one_ipv4_address_holds_at_most_the_cap(lanes_api, make_event):
    event = make_event(max_places_per_address=2)
    ip = _ipv4()
    tokens = [join(lanes_api, event.event_id, REMOTE_ADDR=ip)[1]["data"]["token"] for _ in range(2)]
    before = event_state(event.event_id)
    status, body = join(lanes_api, event.event_id, REMOTE_ADDR=ip)
    assert (status, body["error"]["code"], body["error"]["most"]) == (429, "TOO_MANY_PLACES", 2)
    assert event_state(event.event_id) == before
    # The same address written as IPv4-mapped IPv6 is the same client.
    assert join(lanes_api, event.event_id, REMOTE_ADDR=f"::ffff:{ip}")[0] == 429
    assert join(lanes_api, event.event_id, REMOTE_ADDR=_ipv4())[0] == 200  # someone else
    assert refused(event.event_id, 2) == {"cap": 2}
    # A place that stops being live (left) frees its slot.
    lanes_api.leave(tokens[0], event.event_id)
    assert join(lanes_api, event.event_id, REMOTE_ADDR=ip)[0] == 200


def test_an_ipv6_script_rotating_inside_its_64_holds_at_most_the_cap(lanes_api, make_event):
    event = make_event(max_places_per_address=3)
    net = _net64()
    answers = [join(lanes_api, event.event_id, REMOTE_ADDR=f"{net}:{i:x}::{i + 1:x}")[0] for i in range(8)]
    assert answers == [200] * 3 + [429] * 5
    assert join(lanes_api, event.event_id, REMOTE_ADDR=f"{_net64()}::1")[0] == 200  # the next /64


def test_admitted_people_still_hold_their_place_until_their_window_ends(make_event, rc):
    event = make_event(max_places_per_address=1, admit_per_second=10)
    client = services.Client(address=bytes([198, 18, 0, uuid.uuid4().int % 250]))
    services.queue_join(event_id=event.event_id, client=client)
    admission.event_admit(event.event_id)  # active now
    with pytest.raises(services.DomainError) as caught:
        services.queue_join(event_id=event.event_id, client=client)
    assert caught.value.code == "TOO_MANY_PLACES"
    end_windows(event.event_id)
    services.queue_join(event_id=event.event_id, client=client)


def test_concurrent_joins_from_one_address_never_pass_the_cap(make_event):
    event = make_event(max_places_per_address=3)
    client = services.Client(address=bytes([198, 19, 0, uuid.uuid4().int % 250]))
    outcomes = at_once(12, lambda: services.queue_join(event_id=event.event_id, client=client))
    assert outcomes.count("TOO_MANY_PLACES") == 9
    assert events.event_live_numbers(event.event_id)["waiting"] == 3


def test_the_cap_refusal_says_in_plain_words_what_to_do(lanes_api, make_event):
    """People behind one shared address (a household, a mobile carrier) are told
    what happened and what they can do, never that they hold places."""
    event = make_event(max_places_per_address=1)
    ip = _ipv4()
    assert join(lanes_api, event.event_id, REMOTE_ADDR=ip)[0] == 200
    status, body = join(lanes_api, event.event_id, REMOTE_ADDR=ip)
    assert (status, body["error"]["code"]) == (429, "TOO_MANY_PLACES")
    message = body["error"]["message"]
    assert message == CODES["TOO_MANY_PLACES"].message
    for words in ("This connection", "shared", "another connection", "mobile data", "try again later"):
        assert words in message, words
    assert "you hold" not in message.lower() and "address" not in message


def test_an_address_at_its_cap_is_refused_before_it_solves_a_challenge(lanes_api, make_event):
    """The challenge answers the join's TOO_MANY_PLACES to a client already at its
    cap, so that no proof of work is spent on a join that would be refused; it
    changes nothing, and is counted as the join's refusal would be."""
    event = make_event(max_places_per_address=2, proof_of_work=1_000)
    ip = _ipv4()
    path = f"/api/queue/challenge?eventId={event.event_id}"
    tokens = []
    for _ in range(2):
        assert lanes_api.call("get", path, REMOTE_ADDR=ip)[0] == 200  # under the cap: a challenge
        status, body = join(lanes_api, event.event_id, altcha=solve(event.event_id), REMOTE_ADDR=ip)
        assert status == 200, body
        tokens.append(body["data"]["token"])
    before = event_state(event.event_id)
    status, body = lanes_api.call("get", path, REMOTE_ADDR=ip)
    assert (status, body["error"]["code"], body["error"]["most"]) == (429, "TOO_MANY_PLACES", 2)
    assert body["error"]["message"] == CODES["TOO_MANY_PLACES"].message
    assert event_state(event.event_id) == before
    assert refused(event.event_id, 1) == {"cap": 1}
    assert lanes_api.call("get", path, REMOTE_ADDR=_ipv4())[0] == 200  # someone else
    # Advice only: the join itself still refuses, whatever the challenge said.
    status, body = join(lanes_api, event.event_id, altcha=solve(event.event_id), REMOTE_ADDR=ip)
    assert (status, body["error"]["code"]) == (429, "TOO_MANY_PLACES")
    lanes_api.leave(tokens[0], event.event_id)  # a place freed: a challenge again
    assert lanes_api.call("get", path, REMOTE_ADDR=ip)[0] == 200


def test_with_no_cap_one_address_may_hold_many_places(api, event):
    ip = _ipv4()
    assert [join(api, event.event_id, REMOTE_ADDR=ip)[0] for _ in range(6)] == [200] * 6


# --- Accounts ------------------------------------------------------------------------


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:12]}", password="pw-for-tests-1")


def test_an_account_event_refuses_a_join_without_a_session(lanes_api, make_event):
    event = make_event(require_account=True)
    before = event_state(event.event_id)
    status, body = join(lanes_api, event.event_id)
    assert (status, body["error"]["code"]) == (401, "ACCOUNT_REQUIRED")
    assert event_state(event.event_id) == before


@pytest.mark.django_db(transaction=True)  # the fast lane's threads read the session
def test_an_account_holds_one_place(lane, make_event, user):
    """Joining again, on either lane (the fast lane hands a session to Django's),
    answers the account's place; another account gets its own."""
    from testsupport.clients import Api

    event = make_event(require_account=True)
    client = lane.django if hasattr(lane, "django") else lane
    client.force_login(user)
    client.cookies["csrftoken"] = csrf = "c" * 32
    api = Api(lane)
    status, first = join(api, event.event_id, HTTP_X_CSRFTOKEN=csrf)
    assert status == 200, first
    again = [join(api, event.event_id, HTTP_X_CSRFTOKEN=csrf)[1]["data"] for _ in range(3)]
    assert {d["token"] for d in again} == {first["data"]["token"]}
    assert all(d["joinedAt"] is None for d in again)
    assert events.event_live_numbers(event.event_id)["waiting"] == 1
    other = get_user_model().objects.create_user(f"v{uuid.uuid4().hex[:12]}", password="pw-for-tests-1")
    client.force_login(other)
    client.cookies["csrftoken"] = csrf
    assert join(api, event.event_id, HTTP_X_CSRFTOKEN=csrf)[1]["data"]["token"] != first["data"]["token"]


def test_concurrent_joins_of_one_account_share_one_place(make_event):
    event = make_event(require_account=True)
    client = services.Client(account="4242")
    tokens = at_once(10, lambda: services.queue_join(event_id=event.event_id, client=client))
    assert len(set(tokens)) == 1
    assert events.event_live_numbers(event.event_id)["waiting"] == 1


def test_an_account_whose_place_is_gone_joins_at_the_back(make_event):
    event = make_event(require_account=True)
    client = services.Client(account="77")
    first = services.queue_join(event_id=event.event_id, client=client).token
    services.queue_leave(event_id=event.event_id, token=parse_token(first))
    assert services.queue_join(event_id=event.event_id, client=client).token != first


def test_a_signed_in_join_needs_the_csrf_token(make_event, user):
    from django.test import Client

    event = make_event(require_account=True)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    resp = browser.post("/api/queue/join", {"eventId": event.event_id}, content_type="application/json")
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "CSRF_FAILED"


def test_an_admitted_account_gets_its_active_place_back(make_event):
    """A place is kept as its nonce and number; the token handed back is signed
    again, and is the one the account was given."""
    event = make_event(require_account=True, admit_per_second=10)
    client = services.Client(account="99")
    first = services.queue_join(event_id=event.event_id, client=client).token
    admission.event_admit(event.event_id)
    again = services.queue_join(event_id=event.event_id, client=client)
    assert (again.token, again.status, again.joined_at) == (first, "ACTIVE", None)
