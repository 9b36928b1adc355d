from django.core.management.base import BaseCommand, CommandError, CommandParser

from booking_app import reconcile
from queue_app.models import Event


class Command(BaseCommand):
    help = (
        "Decide bookings that reached Redis but were never decided in Postgres (a process "
        "died in between), recount seats left from Postgres (healing a Redis that lost "
        "writes), and return the seats of unfinished cancellations. Prints the verdict first; "
        "exits 0 when everything was consistent, 2 when it HEALED something (Redis' seat "
        "count, the seat ledger, lost booking marks: consistent now), 1 when it could not "
        "recount (Redis or Postgres failed, or another reconcile was busy with the event)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")

    def handle(self, *args, **opts) -> None:
        if not Event.objects.filter(event_id=opts["event_id"]).exists():
            raise CommandError(f"No event {opts['event_id']!r}.")
        report = reconcile.booking_reconcile(opts["event_id"])
        self.stdout.write("\n".join(report.lines()))
        if report.verdict == "HEALED":
            raise CommandError("HEALED: counts disagreed with Postgres; corrected, see above", returncode=2)
        if not report.recounted:
            raise CommandError(f"{report.verdict}: seats were not recounted; run it again")
