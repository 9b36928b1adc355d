from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError

from queue_app import presale
from queue_app.models import Event
from ticketing.errors import REDIS_ERRORS


class Command(BaseCommand):
    help = (
        "Make presale codes for an event (docs/presale.md) and print them once, as CSV: only "
        "their hashes are kept, so this output is the only copy. Each code gives --uses places."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")
        parser.add_argument(
            "--count", type=int, required=True, help=f"codes to make (1-{presale.MAX_BATCH:,})"
        )
        parser.add_argument("--uses", type=int, default=1, help="places each code gives (1 by default)")
        parser.add_argument("--note", default="", help="who the codes go to, kept with them")
        parser.add_argument(
            "--output",
            metavar="FILE",
            help="write the CSV to this new file (never over an existing one) rather than print it",
        )

    def handle(self, *args, **opts) -> None:
        event = Event.objects.filter(event_id=opts["event_id"]).first()
        if event is None:
            raise CommandError(f"No event {opts['event_id']!r}; create it with init_event.")
        count, uses = opts["count"], opts["uses"]
        if not 1 <= count <= presale.MAX_BATCH:
            raise CommandError(f"--count must be 1 to {presale.MAX_BATCH:,}, not {count}.")
        if uses < 1:
            raise CommandError(f"--uses must be at least 1, not {uses}.")
        if len(opts["note"]) > 200:
            raise CommandError("--note: at most 200 characters.")
        output = Path(opts["output"]) if opts["output"] else None
        if output is not None and output.exists():
            raise CommandError(f"{output} exists: the codes are written once, to a new file.")
        try:
            codes = presale.codes_create(event, count=count, uses=uses, note=opts["note"])
        except IntegrityError:
            raise CommandError("A code came out equal to one the event has (very rare): run again.") from None
        except REDIS_ERRORS as exc:
            raise CommandError(f"Redis could not be reached, so no code was made: {exc}") from None
        text = presale.codes_csv(event, codes, uses, opts["note"])
        if output is None:
            self.stdout.write(text, ending="")
            return
        with output.open("x", encoding="utf-8") as out:  # (x: never over a file made meanwhile)
            out.write(text)
        output.chmod(0o600)  # the codes are as good as places: for their owner only
        self.stderr.write(f"{count} codes of {uses} use(s) each for {event.event_id} written to {output}.")
