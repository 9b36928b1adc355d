"""Notify me: a person leaves an email address in the waiting room and is mailed
once, in their language, when their turn is near (their estimated wait is
NOTIFY_AHEAD_SECONDS or less) or has come, with a signed link back to their place.

The line stays counters in Redis: the requests are rows in Postgres
(queue_app.models.NotifyRequest), one per place. A beat task (`notify_due`, every
few seconds) reads each event's pending rows in arrival order and asks where each
stands as a poll does (services.queue_poll: the process's copy of the line, no Redis
read for a person still waiting), until it reaches one further back than the notice;
a later arrival is never nearer the front. A row is claimed by a compare-and-set
before its mail goes out, so two runs at once (two beats, a slow run overlapping the
next) mail it once. A run sends at most NOTIFY_MAIL_PER_SECOND mails a second, counted
in Redis across every worker. A place that left, expired or booked first is dropped,
not mailed. At most once: a worker killed between the claim and the mail server's
answer leaves its row SENDING, never mailed again.

The link carries the event and the token signed with SECRET_KEY
(django.core.signing): whoever holds the mail holds the place, as whoever holds the
token does through the API. The waiting room, opened with it, keeps the token as
it keeps its own (static/js/waiting-room.js) and goes on from there.
"""

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.base import BaseEmailBackend
from django.core.validators import validate_email
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation

from queue_app import services, tokens
from queue_app.models import NOTIFY_EMAIL_MAX, Event, NotifyRequest
from ticketing import ratelimit, store
from ticketing.errors import DomainError, validation_error

log = logging.getLogger(__name__)

Status = NotifyRequest.Status

# --- The link back to the place -----------------------------------------------------

LINK_SALT = "queue_app.notify"
# As long as a browser keeps its own token (its cookie's max-age): a mail older than
# that brings back a place the line has long moved past.
LINK_MAX_AGE = 86_400
# The waiting room's query parameter that carries it.
LINK_PARAMETER = "place"


def link_token(event_id: str, token: str) -> str:
    return signing.dumps([event_id, token], salt=LINK_SALT)


def place_of_link(event_id: str, value: str) -> str | None:
    """The token a link of this event carries; None for a link this service did not
    sign, one of another event, or one older than LINK_MAX_AGE."""
    try:
        signed_event, token = signing.loads(value, salt=LINK_SALT, max_age=LINK_MAX_AGE)
        parsed = tokens.parse_token(token)
    except (signing.BadSignature, DomainError, ValueError, TypeError):
        return None
    if signed_event != event_id or tokens.verify(event_id, parsed.raw) is None:
        return None
    return parsed.text


def place_link(site: str, event_id: str, token: str) -> str:
    query = urlencode({LINK_PARAMETER: link_token(event_id, token)})
    return f"{site}{reverse('waiting-room', args=[event_id])}?{query}"


# --- Asking -------------------------------------------------------------------------


def parse_email(value: object) -> str:
    if value is None or value == "":
        raise validation_error("email is required.")
    if not isinstance(value, str) or len(value) > NOTIFY_EMAIL_MAX:
        raise validation_error(f"email must be text of at most {NOTIFY_EMAIL_MAX} characters.")
    email = value.strip()
    try:
        validate_email(email)
    except ValidationError:
        raise validation_error("email is not an email address.") from None
    return email


@dataclass(frozen=True, slots=True)
class Notify:
    event_id: str
    email: str
    language: str
    status: str  # PENDING until mailed; SENDING, SENT once it goes out
    ahead_seconds: int  # mailed when the estimated wait is this or less
    created: bool  # False: asked before (the address is the one asked for now, if not mailed yet)


# A place asking to be told: it waits for its turn (in a pre-queue, its turn comes
# after the draw).
_WAITING = {"PRE_QUEUE", "DRAWING", "WAITING"}
# Asked again, a request not mailed yet takes the new address (and one that failed,
# or was dropped while the place was briefly out of sight, is armed again).
_REARMED = (Status.PENDING, Status.FAILED, Status.DROPPED)
# Link sites longer than the column (a Host header, as ALLOWED_HOSTS lets it through).
_SITE_MAX = NotifyRequest._meta.get_field("site").max_length


def notify_request(*, event_id: str, token: tokens.Token, email: str, language: str, site: str) -> Notify:
    """Mail `email` once, in `language`, when this place is near the front; asked
    again, the address changes, and a mail sent already is never sent again. The
    place must be waiting (NOT_WAITING otherwise), which a poll tells."""
    at = services.queue_poll(event_id=event_id, token=token)  # INVALID_TOKEN, EVENT_NOT_FOUND
    if at.status not in _WAITING:
        raise DomainError("NOT_WAITING")
    event = Event.objects.filter(event_id=event_id).only("pk").first()
    if event is None:
        raise DomainError("EVENT_NOT_FOUND")
    language = language if language in dict(settings.LANGUAGES) else settings.LANGUAGE_CODE
    site = site if len(site) <= _SITE_MAX else settings.SITE_URL
    fields = {"email": email, "language": language, "site": site, "token": token.text}
    row, created = NotifyRequest.objects.get_or_create(
        event=event,
        place=hashlib.sha256(token.raw).hexdigest(),
        defaults={**fields, "number": tokens.issued(event_id, token)},
    )
    if not created:
        NotifyRequest.objects.filter(pk=row.pk, status__in=_REARMED).update(
            **fields, status=Status.PENDING, tries=0, retry_at=None, updated_at=timezone.now()
        )
        row.refresh_from_db()
    return Notify(event_id, row.email, row.language, row.status, settings.NOTIFY_AHEAD_SECONDS, created)


# --- Sending --------------------------------------------------------------------------

# A run sends for at most this long (when the mail rate keeps it waiting); the next
# one, as many seconds later (ticketing/celery.py), goes on from where it stopped.
RUN_SECONDS = 5.0
# Sends the mail server may refuse ("try again later", or away) before the request is
# given up; each waits a little longer (10 s, 20 s, 40 s, 60 s): the notice is about
# minutes, so later than that is no use.
TRIES = 5

# What a run does with a place, from its poll.
SEND, DROP, LATER, STOP = "SEND", "DROP", "LATER", "STOP"


def _verdict(at: services.Position, ahead: int) -> str:
    if at.status == "ACTIVE":
        return SEND  # admitted already (a notice shorter than a tick, or a run late)
    if at.status == "WAITING":
        if at.eta_seconds is not None and at.eta_seconds <= ahead:
            return SEND
        # Further back (or no estimate: paused, sold out), and so is every later
        # arrival of its line; but in a drawn pre-queue, whose places are shuffled.
        return LATER if at.draw_position is not None else STOP
    if at.status in ("PRE_QUEUE", "DRAWING"):
        return STOP  # nobody is placed before the draw
    return DROP  # BOOKED, NOT_SAVED, UNCLAIMED, EXPIRED, NOT_FOUND: the place is gone


MAIL_RATE_KEY = store.ratelimit_key("notify-mail", "all")


def _mail_slot(deadline: float) -> bool:
    """One more mail within NOTIFY_MAIL_PER_SECOND (lua/ratelimit.lua, shared by
    every worker), waited for until `deadline`; False past it."""
    per_second = settings.NOTIFY_MAIL_PER_SECOND
    if per_second <= 0:
        return True
    while True:
        allowed, reset_ms = store.run(ratelimit.limit_call(MAIL_RATE_KEY, per_second, ratelimit.WINDOW_MS))
        if allowed:
            return True
        wait = max(reset_ms, 1) / 1000
        if time.monotonic() + wait > deadline:
            return False
        time.sleep(wait)


def _set(pk: int, **fields: object) -> int:
    return NotifyRequest.objects.filter(pk=pk).update(**fields, updated_at=timezone.now())


def _message(row: NotifyRequest, event: Event, at: services.Position) -> EmailMessage:
    admitted, seconds = at.status == "ACTIVE", None
    if admitted:
        left = (at.active_expires_at or 0) - int(time.time() * 1000)
        if event.claim_seconds:
            # The claim time (docs/modes.md) runs from the admission, which the
            # window's end dates: the turn passes then, if sooner, unless they are back.
            claim_left = left - (event.active_window_seconds - event.claim_seconds) * 1000
            if claim_left < left:
                left, seconds = claim_left, max(1, math.ceil(claim_left / 1000))
        minutes = max(1, left // 60_000)
        if seconds is not None and seconds >= 120:
            seconds = None  # minutes say it
    else:
        minutes = max(1, math.ceil((at.eta_seconds or 0) / 60))
    context = {
        "event": event,
        "admitted": admitted,
        "minutes": minutes,
        "seconds": seconds,
        "claim": event.claim_seconds,
        "link": place_link(row.site, event.event_id, row.token),
    }
    with translation.override(row.language):
        subject = render_to_string("queue_app/notify_subject.txt", context).strip()
        body = render_to_string("queue_app/notify_mail.txt", context)
    return EmailMessage(subject, body, to=[row.email])


# What became of a place to mail.
SENT, TAKEN, LATE, REFUSED = "SENT", "TAKEN", "LATE", "REFUSED"


def _send(pk: int, event: Event, at: services.Position, connection: BaseEmailBackend, deadline: float) -> str:
    """Claim the row and mail it within the rate: SENT; TAKEN when another run
    claimed it first (it is that run's to mail); LATE when the rate would keep it
    waiting past `deadline` (it is left for the next run); REFUSED when the mail
    server would not take it."""
    claimed = NotifyRequest.objects.filter(pk=pk, status=Status.PENDING).update(
        status=Status.SENDING, updated_at=timezone.now()
    )
    if not claimed:
        return TAKEN
    if not _mail_slot(deadline):
        _set(pk, status=Status.PENDING)  # claimed by this run alone: nobody else moves it
        return LATE
    row = NotifyRequest.objects.get(pk=pk)  # as it is now: the address asked for last
    message = _message(row, event, at)
    message.connection = connection
    try:
        message.send()
    except OSError as exc:  # smtplib's errors are OSErrors, as are refused connections
        tries = row.tries + 1
        log.warning("notify-me %s for %s not sent (try %s): %r", pk, event.event_id, tries, exc)
        if tries >= TRIES:
            _set(pk, status=Status.FAILED, tries=tries, token="")
        else:
            retry_at = timezone.now() + timedelta(seconds=min(60, 10 * 2 ** (tries - 1)))
            _set(pk, status=Status.PENDING, tries=tries, retry_at=retry_at)
        return REFUSED
    _set(pk, status=Status.SENT, sent_at=timezone.now(), token="")
    return SENT


def _event_due(event: Event, connection: BaseEmailBackend, deadline: float) -> tuple[int, bool]:
    """Mail an event's places that are near the front, nearest first: (mails sent,
    whether the run may go on: False once out of time or the mail server refused)."""
    now = timezone.now()
    ahead = settings.NOTIFY_AHEAD_SECONDS
    pending = (
        NotifyRequest.objects.filter(event=event, status=Status.PENDING)
        .exclude(retry_at__gt=now)
        .order_by("number")
        .values_list("pk", "token")
    )
    sent = 0
    # The lines (general False, priority lane True) whose places further on are not
    # near yet: numbers count in each line apart (docs/modes.md).
    done: set[bool] = set()
    for pk, token in pending.iterator(chunk_size=1000):
        parsed = tokens.parse_token(token)
        found = tokens.place_of(event.event_id, parsed.raw)
        if found is not None and found[1] in done:
            continue
        try:
            # Asked for the person, not by them: an admitted place is not claimed.
            at = services.queue_poll(event_id=event.event_id, token=parsed, own=False)
        except DomainError as exc:
            if exc.code == "EVENT_NOT_FOUND":
                return sent, True  # not in Redis now (a recovery rebuilds it): asked again next run
            verdict = DROP  # INVALID_TOKEN: its key's grace period is over
        else:
            verdict = _verdict(at, ahead)
        if verdict == STOP:
            done.add(at.lane)
            if len(done) == 2 or not event.priority_share:
                break
            continue
        if verdict == DROP:
            NotifyRequest.objects.filter(pk=pk, status=Status.PENDING).update(
                status=Status.DROPPED, token="", updated_at=timezone.now()
            )
        elif verdict == SEND:
            outcome = _send(pk, event, at, connection, deadline)
            if outcome in (LATE, REFUSED):
                return sent, False  # out of time; or the mail server is away: the next run goes on
            sent += outcome == SENT
    return sent, time.monotonic() < deadline


def notify_due(*, seconds: float = RUN_SECONDS) -> int:
    """Mail everyone near the front who asked, once (beat, every RUN_SECONDS); the
    mails sent. Requests of closed events are dropped."""
    deadline = time.monotonic() + seconds
    NotifyRequest.objects.filter(status=Status.PENDING, event__status=Event.Status.CLOSED).update(
        status=Status.DROPPED, token="", updated_at=timezone.now()
    )
    events = Event.objects.filter(
        pk__in=NotifyRequest.objects.filter(status=Status.PENDING).values("event_id")
    ).order_by("pk")
    sent = 0
    connection = get_connection()  # one connection to the mail server for the run
    try:
        for event in events:
            done, go_on = _event_due(event, connection, deadline)
            sent += done
            if not go_on:
                break
    finally:
        connection.close()
    return sent
