"""Proof of work at join, with ALTCHA's challenges (https://altcha.org, protocol v2).

A join costs a script nothing; a proof of work makes each place cost the client a
second or two of CPU, which a person waiting for a sale does not notice and a script
asking for thousands of places does. An event turns it on with a difficulty
(`Event.proof_of_work`): the average number of SHA-256 derivations a client tries.

The challenge is deterministic: the server picks the counter (around the difficulty)
and signs both the challenge and the key it derives, so verifying is two HMACs and
never a derivation. Everything the check needs travels with the payload (signed
expiry, the event it was issued for, the difficulty that event asked then):
verification keeps no state except that each solution works once, which the join
script records (lua/join.lua) until the challenge expires. The join script also
refuses a solution whose challenge was easier than the event asks now: otherwise
challenges fetched by the thousand before the operator turned proof of work on (the
easiest, solved in 0.1 ms) would buy places for five minutes after.
"""

import secrets
import time
from dataclasses import dataclass
from functools import cache

import altcha
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.crypto import salted_hmac

from ticketing.errors import DomainError, validation_error

ALGORITHM = "SHA-256"
VALID_SECONDS = 300
# A payload is a base64 JSON of about 500 characters.
MAX_PAYLOAD = 2_000


@cache
def _secrets() -> tuple[bytes, bytes]:
    """The challenge's key and the derived key's key, both from SECRET_KEY."""
    return tuple(
        salted_hmac("queue_app.proof", purpose, secret=settings.SECRET_KEY, algorithm="sha256").digest()
        for purpose in ("challenge", "derived key")
    )


@receiver(setting_changed)
def _forget_secrets(*, setting: str, **kwargs: object) -> None:
    if setting == "SECRET_KEY":
        _secrets.cache_clear()


def challenge(event_id: str, difficulty: int) -> dict:
    """A new challenge for one event at the difficulty it asks now (0: none, when
    the challenge is the easiest), as the widget and `altcha.solve_challenge` read
    it. The counter is drawn from [difficulty/2, 3*difficulty/2]: a mean of
    `difficulty` tries, and never more than half again."""
    tries = max(difficulty, 1)
    key, derived_key = _secrets()
    made = altcha.create_challenge(
        ALGORITHM,
        1,
        counter=tries // 2 + secrets.randbelow(tries + 1),
        expires_at=int(time.time()) + VALID_SECONDS,
        data={"event": event_id, "difficulty": difficulty},
        hmac_secret=key,
        hmac_key_secret=derived_key,
    )
    return made.to_dict()


@dataclass(frozen=True, slots=True)
class Proof:
    """A verified solution: what marks it used, until when it could be used, and
    the difficulty its event asked when the challenge was issued."""

    mark: bytes  # 8 bytes of the challenge's random nonce
    expires_at: int  # unix seconds
    difficulty: int

    @property
    def member(self) -> int:
        """The mark within its set (bytes 0-1 pick the set, EventKeys.proofs): 31
        bits, an integer Redis keeps in 4 bytes; 47 bits in all tell apart the
        solutions of one minute's challenges."""
        return int.from_bytes(self.mark[2:6], "big") >> 1


def parse_payload(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_PAYLOAD:
        raise validation_error(
            f"altcha must be a solved challenge's payload, at most {MAX_PAYLOAD} characters."
        )
    return value


def verify(event_id: str, payload: str) -> Proof:
    """The solution's single-use mark; PROOF_OF_WORK when it is not a solution of a
    challenge this service issued for this event, or the challenge expired."""
    try:
        parsed = altcha.Payload.from_base64(payload)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise _refused("The proof of work is not an ALTCHA payload.") from None
    key, derived_key = _secrets()
    result = altcha.verify_solution(parsed, key, hmac_key_secret=derived_key)
    params = parsed.challenge.parameters
    if result.expired:
        raise _refused("The challenge expired; solve a new one.")
    data = params.data if isinstance(params.data, dict) else {}
    if not result.verified or data.get("event") != event_id or not isinstance(params.expires_at, int):
        raise _refused("The proof of work does not solve a challenge issued for this event.")
    # (Signed, so ours: a challenge issued before they carried it is taken as the easiest.)
    return Proof(bytes.fromhex(params.nonce)[:8], params.expires_at, int(data.get("difficulty", 0)))


def _refused(message: str) -> DomainError:
    return DomainError("PROOF_OF_WORK", message)
