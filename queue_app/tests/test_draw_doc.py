"""docs/draw.md's worked example, recomputed with the service's code and with
docs/verify_draw.py: the byte layouts an outsider implements from the page are the
ones the draw uses, and the page cannot drift from the code."""

import hashlib
import importlib.util
import re
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from queue_app import draw
from queue_app.models import commitment

DOC = Path(settings.BASE_DIR) / "docs" / "draw.md"
VERIFY = Path(settings.BASE_DIR) / "docs" / "verify_draw.py"


def _verifier():
    spec = importlib.util.spec_from_file_location("verify_draw", VERIFY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _example() -> tuple[dict[str, str], list[str]]:
    """The worked example's `name = value` lines, and the published list that follows."""
    section = DOC.read_text().split("### A worked example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```text\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the worked example has its values, then its published list"
    values = {}
    for line in blocks[0].splitlines():
        if line.strip():
            name, value = (part.strip() for part in line.split("=", 1))
            assert name not in values, f"{name} given twice"
            values[name] = value
    return values, blocks[1].splitlines()


VALUES, PUBLISHED = _example()
PEOPLE = "ABC"  # in the order they joined


def raw(name: str) -> bytes:
    return bytes.fromhex(VALUES[name])


def receipts() -> list[bytes]:
    return [raw(f"receipt {person}") for person in PEOPLE]


def test_the_example_gives_every_value_as_hex_of_its_stated_length():
    lengths = {"seed": 32, "commitment": 32, "list": 24, "listDigest": 32, "finalSeed": 32}
    lengths |= {"finalSeed input": 64, "block 0 input": 40, "block 0": 32, "word 0": 8, "word 1": 8}
    lengths |= {f"receipt {p}": 8 for p in PEOPLE} | {f"receipt input {p}": 41 for p in PEOPLE}
    for name, length in lengths.items():
        assert re.fullmatch(f"[0-9a-f]{{{2 * length}}}", VALUES[name]), name


def test_the_commitment_is_the_seeds_sha256():
    seed = raw("seed")
    assert commitment(seed) == VALUES["commitment"]
    assert _verifier().check(seed, [], [], [], VALUES["commitment"]) == []


@pytest.mark.parametrize("person", PEOPLE)
def test_a_receipt_hashes_the_layout_the_page_gives(person):
    """receipt 00 eventId 00 token (its 16 UUID bytes), SHA-256, the first 8 bytes."""
    event_id, token = VALUES["eventId"], uuid.UUID(VALUES[f"token {person}"]).bytes
    stated = raw(f"receipt input {person}")
    assert stated == b"receipt\x00" + event_id.encode("ascii") + b"\x00" + token
    assert hashlib.sha256(stated).digest()[:8] == raw(f"receipt {person}")
    assert draw.receipt(event_id, token) == raw(f"receipt {person}")


def test_the_list_digest_and_final_seed():
    verify, listed = _verifier(), receipts()
    assert raw("list") == b"".join(sorted(listed))
    assert hashlib.sha256(raw("list")).digest() == raw("listDigest")
    assert draw.list_digest(listed) == verify.list_digest(listed) == raw("listDigest")
    assert raw("finalSeed input") == raw("seed") + raw("listDigest")
    assert hashlib.sha256(raw("finalSeed input")).digest() == raw("finalSeed")
    assert draw.final_seed(raw("seed"), raw("listDigest")) == raw("finalSeed")
    assert verify.final_seed(raw("seed"), raw("listDigest")) == raw("finalSeed")


def test_the_shuffle_step_by_step():
    """The block, its words (big-endian) and each swap, as the page writes them."""
    assert raw("block 0 input") == raw("finalSeed") + (0).to_bytes(8, "big")
    block = hashlib.sha256(raw("block 0 input")).digest()
    assert block == raw("block 0")
    listed = [raw("list")[at : at + 8] for at in range(0, 24, 8)]
    for k, i in enumerate([2, 1]):
        assert raw(f"word {k}") == block[8 * k : 8 * k + 8]
        j = int.from_bytes(raw(f"word {k}"), "big") % (i + 1)
        assert j == int(VALUES[f"j {k}"])
        listed[i], listed[j] = listed[j], listed[i]
        assert b"".join(listed) == raw(f"list after i {i}")
    # The service's shuffle ends where the page's does.
    ordered = draw.shuffled(raw("seed"), receipts())
    assert b"".join(receipts()[index] for index in ordered) == raw("list after i 1")


def test_the_published_list_is_the_draw_of_both_implementations():
    verify, seed = _verifier(), raw("seed")
    listed, positions = verify.read_list(PUBLISHED)
    assert listed == receipts()  # in the order they joined
    assert list(draw.positions(seed, listed)) == positions
    drawn = verify.drawn_positions(seed, listed)
    assert drawn == positions
    assert verify.check(seed, listed, positions, drawn, VALUES["commitment"]) == []
    final = raw("list after i 1")
    drawn_order = [final[at : at + 8] for at in range(0, len(final), 8)]
    assert [drawn_order.index(receipt) + 1 for receipt in listed] == positions
