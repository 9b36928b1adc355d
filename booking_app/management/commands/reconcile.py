from django.core.management.base import BaseCommand, CommandError, CommandParser

from booking_app import reconcile
from queue_app.models import Event


class Command(BaseCommand):
    help = (
        "Decide bookings that reached Redis but were never decided in Postgres (a process "
        "died in between), recount seats left from Postgres (healing a Redis that lost "
        "writes), and return the seats of unfinished cancellations. Exits 1 when it could "
        "not recount."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")

    def handle(self, *args, **opts) -> None:
        if not Event.objects.filter(event_id=opts["event_id"]).exists():
            raise CommandError(f"No event {opts['event_id']!r}.")
        report = reconcile.booking_reconcile(opts["event_id"])
        self.stdout.write("\n".join(report.lines()))
        if not report.recounted:
            raise CommandError("seats were not recounted; see above")
