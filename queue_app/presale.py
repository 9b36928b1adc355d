"""Presales (docs/presale.md): before an event's public start (Event.public_from),
only holders take a new place: a presale code with a use left, or a signed-in
account on the event's allow-list (by account, or by its confirmed email's domain).

Codes are made in batches (the admin's codes page, `manage.py presale_codes`) and
shown once, as CSV: Postgres keeps each code's keyed hash and its uses, never the
code. Redis counts the uses left (`EventKeys.codes`: the hash's first 16 bytes ->
uses left), and the join script (lua/join.lua) spends one in the same step as it
takes the place, so a code of K uses gives K places however many try it at once,
and a refused join spends nothing. Redis is the counter: the rows are not written
per use. A line rebuilt from nothing (a Redis that lost its data, `init_event
--reset`) gets its codes back with all their uses, as everyone gets to join again:
the places the codes gave are gone with the line.

The allow-list is read from Postgres only for a signed-in account's join during
the presale, which the join script asks for (services: PRESALE_PASS); each process
keeps an event's list for ALLOW_LIST_CACHE_SEC.
"""

import csv
import functools
import io
import secrets
import time
from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import connection, transaction
from django.utils.crypto import salted_hmac
from django.utils.module_loading import import_string

from queue_app.models import Event, PresaleAllow, PresaleCode
from ticketing import store
from ticketing.errors import validation_error

# No I, O, 0 or 1: no character of a code reads as another. 32 characters, 5 bits each.
ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
# 50 bits: guessing one of a million codes takes about a billion tries, which the
# join's rate limit (and its proof of work, when asked) keeps out of reach.
CODE_LENGTH = 10
# A code as typed may carry the spaces and hyphens it is printed with, and no more.
CODE_INPUT_MAX = 32
# Redis keeps this much of a code's hash: 128 bits, no two codes of an event alike.
KEY_BYTES = 16
# Most codes one batch makes: a fan club's, in one CSV.
MAX_BATCH = 100_000
# How long a process keeps an event's allow-list: an entry added or removed in the
# admin applies to joins within this many seconds.
ALLOW_LIST_CACHE_SEC = 5.0

_LETTERS = frozenset(ALPHABET)
_SALT = "queue_app.presale"


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def shown(code: str) -> str:
    """A code as people read it: ABCDE-FGH23."""
    half = CODE_LENGTH // 2
    return f"{code[:half]}-{code[half:]}"


def parse_code(value: object) -> str | None:
    """The join's `presaleCode`: a code as printed, any case, spaces and hyphens
    ignored; None when not sent (or sent empty). Anything else is VALIDATION_ERROR."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > CODE_INPUT_MAX:
        raise validation_error(f"presaleCode: a presale code is {CODE_LENGTH} letters and digits.")
    code = value.replace("-", "").replace(" ", "").upper()
    if len(code) != CODE_LENGTH or not _LETTERS.issuperset(code):
        raise validation_error(
            f"presaleCode: a presale code is {CODE_LENGTH} letters and digits, as printed (e.g. ABCDE-FGH23)."
        )
    return code


def code_hash(event_id: str, code: str) -> str:
    """HMAC-SHA256 of the event and the code, keyed by SECRET_KEY, in hex: the same
    code of two events are two hashes. (A new SECRET_KEY makes every code unknown.)"""
    return salted_hmac(_SALT, f"{event_id}\0{code}", algorithm="sha256").hexdigest()


def code_key(event_id: str, code: str) -> bytes:
    """The code's field in the event's `codes` hash (Redis)."""
    return bytes.fromhex(code_hash(event_id, code))[:KEY_BYTES]


def until_ms(event: Event) -> int | str:
    """The presale's end as the event's record in Redis has it (presaleUntil): ms,
    or '' for none."""
    return "" if event.public_from is None else int(event.public_from.timestamp() * 1000)


def _locked(event_id: str) -> None:
    """Held to the transaction's end: the writers of an event's codes (a batch, a
    revocation, a publish) take turns, so that none puts in Redis what it read from
    Postgres before another changed it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"presale:{event_id}"])


def codes_publish(event: Event) -> None:
    """Put the event's codes in Redis: a code Redis lacks gets its uses, a code Redis
    has keeps the uses it has left (a publish never gives a used code back its
    uses), a code no longer in Postgres (revoked) goes."""
    k = store.event_keys(event.event_id)
    with transaction.atomic():
        _locked(event.event_id)
        rows = PresaleCode.objects.filter(event=event).values_list("code_hash", "uses")
        wanted = {bytes.fromhex(digest)[:KEY_BYTES]: uses for digest, uses in rows}
        there = set(store.client().hkeys(k.codes))
        new = [key for key in wanted if key not in there]
        gone = [key for key in there if key not in wanted]
        if not new and not gone:
            return
        pipe = store.event_pipeline(event.event_id)
        for key in new:
            pipe.hsetnx(k.codes, key, wanted[key])  # (a join meanwhile cannot spend a code Redis lacks)
        for at in range(0, len(gone), 1000):
            pipe.hdel(k.codes, *gone[at : at + 1000])
        pipe.execute()


def codes_create(event: Event, *, count: int, uses: int = 1, note: str = "") -> list[str]:
    """Make `count` codes of `uses` places each, in Postgres and in Redis (both or
    neither); the codes themselves, which nothing keeps: show them once."""
    if not 1 <= count <= MAX_BATCH:
        raise ValueError(f"count: 1 to {MAX_BATCH:,} codes at a time")
    if uses < 1:
        raise ValueError("uses: at least 1")
    codes: set[str] = set()
    while len(codes) < count:
        codes.add(new_code())
    made = sorted(codes)
    with transaction.atomic():
        _locked(event.event_id)
        # A code equal to one the event has already (1 in 10^15 a pair) fails the
        # batch on the unique index: nothing is made, and a new batch will do.
        PresaleCode.objects.bulk_create(
            PresaleCode(event=event, code_hash=code_hash(event.event_id, code), uses=uses, note=note)
            for code in made
        )
        codes_publish(event)
    return made


def codes_revoke(event: Event, codes: Iterable[PresaleCode]) -> int:
    """Delete codes, in Postgres and in Redis (both or neither): places they gave
    are kept, no new one is. Returns how many."""
    with transaction.atomic():
        _locked(event.event_id)
        deleted, _ = PresaleCode.objects.filter(event=event, pk__in=[code.pk for code in codes]).delete()
        codes_publish(event)
    return deleted


def codes_csv(event: Event, codes: list[str], uses: int, note: str = "") -> str:
    """The batch as people get it: one row a code, as printed."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["event", "code", "uses", "note"])
    for code in codes:
        writer.writerow([event.event_id, shown(code), uses, note])
    return out.getvalue()


def uses_left(event_id: str, digests: list[str]) -> dict[str, int | None]:
    """Each code's uses left, as Redis counts them (None: not in Redis)."""
    if not digests:
        return {}
    keys = [bytes.fromhex(digest)[:KEY_BYTES] for digest in digests]
    found = store.client().hmget(store.event_keys(event_id).codes, keys)
    return {digest: None if n is None else int(n) for digest, n in zip(digests, found, strict=True)}


@functools.cache
def _confirmed_email() -> Callable[[int], str | None]:
    return import_string(settings.ACCOUNT_CONFIRMED_EMAIL)


# event id -> (read until, monotonic; the accounts listed; the domains listed)
_lists: dict[str, tuple[float, frozenset[int], tuple[str, ...]]] = {}


def _allow_list(event_id: str) -> tuple[frozenset[int], tuple[str, ...]]:
    now = time.monotonic()
    found = _lists.get(event_id)
    if found is None or found[0] <= now:
        rows = PresaleAllow.objects.filter(event__event_id=event_id).values_list("account_id", "email_domain")
        accounts = frozenset(account for account, _ in rows if account is not None)
        domains = tuple(domain for _, domain in rows if domain)
        found = _lists[event_id] = (now + ALLOW_LIST_CACHE_SEC, accounts, domains)
    return found[1], found[2]


def forget() -> None:
    """Drop the process's copies of the allow-lists (tests that change one)."""
    _lists.clear()


def account_listed(event_id: str, account: str) -> bool:
    """Whether the signed-in account is on the event's allow-list: by itself, or by
    the domain of its confirmed email address (the accounts app says which that is,
    settings.ACCOUNT_CONFIRMED_EMAIL: an address typed at sign-up proves nothing)."""
    accounts, domains = _allow_list(event_id)
    if int(account) in accounts:
        return True
    if not domains:
        return False
    email = _confirmed_email()(int(account))
    if not email or "@" not in email:
        return False
    domain = email.rsplit("@", 1)[1].lower()
    return any(domain == listed or domain.endswith("." + listed) for listed in domains)
