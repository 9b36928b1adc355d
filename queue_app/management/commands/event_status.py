from django.core.management.base import BaseCommand, CommandError, CommandParser

from queue_app import events
from queue_app.models import Event


class Command(BaseCommand):
    help = (
        "Open, pause (joins accepted, nobody admitted) or close (joins refused) an event; "
        "--mode switches how arrivals are let in, keeping every place."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")
        parser.add_argument("status", nargs="?", choices=Event.Status.values)
        parser.add_argument("--mode", choices=Event.Mode.values, help="docs/modes.md")

    def handle(self, *args, **opts) -> None:
        event = Event.objects.filter(event_id=opts["event_id"]).first()
        if event is None:
            raise CommandError(f"No event {opts['event_id']!r}; create it with init_event.")
        if opts["status"] is None and opts["mode"] is None:
            raise CommandError("Name a status, a --mode, or both.")
        if opts["status"] is not None:
            event.status = opts["status"]
        if opts["mode"] is not None:
            event.mode = opts["mode"]
        event.save(update_fields=["status", "mode", "updated_at"])
        events.event_publish(event)
        self.stdout.write(f"Event {event.event_id} is {event.status}, mode {event.mode}.")
