from django.core.management.base import BaseCommand, CommandError, CommandParser

from booking_app import services
from queue_app.models import Event


class Command(BaseCommand):
    help = (
        "Write reservations that reached Redis but not Postgres (a process died in "
        "between), return seats of unfinished cancellations, and report whether "
        "seats left + sold == total. Exits 1 on a mismatch."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")

    def handle(self, *args, **opts) -> None:
        if not Event.objects.filter(event_id=opts["event_id"]).exists():
            raise CommandError(f"No event {opts['event_id']!r}.")
        report = services.booking_reconcile(opts["event_id"])
        self.stdout.write("\n".join(report.lines()))
        if not report.consistent:
            raise CommandError("seats do not add up; see above")
