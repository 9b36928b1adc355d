"""Tokens this service issued, and nothing else, on both lanes (queue_app/tokens.py).

A token carries its arrival number under an HMAC the join script computes; every
other use checks it in the app before Redis is asked anything. Made-up, altered and
other events' tokens are refused with INVALID_TOKEN and change nothing; a key
rotation keeps the previous key's tokens for its grace period only.
"""

import datetime
import os
import uuid

import pytest
from django.test import override_settings

from queue_app import tokens
from queue_app.tests.test_admission import admit
from testsupport.line import end_windows, event_state


def _raw(token: str) -> bytes:
    return uuid.UUID(token).bytes


def test_a_token_is_a_uuidv8_carrying_its_arrival_number(api, event) -> None:
    issued = [api.token(event.event_id) for _ in range(3)]
    for n, token in enumerate(issued, start=1):
        parsed = uuid.UUID(token)
        assert (parsed.version, parsed.variant) == (8, uuid.RFC_4122)
        assert tokens.verify(event.event_id, parsed.bytes) == n
        # The script's signature is the one Python computes for that nonce and number.
        assert tokens.mint(event.event_id, n, parsed.bytes[:2], parsed.bytes[2:4]) == parsed.bytes
    assert len(set(issued)) == 3


def _altered(token: str) -> list[str]:
    raw = bytearray(_raw(token))
    out = []
    for index, flip in ((0, 0x01), (4, 0x80), (6, 0x01), (8, 0x01), (13, 0x01), (15, 0x01)):
        changed = bytearray(raw)
        changed[index] ^= flip
        out.append(str(uuid.UUID(bytes=bytes(changed))))
    return out


def test_made_up_altered_and_foreign_tokens_are_refused_and_change_nothing(api, event, make_event) -> None:
    real = api.token(event.event_id)
    other_event = make_event()
    foreign = api.token(other_event.event_id)
    before = event_state(event.event_id)
    refused = [str(uuid.uuid4()), foreign, *_altered(real)]
    for token in refused:
        for status, body in (
            api.rejoin(token, event.event_id),
            api.poll(token, event.event_id),
            api.leave(token, event.event_id),
            api.call("post", "/api/booking", {"token": token, "seatCount": 1, "eventId": event.event_id}),
        ):
            assert (status, body["error"]["code"]) == (403, "INVALID_TOKEN"), (token, body)
    assert event_state(event.event_id) == before
    assert api.poll(real, event.event_id)[1]["data"]["status"] == "WAITING"


def test_an_issued_token_unknown_to_redis_polls_not_found(api, event) -> None:
    stranger = str(uuid.UUID(bytes=tokens.mint(event.event_id, 10**9)))
    assert api.poll(stranger, event.event_id)[1]["data"]["status"] == "NOT_FOUND"


def test_rejoin_to_the_back_hands_out_a_new_token_and_the_old_one_stays_what_it_was(api, make_event) -> None:
    event = make_event(admit_per_second=1)
    first, second = api.token(event.event_id), api.token(event.event_id)
    admit(event.event_id)
    assert api.poll(first, event.event_id)[1]["data"]["status"] == "ACTIVE"
    end_windows(event.event_id)
    status, body = api.rejoin(first, event.event_id)
    assert status == 200 and body["data"]["rejoined"] is False
    renewed = body["data"]["token"]
    assert renewed != first and tokens.verify(event.event_id, _raw(renewed)) == 3
    assert api.poll(first, event.event_id)[1]["data"]["status"] == "EXPIRED"
    assert api.poll(renewed, event.event_id)[1]["data"]["rank"] == 2  # behind `second`

    api.leave(second, event.event_id)
    back = api.rejoin(second, event.event_id)[1]["data"]
    assert back["rejoined"] is False and back["token"] != second
    assert api.poll(second, event.event_id)[1]["data"]["status"] == "NOT_FOUND"
    # A place still held is kept, with the same token.
    kept = api.rejoin(renewed, event.event_id)[1]["data"]
    assert (kept["rejoined"], kept["token"]) == (True, renewed)


def _iso(delta: datetime.timedelta) -> float:
    return (datetime.datetime.now(datetime.UTC) + delta).timestamp()


@pytest.mark.parametrize(
    ("until", "accepted"),
    [(datetime.timedelta(hours=1), True), (datetime.timedelta(seconds=-1), False)],
    ids=["in-grace", "grace-over"],
)
def test_a_rotated_key_keeps_its_tokens_for_the_grace_period_only(api, event, until, accepted) -> None:
    with override_settings(QUEUE_TOKEN_KEY="the-old-key-0123456789"):
        old = api.token(event.event_id)
    with override_settings(
        QUEUE_TOKEN_KEY="the-new-key-9876543210",
        QUEUE_TOKEN_KEY_PREVIOUS="the-old-key-0123456789",
        QUEUE_TOKEN_KEY_PREVIOUS_UNTIL=_iso(until),
    ):
        status, body = api.poll(old, event.event_id)
        if accepted:
            assert (status, body["data"]["status"], body["data"]["rank"]) == (200, "WAITING", 1)
        else:
            assert (status, body["error"]["code"]) == (403, "INVALID_TOKEN")
        new = api.token(event.event_id)
        assert tokens.verify(event.event_id, _raw(new)) == 2
    with override_settings(QUEUE_TOKEN_KEY="the-old-key-0123456789"):
        # The new key's tokens mean nothing to the old one.
        assert api.poll(new, event.event_id)[1]["error"]["code"] == "INVALID_TOKEN"


def test_a_token_is_written_as_uuid_writes_it() -> None:
    """Token.of spells the UUID form out itself: the same text as uuid's, for any
    16 bytes, lowercase, and read back to the same bytes."""
    for raw in [bytes(16), b"\xff" * 16, *(os.urandom(16) for _ in range(2000))]:
        token = tokens.Token.of(raw)
        assert token.text == str(uuid.UUID(bytes=raw))
        assert tokens.parse_token(token.text) == token
