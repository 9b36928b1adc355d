from django.core.management.base import BaseCommand, CommandError, CommandParser

from booking_app import reconcile
from queue_app.models import Event


class Command(BaseCommand):
    help = (
        "After Redis lost its data: rebuild the event's state from Postgres (settings, "
        "booking marks, seats left counted from Postgres), so nothing is oversold. People "
        "in line rejoin at the back. Prints reconcile's verdict (HEALED, as a rebuild "
        "after a loss usually restores booking marks, or consistent); exits 0 once rebuilt "
        "and recounted, 1 when it could not recount."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")

    def handle(self, *args, **opts) -> None:
        if not Event.objects.filter(event_id=opts["event_id"]).exists():
            raise CommandError(f"No event {opts['event_id']!r}.")
        report = reconcile.event_recover(opts["event_id"])
        self.stdout.write("\n".join(report.lines()))
        if not report.recounted:
            raise CommandError(f"{report.verdict}: seats were not recounted; run it again")
