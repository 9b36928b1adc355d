from django.core.management.base import BaseCommand, CommandError, CommandParser

from queue_app import events
from queue_app.models import Event


class Command(BaseCommand):
    help = "Open, pause (joins accepted, nobody admitted) or close (joins refused) an event."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")
        parser.add_argument("status", choices=Event.Status.values)

    def handle(self, *args, **opts) -> None:
        event = Event.objects.filter(event_id=opts["event_id"]).first()
        if event is None:
            raise CommandError(f"No event {opts['event_id']!r}; create it with init_event.")
        event.status = opts["status"]
        event.save(update_fields=["status", "updated_at"])
        events.event_publish(event)
        self.stdout.write(f"Event {event.event_id} is {event.status}.")
