"""Scripts are bound by name: each Lua script's header names its keys and
arguments, and a caller whose names disagree with it stops the process at start-up."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest
from django.conf import settings

from queue_app import line
from ticketing import store
from ticketing.store.scripts import LUA_DIR, Caller, Script, ScriptError

PROBE = """\
-- A script of the tests.
--
-- KEY meta     HASH    the event's record
-- KEY booked   STRING  a token's booking mark
-- KEY site?    STRING  left out by some calls
-- ARG token    16 raw bytes
-- ARG extra... the rest
return {meta, booked, site or false, token, #extra, extra[1] or false}
"""


def _lua(tmp_path: Path, name: str, source: str) -> Path:
    (tmp_path / f"{name}.lua").write_text(textwrap.dedent(source))
    return tmp_path


def test_no_script_names_a_slot_by_its_number():
    """The body of every script says `meta`, never `KEYS[1]`: the loader's
    prologue binds the names, and it is not in lua/."""
    found = [
        f"{path.relative_to(LUA_DIR)}:{n}"
        for path in sorted(LUA_DIR.rglob("*.lua"))
        for n, text in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"(KEYS|ARGV)\[[0-9]+\]", text)
    ]
    assert found == []


@pytest.mark.parametrize("name", sorted(p.stem for p in LUA_DIR.glob("*.lua")))
def test_every_script_declares_what_it_is_handed(name):
    script = Script(name)
    assert script.keys, name
    prologue = script.source.split(b"\n", 1)[0].decode()
    assert prologue == f"local {', '.join(script.keys)} = " + ", ".join(
        f"KEYS[{i}]" for i in range(1, len(script.keys) + 1)
    )


def test_a_call_binds_each_name_to_its_slot(tmp_path, make_event):
    event = make_event()
    k = store.event_keys(event.event_id)
    probe = Caller("probe", passes="booked site token extra", directory=_lua(tmp_path, "probe", PROBE))
    reply = store.run(probe.call(k, booked=k.booked("t"), site=k.seats, token=b"tok", extra=["a", "b"]))
    assert reply == [k.meta.encode(), k.booked("t").encode(), k.seats.encode(), b"tok", 2, b"a"]
    # An optional key left out is nil in the script; the rest may be empty.
    reply = store.run(probe.call(k, booked=k.booked("t"), token=b"tok", extra=[]))
    assert reply == [k.meta.encode(), k.booked("t").encode(), None, b"tok", 0, None]


@pytest.mark.parametrize(
    ("passes", "why"),
    [
        ("booked site", "does not pass token, extra"),  # an argument missing
        ("booked site token extra colour", "does not take colour"),  # a name the header lacks
        ("site token extra", "does not pass booked"),  # a key that is not the event's own
    ],
)
def test_a_caller_that_disagrees_with_the_header_fails_when_made(tmp_path, passes, why):
    directory = _lua(tmp_path, "probe", PROBE)
    with pytest.raises(ScriptError, match=why):
        Caller("probe", passes=passes, directory=directory)


def test_a_call_with_a_wrong_name_is_refused_before_redis(tmp_path):
    probe = Caller("probe", passes="booked site token extra", directory=_lua(tmp_path, "probe", PROBE))
    with pytest.raises(ScriptError, match="colour"):
        probe.call(store.event_keys("e"), booked="b", colour="red", token=b"t", extra=[])


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("return redis.call('GET', KEYS[1])", "says KEYS or ARGV"),
        ("local meta = redis.call('HGETALL', meta)\nreturn meta", "a local hides meta"),
        ("for _, token in ipairs({}) do end\nreturn 1", "a local hides token"),
    ],
)
def test_a_body_that_does_not_use_the_header_names_fails_to_load(tmp_path, body, why):
    _lua(tmp_path, "bad", "-- KEY meta  HASH  the record\n-- ARG token  the token\n" + body + "\n")
    with pytest.raises(ScriptError, match=why):
        Script("bad", tmp_path)


def test_a_reply_type_must_name_the_header_fields_in_order():
    class Swapped(NamedTuple):
        waiting: int
        state: bytes

    with pytest.raises(ScriptError, match="replies"):
        Caller("poll", passes="booked token own", reply=Swapped)
    assert Caller("poll", passes="booked token own", reply=line.PollReply).reply is line.PollReply


def test_a_header_that_changes_under_its_caller_stops_the_process_at_start_up(tmp_path):
    """The poll script gains an argument the crowd's services do not pass: the
    process fails while Django starts (as `manage.py check` and every server do),
    before any request."""
    lua = tmp_path / "lua"
    shutil.copytree(LUA_DIR, lua)
    poll = lua / "poll.lua"
    poll.write_text(poll.read_text().replace("-- ARG token", "-- ARG colour  a new one\n-- ARG token", 1))
    code = (
        "import django\n"
        "from pathlib import Path\n"
        "from ticketing.store import scripts\n"
        f"scripts.LUA_DIR = Path({str(lua)!r})\n"
        "django.setup()\n"
        "print('started')\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ticketing.settings"}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=99)
    assert done.returncode != 0, done.stdout
    assert "ScriptError: a caller of lua/poll.lua does not pass colour" in done.stderr
    assert "started" not in done.stdout
