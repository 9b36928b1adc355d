"""The Lua scripts of `lua/`: loaded, bound by name, and run by their SHA.

A script's header names its keys and arguments, one a line, in the order Redis
hands them over (`-- KEY meta  HASH  ...`, `-- ARG token  ...`; a name ending in `?`
may be left out, from the end; one ending in `...` takes the rest of the arguments,
as a Lua table). The loader prepends a prologue that binds each name to its slot
(`local meta = KEYS[1]`), so a script's body says `meta`, never `KEYS[1]`.

Python calls a script through a `Caller`, made when the calling module is imported:
it names what the caller passes itself, and every other key is the event's key of
that name (ticketing/store/keys.py: EventKeys). The caller's names are checked
against the header there and then: a name missing on either side fails the import,
which is the process's start (and `manage.py check`), never a request. A call then
builds its lists from the order worked out once: no header is read per call.
"""

import asyncio
import atexit
import hashlib
import keyword
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from functools import cache
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple

import redis
import redis.cluster
from django.conf import settings
from redis.exceptions import NoScriptError

from ticketing.store.clients import EverySecond, batcher, client, on_close
from ticketing.store.keys import EVENT_KEY_NAMES, EventKeys, event_keys

log = logging.getLogger(__name__)

LUA_DIR = Path(settings.BASE_DIR) / "lua"

# What `run(..., on=...)` queues a script on rather than runs it.
_PIPELINES = (redis.client.Pipeline, redis.cluster.ClusterPipeline)

_DECLARATION = re.compile(rb"^-- (KEY|ARG|REPLY)\s+([A-Za-z_][A-Za-z0-9_]*)(\?|\.\.\.)?(?:\s|$)")
_LIBRARY_FUNCTION = re.compile(rb"^local function ([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_SLOTS = re.compile(rb"\b(KEYS|ARGV)\b")
# Where a script's own code names a local of its own: `local a, b`, a function's
# parameters, a loop's variables.
_LOCALS = re.compile(
    rb"\blocal\s+function\s+\w+\s*\(([^)]*)\)|\bfunction\s*\w*\s*\(([^)]*)\)"
    rb"|\blocal\s+(?!function\b)([A-Za-z_][\w \t,]*)|\bfor\s+([\w \t,]+?)\s+(?:=|in)\b"
)
_LUA_WORDS = frozenset(
    "and break do else elseif end false for function if in local nil not or repeat return then true until "
    "while KEYS ARGV redis bit cjson struct cmsgpack".split()
)


class ScriptError(Exception):
    """A script's header, or a caller's use of it, that does not add up: raised
    while loading, so that it stops the process from starting."""


class Script:
    """A Lua script of `lua/`, with its header's names, run by its SHA: one round
    trip in the normal case."""

    __slots__ = ("name", "keys", "args", "optional", "rest", "reply", "source", "sha")

    def __init__(self, name: str, directory: Path | None = None) -> None:
        directory = LUA_DIR if directory is None else directory
        self.name = name
        own = (directory / f"{name}.lua").read_bytes()
        keys: list[str] = []
        args: list[str] = []
        reply: list[str] = []
        optional: set[str] = set()
        rest = None
        for line in own.splitlines():
            found = _DECLARATION.match(line)
            if not found:
                continue
            kind, word, mark = found.group(1).decode(), found.group(2).decode(), found.group(3)
            if kind == "REPLY":
                reply.append(word)
                continue
            if rest is not None:
                raise ScriptError(f"lua/{name}.lua: {word} comes after {rest}..., which takes the rest")
            names = keys if kind == "KEY" else args
            if optional & set(names) and mark != b"?":
                raise ScriptError(
                    f"lua/{name}.lua: {word} follows an optional name; only the last may be left out"
                )
            if mark == b"?":
                optional.add(word)
            elif mark == b"...":
                if kind == "KEY":
                    raise ScriptError(f"lua/{name}.lua: {word}...: only arguments may take the rest")
                rest = word
                continue
            names.append(word)
        libraries = [
            line.split(b":", 1)[1].strip().decode()
            for line in own.splitlines()
            if line.startswith(b"-- needs:")
        ]
        parts = [(directory / "lib" / f"{lib}.lua").read_bytes() for lib in libraries]
        taken = {word.decode() for part in parts for word in _LIBRARY_FUNCTION.findall(part)}
        self.keys, self.args, self.rest = tuple(keys), tuple(args), rest
        self.optional, self.reply = frozenset(optional), tuple(reply)
        everything = self.names()
        for word in everything:
            if keyword.iskeyword(word) or word in _LUA_WORDS or word in taken:
                raise ScriptError(f"lua/{name}.lua: {word} is a word Lua or lua/lib/ already uses")
        if len(set(everything)) != len(everything):
            raise ScriptError(f"lua/{name}.lua: a name is declared twice")
        code = b"\n".join(line.split(b"--", 1)[0] for line in own.splitlines())
        if _SLOTS.search(code):
            raise ScriptError(f"lua/{name}.lua says KEYS or ARGV: its body uses the names of its header")
        own_locals = {
            word.strip().decode()
            for found in _LOCALS.finditer(code)
            for group in found.groups()
            if group
            for word in group.split(b",")
        }
        hidden = sorted(own_locals & set(everything))
        if hidden:
            raise ScriptError(f"lua/{name}.lua: a local hides {', '.join(hidden)} of its header")
        self.source = b"\n".join([self._prologue(), *parts, own])
        self.sha = hashlib.sha1(self.source).hexdigest()

    def names(self) -> list[str]:
        """Every name of the header but the reply's: keys, then arguments."""
        return [*self.keys, *self.args, *([self.rest] if self.rest else [])]

    def _prologue(self) -> bytes:
        """The header's names bound to their slots, one line each for the keys and
        the arguments (so that a Lua error's line number moves by little)."""
        lines = []
        for names, slots in ((self.keys, "KEYS"), (self.args, "ARGV")):
            if names:
                slot = ", ".join(f"{slots}[{i}]" for i in range(1, len(names) + 1))
                lines.append(f"local {', '.join(names)} = {slot}")
        if self.rest:
            lines.append(f"local {self.rest} = {{unpack(ARGV, {len(self.args) + 1})}}")
        return "\n".join(lines).encode()

    def __call__(self, keys: list[Any], args: list[Any], on: Any) -> Any:
        try:
            return on.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            # A restarted or flushed server: load the source once, then by SHA again.
            on.script_load(self.source)
            return on.evalsha(self.sha, len(keys), *keys, *args)


@cache
def script(name: str) -> Script:
    return Script(name)


class Call(NamedTuple):
    """One run of a script, bound: its keys and arguments in the header's order."""

    script: Script
    keys: list[Any]
    args: list[Any]
    reply: Callable[..., Any] | None = None


class Caller:
    """A caller's use of a script, checked against its header when made.

    `passes`: the names the caller gives each call (every argument, and the keys
    that are not the event's own, such as a token's booking mark); the script's
    other keys are the `EventKeys` attributes of the same names, read from the
    event's keys given to each call. `leaves`: optional keys at the end of the
    header this caller never hands over (the script does without them). `reply`: a
    type built from the script's reply (a NamedTuple whose fields are the header's
    REPLY names, in order).
    """

    __slots__ = ("script", "passes", "reply", "_keys", "_args", "_count", "_own", "_given", "_rest")

    def __init__(
        self,
        name: str,
        *,
        passes: Iterable[str] = (),
        leaves: Iterable[str] = (),
        reply: Any = None,
        directory: Path | None = None,
    ) -> None:
        found = script(name) if directory is None else Script(name, directory)
        passes = tuple(passes.split() if isinstance(passes, str) else passes)
        leaves = tuple(leaves.split() if isinstance(leaves, str) else leaves)
        if leaves and (set(leaves) - found.optional or found.keys[-len(leaves) :] != leaves):
            raise ScriptError(f"lua/{name}.lua: only its last optional keys may be left: {leaves}")
        unknown = [word for word in passes if word not in found.names()]
        if unknown or len(set(passes)) != len(passes):
            raise ScriptError(f"lua/{name}.lua does not take {', '.join(unknown) or 'a name twice'}")
        # Every argument is passed; a key that is not, is the event's key of its name.
        missing = [
            word
            for word in found.names()
            if word not in passes and (word not in found.keys or word not in EVENT_KEY_NAMES)
        ]
        if missing:
            raise ScriptError(f"a caller of lua/{name}.lua does not pass {', '.join(missing)}")
        if reply is not None and tuple(getattr(reply, "_fields", ())) != found.reply:
            raise ScriptError(f"lua/{name}.lua replies {found.reply}, not the fields of {reply.__name__}")
        self.script, self.passes, self.reply = found, frozenset(passes), reply
        self._keys = tuple((word, word in self.passes) for word in found.keys if word not in leaves)
        self._args = found.args
        self._count = len(passes)
        # Worked out once, so that a call costs a microsecond or so: the event's own
        # keys read in one go, then the caller's keys put in at their slots (in slot
        # order, so that each lands where the header says).
        own = [word for word, given in self._keys if not given]
        self._own = attrgetter(*own) if len(own) > 1 else (lambda k: (getattr(k, own[0]),)) if own else None
        self._given = tuple((i, word) for i, (word, given) in enumerate(self._keys) if given)
        self._rest = found.rest

    def call(self, k: EventKeys | None = None, /, **named: Any) -> Call:
        """The call with these values: `k`, the event's keys (for the keys not
        passed by name); each name the caller passes, by name."""
        if len(named) != self._count:
            return self._partial(k, named)
        try:
            keys = [] if self._own is None else list(self._own(k))
            for i, word in self._given:
                keys.insert(i, named[word])
            args = [named[word] for word in self._args]
            if self._rest:
                args.extend(named[self._rest])
        except KeyError:
            return self._partial(k, named)  # which says what is wrong
        return Call(self.script, keys, args, self.reply)

    def _partial(self, k: EventKeys | None, named: dict[str, Any]) -> Call:
        """A call leaving optional names out (or a wrong one: said here)."""
        wrong = [word for word in named if word not in self.passes]
        missing = [word for word in self.passes if word not in named and word not in self.script.optional]
        if wrong or missing:
            raise ScriptError(f"lua/{self.script.name}.lua: passed {wrong}, missing {missing}")
        keys = [
            named[word] if given else getattr(k, word)
            for word, given in self._keys
            if word in named or not given
        ]
        args = [named[word] for word in self._args if word in named]
        if self.script.rest:
            args.extend(named.get(self.script.rest, ()))
        return Call(self.script, keys, args, self.reply)


def load(name: str) -> None:
    """Make sure the server has the script, before queueing it in a pipeline
    (NOSCRIPT cannot be caught per command there). SCRIPT LOAD is idempotent."""
    client().script_load(script(name).source)


def run(call: Call, *, on: Any = None) -> Any:
    """Run a call on the default client, or on `on`: another client, or a pipeline
    (after `load(name)`), where it is queued rather than run (its reply raw)."""
    found, keys, args, reply = call
    if isinstance(on, _PIPELINES):
        # As a command: a cluster's pipeline refuses its `evalsha` method, not EVALSHA.
        return on.execute_command("EVALSHA", found.sha, len(keys), *keys, *args)
    answer = found(keys, args, client() if on is None else on)
    return answer if reply is None else reply(*answer)


async def arun(call: Call) -> Any:
    """`run` on the asyncio client (batched, see Batcher); NOSCRIPT answered by a reload."""
    found, keys, args, reply = call
    on = batcher()
    try:
        answer = await on.execute("EVALSHA", found.sha, len(keys), *keys, *args)
    except NoScriptError:
        # Batched too: after a restart every request in flight is told NOSCRIPT at once.
        await on.script_load(found.source, keys[0] if keys else None)
        answer = await on.execute("EVALSHA", found.sha, len(keys), *keys, *args)
    return answer if reply is None else reply(*answer)


REFUSED = Caller("refused", passes="reason count")

# Distinct (event, reason) pairs kept between two writes: a refused request may name
# any event id, and those past this many in one second are not counted.
_REFUSALS_MOST = 10_000


class _Refusals(EverySecond):
    """Refused joins counted in the process, (event id, reason) -> n, and added to
    Redis once a second (one pipeline), so that a flood of refused requests costs
    Redis a command per event and reason, not one per request. The operator's figures
    lag by a second at most; this process's own are written before it reads them
    (`flush_refusals`)."""

    def add(self, event_id: str, reason: str) -> None:
        with self.lock:
            if (event_id, reason) in self.counts or len(self.counts) < _REFUSALS_MOST:
                self.counts[(event_id, reason)] += 1
            self.wake()

    def write(self, counts: Counter) -> None:
        load(REFUSED.script.name)
        pipe = client().pipeline(transaction=False)
        for (event_id, reason), n in counts.items():
            run(REFUSED.call(event_keys(event_id), reason=reason, count=n), on=pipe)
        # An event whose keys are broken loses its count, not the others theirs.
        pipe.execute(raise_on_error=False)


_refusals = _Refusals("refused joins")
atexit.register(_refusals.flush)


def count_refusal(event_id: str, reason: str) -> None:
    """Count a refused join of an event (only an existing event's count is kept),
    in the process: written to Redis within a second (`_Refusals`)."""
    _refusals.add(event_id, reason)


async def _flush_on_close() -> None:
    await asyncio.to_thread(_refusals.flush)


on_close(_flush_on_close)


def flush_refusals() -> None:
    """Write this process's refusals counted so far, before reading the counts."""
    _refusals.flush()
