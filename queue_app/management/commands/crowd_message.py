from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from queue_app import crowd_messages
from queue_app.models import Event


class Command(BaseCommand):
    help = (
        "Show a message to the people of an event's line, in Korean and/or English "
        "(every open waiting room within one poll), or --clear it (docs/modes.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")
        parser.add_argument("--ko", default="", help="the Korean text")
        parser.add_argument("--en", default="", help="the English text")
        parser.add_argument("--clear", action="store_true", help="take the message shown down")

    def handle(self, *args, **opts) -> None:
        event_id = opts["event_id"]
        if not Event.objects.filter(event_id=event_id).exists():
            raise CommandError(f"No event {event_id!r}; create it with init_event.")
        if opts["clear"]:
            if opts["ko"] or opts["en"]:
                raise CommandError("--clear takes no text.")
            cleared = crowd_messages.event_message_clear(event_id=event_id)
            said = "message cleared." if cleared else "no message was shown."
            self.stdout.write(f"Event {event_id}: {said}")
            return
        try:
            crowd_messages.event_message_post(event_id=event_id, text_ko=opts["ko"], text_en=opts["en"])
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        self.stdout.write(f"Event {event_id}: message shown.")
