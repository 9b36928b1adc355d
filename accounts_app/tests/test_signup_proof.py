"""Sign-up asks for proof of work while an event does (accounts_app/proof.py), on
the production server: an account costs what a place costs."""

import uuid

import pytest
import requests
from django.contrib.auth import get_user_model

from accounts_app import proof
from accounts_app.tests.web import Browser, solve
from queue_app import proof as queue_proof
from queue_app.models import Event
from testsupport import CheckedThread

pytestmark = pytest.mark.django_db(transaction=True)

MISSING = "Wait a moment while the page checks that you are a person"
FAILED = "The check that you are a person did not pass."


def accounts(tag: str) -> list[str]:
    return list(get_user_model().objects.filter(username__startswith=tag).values_list("username", flat=True))


def test_sign_up_needs_a_solved_challenge_while_an_event_asks_for_one(production_server, make_event) -> None:
    event = make_event(proof_of_work=1_000)
    tag = f"pow-{uuid.uuid4().hex[:6]}"
    person = Browser(production_server, "192.0.2.10")
    page = person.get("/accounts/signup/").text
    assert 'id="proof-challenge"' in page and "disabled>" in page  # the button waits for the solution
    assert "Checking that you are a person" in page

    missing = person.sign_up(f"{tag}-a")
    assert (missing.status, MISSING in missing.text) == (200, True)
    forged = person.sign_up(f"{tag}-a", altcha="e30=")
    assert (forged.status, FAILED in forged.text) == (200, True)
    join_solution = solve(queue_proof.challenge(event.event_id, 1_000))
    assert FAILED in person.sign_up(f"{tag}-a", altcha=join_solution).text  # an event's, not sign-up's
    korean = Browser(production_server, "192.0.2.13")
    korean.session.cookies.set("django_language", "ko")
    assert "사람인지 확인하는 동안 잠시 기다린 뒤 다시 보내 주세요." in korean.sign_up(f"{tag}-a").text
    assert accounts(tag) == []

    payload = person.solved_challenge()
    assert person.sign_up(f"{tag}-a", altcha=payload).status == 302
    assert accounts(tag) == [f"{tag}-a"]

    again = Browser(production_server, "192.0.2.11").sign_up(f"{tag}-b", altcha=payload)
    assert (again.status, FAILED in again.text) == (200, True)  # a solution works once
    # nor does a sign-up's solution join a line
    joined = requests.post(
        f"{production_server}/api/queue/join", json={"eventId": event.event_id, "altcha": payload}, timeout=30
    )
    assert (joined.status_code, joined.json()["error"]["code"]) == (403, "PROOF_OF_WORK")

    Event.objects.filter(pk=event.pk).update(status=Event.Status.CLOSED)
    page = person.get("/accounts/signup/").text
    assert 'id="proof-challenge"' not in page
    assert Browser(production_server, "192.0.2.12").sign_up(f"{tag}-c").status == 302


def test_one_solution_sent_by_many_sign_ups_at_once_makes_one_account(production_server, make_event) -> None:
    make_event(proof_of_work=1_000)
    tag = f"race-{uuid.uuid4().hex[:6]}"
    payload = Browser(production_server, "192.0.2.20").solved_challenge()
    answers: dict[int, int] = {}

    def sign_up(i: int) -> None:
        answers[i] = Browser(production_server, "192.0.2.20").sign_up(f"{tag}-{i}", altcha=payload).status

    threads = [CheckedThread(target=sign_up, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(answers.values()) == [200] * 7 + [302]
    assert len(accounts(tag)) == 1


def test_sign_up_asks_the_highest_difficulty_of_the_events_not_closed(make_event) -> None:
    assert proof.difficulty() == 0
    make_event(proof_of_work=1_000)
    make_event(proof_of_work=5_000, status=Event.Status.PAUSED)
    make_event(proof_of_work=90_000, status=Event.Status.CLOSED)
    make_event()
    assert proof.difficulty() == 5_000


def test_a_sign_up_challenge_solved_before_an_event_asked_more_is_refused(production_server, make_event):
    """Challenges stocked while sign-up asked little are no good once an event turns
    on more (Hot sale): the challenge carries the difficulty it was issued at."""
    make_event(proof_of_work=1_000)
    tag = f"stock-{uuid.uuid4().hex[:6]}"
    person = Browser(production_server, "192.0.2.30")
    stocked = person.solved_challenge()
    make_event(proof_of_work=5_000)
    refused = person.sign_up(f"{tag}-a", altcha=stocked)
    assert (refused.status, FAILED in refused.text) == (200, True)
    assert person.sign_up(f"{tag}-a", altcha=person.solved_challenge()).status == 302
    assert accounts(tag) == [f"{tag}-a"]
