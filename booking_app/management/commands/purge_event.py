from django.core.management.base import BaseCommand, CommandError, CommandParser

from booking_app.retention import PurgeRefused, event_purge


class Command(BaseCommand):
    help = (
        "Remove a CLOSED event's data from Redis now (beat does it EVENT_PURGE_AFTER_SECONDS "
        "after closing). Its bookings are settled first; Postgres keeps everything it holds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")

    def handle(self, *args, **opts) -> None:
        try:
            deleted = event_purge(opts["event_id"])
        except PurgeRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Purged {opts['event_id']} from Redis: {deleted} keys.")
