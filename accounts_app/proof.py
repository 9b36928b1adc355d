"""Proof of work at sign-up: an account costs what a place costs.

While any event that is not closed asks for proof of work at join, sign-up asks for
it too, at the highest difficulty any of them asks. A sign-up is not tied to one
event (a script would leave out `next`, or name the easiest event), so the highest
difficulty on offer is the rule a script cannot step around; with no such event,
sign-up asks nothing. An account made earlier still solves each event's challenge
when it joins.

The challenges are the join's (queue_app/proof.py), issued for a purpose no event id
can spell (it has a colon), so a sign-up's solution cannot join a line and a join's
cannot sign up. Each solution works once: its mark is kept in Redis until its
challenge expires.
"""

from django.db.models import Max

from queue_app import proof as queue_proof
from queue_app.models import Event
from ticketing import store
from ticketing.errors import DomainError

SIGN_UP = "accounts:sign-up"


def difficulty() -> int:
    """The difficulty sign-up asks now: the highest of the events not closed; 0: none."""
    found = Event.objects.exclude(status=Event.Status.CLOSED).aggregate(most=Max("proof_of_work"))
    return found["most"] or 0


def challenge(level: int) -> dict:
    return queue_proof.challenge(SIGN_UP, level)


def verify(payload: str) -> queue_proof.Proof:
    """The solution's mark; a DomainError when it is too long to be one, does not
    solve a sign-up challenge of this service, its challenge expired, or it was
    issued easier than sign-up asks now (an event turned on more proof of work)."""
    solved = queue_proof.verify(SIGN_UP, queue_proof.parse_payload(payload) or "")
    if solved.difficulty < difficulty():
        raise DomainError("PROOF_OF_WORK", "Sign-up now asks more proof of work; solve a new challenge.")
    return solved


def spend(solved: queue_proof.Proof) -> bool:
    """Mark the solution used: False when it was used before. One SET NX, so of
    two sign-ups sending one solution at once, one gets it."""
    key = store.proof_spent_key(SIGN_UP, solved.mark)
    return bool(store.client().set(key, b"1", nx=True, exat=solved.expires_at + 1))
