"""An operator's messages to the people of an event's line ("Doors open 10 minutes
late"), in Korean and English.

Postgres keeps every message (EventMessage: the history); the one shown is the one
not cleared, as posting a message ends the one before. Each change is
published with the event's record (events.event_publish: the `message` field of its
meta), which each web process's copy of the line reads at its next refresh
(queue_app/line.py), so every poll carries it within one refresh interval, and no
poll reads anything more from Redis for it."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from queue_app import events
from queue_app.models import Event, EventMessage


def _tidy(text: str) -> str:
    # A textarea's line ends arrive as CRLF: one character each on the wire.
    return text.replace("\r\n", "\n").strip()


def event_message_post(
    *, event_id: str, text_ko: str, text_en: str, by: AbstractBaseUser | None = None
) -> EventMessage:
    """Show a message to the event's line in place of the one shown now (kept in the
    history, as replaced then). Either text may be empty (a page shows the other);
    not both. Raises ValidationError for a message the model refuses, and the Redis
    client's errors when the change cannot be published: either way nothing changes."""
    message = EventMessage(text_ko=_tidy(text_ko), text_en=_tidy(text_en), created_by=by)
    with transaction.atomic():
        # One change of an event's message at a time, published in the order made.
        event = Event.objects.select_for_update().get(event_id=event_id)
        message.event = event
        message.full_clean(exclude={"event"})  # (its one shown message ends below)
        _end_shown(event, by)
        message.save()
        events.event_publish(event)
    return message


def event_message_clear(*, event_id: str, by: AbstractBaseUser | None = None) -> EventMessage | None:
    """Stop showing the event's message (kept in the history, as cleared); the one
    cleared, or None when none was shown."""
    with transaction.atomic():
        event = Event.objects.select_for_update().get(event_id=event_id)
        cleared = _end_shown(event, by)
        if cleared is not None:
            events.event_publish(event)
    return cleared


def _end_shown(event: Event, by: AbstractBaseUser | None) -> EventMessage | None:
    shown = EventMessage.shown_now(event)
    if shown is not None:
        shown.cleared_at, shown.cleared_by = timezone.now(), by
        shown.save(update_fields=["cleared_at", "cleared_by"])
    return shown


def message_text(message: dict | None, language: str) -> tuple[str, str] | None:
    """A message as a page in `language` shows it: its text in that language, or in
    the other when the operator wrote only one, and the language of the text shown
    (for the page's `lang`); None for no message."""
    if not message:
        return None
    mine, other = ("ko", "en") if language.startswith("ko") else ("en", "ko")
    if message[mine]:
        return message[mine], mine
    return message[other], other
