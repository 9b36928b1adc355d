import argparse
import datetime
import io

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from queue_app import events, seating
from queue_app.models import MAX_PRIORITY_SHARE, Event
from ticketing import money


def _start(value: str) -> datetime.datetime | str:
    """--opens-at: an ISO 8601 time (naive: the server's TIME_ZONE), +SECONDS, or
    'none' ('' clears it)."""
    if value.lower() == "none":
        return ""
    if value.startswith("+") and value[1:].isdigit():
        return timezone.now() + datetime.timedelta(seconds=int(value[1:]))
    parsed = parse_datetime(value)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"not a time: {value!r} (ISO 8601, +SECONDS or none)")
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)


class Command(BaseCommand):
    help = (
        "Create or update an event and its Redis state. Seats left are never "
        "overwritten (a new total moves them by the difference) unless --reset."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")
        parser.add_argument("--seats", type=int, help="total seats")
        parser.add_argument(
            "--seat-map",
            metavar="FILE",
            help="sections and numbered seats, as docs/seat-map.schema.json describes (the total "
            "seats follow from it); replaced whole, and only while no seat is held or sold",
        )
        parser.add_argument("--batch", type=int, help="people admitted per second (0 admits nobody)")
        parser.add_argument("--ttl", type=int, help="active window in seconds")
        parser.add_argument("--max-active", type=int, help="most people active at once (0 = no cap)")
        parser.add_argument("--max-per-booking", type=int, help="most seats in one booking")
        parser.add_argument(
            "--mode", choices=Event.Mode.values, help="how arrivals are let in (docs/modes.md)"
        )
        parser.add_argument(
            "--claim", type=int, help="seconds an admitted person has to come back (0 = no claim time)"
        )
        parser.add_argument(
            "--claim-grace",
            action=argparse.BooleanOptionalAction,
            help="a person back after the claim time takes their turn again while the cap has room",
        )
        parser.add_argument("--name", help="display name")
        parser.add_argument(
            "--proof-of-work", type=int, help="difficulty of the proof of work at join (0 = off)"
        )
        parser.add_argument(
            "--require-account",
            action=argparse.BooleanOptionalAction,
            help="joining needs a signed-in account, one place each",
        )
        parser.add_argument(
            "--max-places-per-address", type=int, help="live places per client address (0 = no cap)"
        )
        parser.add_argument(
            "--max-seats-per-buyer", type=int, help="seats per buyer across bookings, by email (0 = no cap)"
        )
        parser.add_argument(
            "--price", type=int, help="per seat, in the currency's minor unit (KRW has none); 0 = free"
        )
        parser.add_argument("--currency", help="ISO 4217 code of the price (KRW by default)")
        parser.add_argument(
            "--hold", type=int, help="seconds a priced booking's seats are held while paid for"
        )
        parser.add_argument(
            "--refund-percent",
            type=int,
            help="of a paid booking its buyer cancels, the share refunded (0-100, rounded down; 100 by "
            "default); an operator's cancellation is refunded in full",
        )
        parser.add_argument(
            "--late-confirmation",
            action=argparse.BooleanOptionalAction,
            help="a payment that arrives after its hold was released confirms the booking if its seats "
            "are still free (off by default: it is refunded)",
        )
        parser.add_argument(
            "--hot-sale",
            action="store_true",
            help="proof of work, a cap per address and per buyer, where not given (docs/fairness.md)",
        )
        parser.add_argument(
            "--opens-at",
            type=_start,
            help="scheduled start (ISO 8601, or +SECONDS from now; 'none' to clear): joins before it "
            "are drawn into the line at it (docs/draw.md)",
        )
        parser.add_argument(
            "--public-from",
            type=_start,
            help="the presale's end, the public start (ISO 8601, or +SECONDS from now; 'none' to clear): "
            "before it only holders of a presale code or accounts on the allow-list join (docs/presale.md)",
        )
        parser.add_argument(
            "--priority-share",
            type=int,
            help="percent of the admission rate given first to the priority lane, which presale holders "
            f"join (0-{MAX_PRIORITY_SHARE}; 0 = no lane; docs/modes.md)",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="wipe the event's Redis state (line, active window, counters) first",
        )
        parser.add_argument(
            "--if-missing", action="store_true", help="do nothing when the event already exists"
        )

    def handle(self, *args, **opts) -> None:
        event_id = opts["event_id"]
        for name in (
            "seats",
            "batch",
            "ttl",
            "max_active",
            "max_per_booking",
            "claim",
            "priority_share",
            "proof_of_work",
            "max_places_per_address",
            "max_seats_per_buyer",
            "price",
            "refund_percent",
        ):
            if opts[name] is not None and opts[name] < (1 if name in ("ttl", "max_per_booking") else 0):
                raise CommandError(f"--{name.replace('_', '-')} must not be {opts[name]}.")
        existing = Event.objects.filter(event_id=event_id).first()
        if existing and opts["if_missing"]:
            self.stdout.write(f"Event {event_id} exists; left as it is.")
            return
        event = existing or Event(event_id=event_id, **Event.defaults_from_settings())
        if existing is None and opts["seats"] is None:
            event.total_seats = settings.TOTAL_SEATS
        if existing is None and opts["name"] is None and event_id == settings.EVENT_ID:
            event.name = settings.EVENT_NAME  # what the event list shows people
        for opt, field in (
            ("seats", "total_seats"),
            ("batch", "admit_per_second"),
            ("ttl", "active_window_seconds"),
            ("max_active", "max_active_users"),
            ("max_per_booking", "max_seats_per_booking"),
            ("mode", "mode"),
            ("claim", "claim_seconds"),
            ("claim_grace", "claim_grace"),
            ("priority_share", "priority_share"),
            ("name", "name"),
            ("proof_of_work", "proof_of_work"),
            ("require_account", "require_account"),
            ("max_places_per_address", "max_places_per_address"),
            ("max_seats_per_buyer", "max_seats_per_buyer"),
            ("price", "price"),
            ("currency", "currency"),
            ("hold", "hold_seconds"),
            ("refund_percent", "refund_percent"),
            ("late_confirmation", "late_confirmation"),
        ):
            if opts[opt] is not None:
                setattr(event, field, opts[opt])
        if opts["opens_at"] is not None:
            event.opens_at = opts["opens_at"] or None
        if opts["public_from"] is not None:
            event.public_from = opts["public_from"] or None
        if opts["hot_sale"]:
            event.apply_hot_sale()
        seat_map = None
        if opts["seat_map"]:
            try:
                seat_map = seating.seat_map_read(opts["seat_map"])
                parsed = seating.seat_map_parse(seat_map, price=event.price)
            except seating.SeatMapError as exc:
                raise CommandError("; ".join(exc.args)) from None
            event.total_seats = sum(section.places for section, _ in parsed)
            if opts["seats"] is not None and opts["seats"] != event.total_seats:
                raise CommandError(f"--seats {opts['seats']}: the seat map has {event.total_seats} seats.")
        try:
            event.full_clean()
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from None
        try:
            with transaction.atomic():
                event.save()  # the database refuses a total below the seats sold
                if seat_map is not None:
                    seating.seat_map_apply(event, seat_map)
                left = events.event_publish(event)
        except events.LineStarted as exc:
            raise CommandError(str(exc)) from None
        except seating.SeatMapError as exc:
            raise CommandError(f"{event_id}: {'; '.join(exc.args)}") from None
        except (IntegrityError, events.SeatsBelowSold):
            raise CommandError(f"{event_id}: {event.total_seats} seats is fewer than already sold.") from None
        if opts["reset"]:
            # A fresh line, but sold seats stay sold: the booking app rebuilds the
            # event's state from Postgres, as after Redis lost its data.
            events.event_wipe(event_id)
            call_command("recover_event", event_id, stdout=io.StringIO())
            left = events.event_live_numbers(event_id)["seatsLeft"]
        verb = "Created" if existing is None else "Updated"
        self.stdout.write(
            f"{verb} event {event_id}: {event.total_seats} seats ({left} left), "
            f"{event.admit_per_second}/s, window {event.active_window_seconds}s, "
            f"max active {event.max_active_users or 'no cap'}, status {event.status}, mode {event.mode}"
            + (f", claim within {event.claim_seconds}s" if event.claim_seconds else "")
            + (" (grace for the late)" if event.claim_seconds and event.claim_grace else "")
            + (f", priority lane {event.priority_share}%" if event.priority_share else "")
            + (
                f", {money.shown(event.price, event.currency)} a seat, held {event.hold_seconds}s, "
                f"{event.refund_percent}% refunded to a buyer who cancels"
                + (", late payments confirmed while seats are free" if event.late_confirmation else "")
                if event.price
                else ""
            )
            + (f"; {event.sections.count()} sections" if event.sections.exists() else "")
            + f"; protections: {', '.join(event.protections()) or 'none'}"
            + (f"; presale until {event.public_from.isoformat()}" if event.public_from else "")
            + (
                f"; opens at {event.opens_at.isoformat()}, commitment {event.draw.commitment}."
                if event.opens_at
                else "."
            )
        )
