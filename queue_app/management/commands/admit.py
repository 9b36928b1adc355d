from django.core.management.base import BaseCommand, CommandError, CommandParser

from queue_app import admission, events

REASONS = {
    "ALREADY_TICKED": "this second's tick already ran; try again in a second",
    "NOT_OPEN": "the event is not OPEN",
    "SOLD_OUT": "no seats left",
    "EMPTY": "nobody is waiting",
    "FULL": "the active window is at its cap",
}


class Command(BaseCommand):
    help = "Run one admission tick for an event by hand and print how many were admitted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")

    def handle(self, *args, **opts) -> None:
        tick = admission.event_admit(opts["event_id"])
        if tick.outcome == "EVENT_NOT_FOUND":
            raise CommandError(f"No event {opts['event_id']!r} in Redis; run init_event.")
        waiting, active = tick.waiting, tick.active
        if tick.outcome == "ALREADY_TICKED":  # the tick that ran counted the line; so do we
            numbers = events.event_live_numbers(opts["event_id"])
            waiting, active = numbers["waiting"], numbers["active"]
        reason = f" ({REASONS[tick.outcome]})" if tick.outcome in REASONS else ""
        self.stdout.write(f"Admitted {tick.admitted}{reason}; {waiting} waiting, {active} active.")
