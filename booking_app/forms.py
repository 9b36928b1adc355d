"""The booking page's form (booking_app/views.py: book), and on an event with a seat
map its seat choice: the seats ticked, or a section and a count for the best free
seats; the sections and seats as the page lists them; what a refused choice is told;
and the settings of the page's map script (static/js/seat-map.js)."""

import base64
import time
from dataclasses import dataclass

from django import forms
from django.urls import reverse
from django.utils.translation import gettext, ngettext, pgettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from booking_app.models import BUYER_EMAIL_MAX, BUYER_NAME_MAX
from queue_app import availability, seating
from queue_app.models import Event
from ticketing import money
from ticketing.errors import DomainError

# What a choice of seats may be refused with besides, on an event with a seat map.
SEAT_MESSAGES = {
    "SECTION_NOT_FOUND": _("That section is no longer on this event's map. Choose another."),
    "VALIDATION_ERROR": _("Those seats cannot be booked together. Check your choice and try again."),
}
# Refusals of a choice of seats that another choice may still get: a conflict, as
# the API answers them.
CONFLICTS = {"INSUFFICIENT_SEATS", "SEAT_TAKEN", "SECTION_SOLD_OUT", "NO_ADJACENT_SEATS"}


class BookingForm(forms.Form):
    seat_count = forms.TypedChoiceField(label=_("Seats"), coerce=int)
    buyer_name = forms.CharField(label=_("Name"), max_length=BUYER_NAME_MAX)
    buyer_email = forms.EmailField(label=_("Email"), max_length=BUYER_EMAIL_MAX)

    def __init__(self, *args, most: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["seat_count"].choices = [(n, str(n)) for n in range(1, most + 1)]

    def choice(self) -> dict:
        """What to book, as services.booking_reserve takes it."""
        return {"seat_count": self.cleaned_data["seat_count"]}


class SeatBookingForm(BookingForm):
    """The booking form of an event with a seat map: the seats ticked (numbered, of
    one section), or a section and a count for the best free seats in it, side by
    side when asked. It works without JavaScript; the map and the list of
    static/js/seat-map.js only tick its boxes."""

    section = forms.ChoiceField(
        label=pgettext_lazy("seat map", "Section"), required=False, widget=forms.RadioSelect
    )
    seats = forms.MultipleChoiceField(
        label=_("Seats"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"invalid_choice": _("There is no seat %(value)s on this map.")},
    )
    together = forms.BooleanField(label=_("Side by side"), required=False)
    field_order = ["section", "seats", "seat_count", "together", "buyer_name", "buyer_email"]

    def __init__(self, *args, most: int, layout: dict, **kwargs) -> None:
        super().__init__(*args, most=most, **kwargs)
        self.most = most
        self.names = {section["id"]: section["name"] for section in layout["sections"]}
        self.section_of = {seat_id: section for seat_id, section in seat_ids(layout)}
        self.fields["section"].choices = list(self.names.items())
        self.fields["seats"].choices = [(seat_id, seat_id) for seat_id in self.section_of]
        # Only a count for the best seats: ticked seats are counted as ticked.
        count = self.fields["seat_count"]
        count.label, count.required, count.empty_value = _("How many seats"), False, None

    def clean(self) -> dict:
        data = super().clean()
        if "seats" in self.errors or "section" in self.errors:
            return data  # said already, of the field
        seats, section = data.get("seats") or [], data.get("section") or ""
        theirs = sorted({self.section_of[seat_id] for seat_id in seats})
        if len(theirs) > 1:
            raise forms.ValidationError(
                _("The seats of one booking are in one section: tick seats of one only.")
            )
        if theirs and section and section != theirs[0]:
            raise forms.ValidationError(
                _("The seats ticked are in %(ticked)s, not in %(chosen)s: choose one section."),
                params={"ticked": self.names[theirs[0]], "chosen": self.names[section]},
            )
        if len(seats) > self.most:
            raise forms.ValidationError(
                ngettext("Choose at most %(n)s seat.", "Choose at most %(n)s seats.", self.most)
                % {"n": self.most}
            )
        if not seats and not section:
            raise forms.ValidationError(_("Choose seats, or a section for us to pick the best seats in."))
        if not seats and not data.get("seat_count"):
            raise forms.ValidationError(_("Choose how many seats to pick in the section."))
        return data

    def choice(self) -> dict:
        seats = tuple(self.cleaned_data["seats"])
        if seats:
            return {"seat_count": len(seats), "seats": seats}
        return {
            "seat_count": self.cleaned_data["seat_count"],
            "section": self.cleaned_data["section"],
            "together": self.cleaned_data["together"],
        }

    def section_asked(self) -> str:
        """The section of a valid choice: the seats' own, or the one chosen."""
        seats = self.cleaned_data.get("seats") or []
        return self.section_of[seats[0]] if seats else self.cleaned_data.get("section") or ""


def seat_ids(layout: dict) -> list[tuple[str, str]]:
    """Each numbered seat's id and its section's, in the seats' index order."""
    return [
        (f"{section['id']}-{row['row']}-{label}", section["id"])
        for section in layout["sections"]
        for row in section["rows"]
        for label in row["labels"]
    ]


@dataclass(frozen=True, slots=True)
class ShownSeat:
    id: str
    label: str
    state: int  # queue_app.seating: FREE, HELD, SOLD or BLOCKED
    chosen: bool

    @property
    def free(self) -> bool:
        return self.state == seating.FREE


@dataclass(frozen=True, slots=True)
class ShownRow:
    row: str
    seats: list[ShownSeat]


@dataclass(frozen=True, slots=True)
class ShownSection:
    code: str
    name: str
    price: str  # as shown; '' when free of charge
    free: int
    numbered: bool
    rows: list[ShownRow]


def states_of(encoded: str | None) -> list[int]:
    """A numbered section's seat states from GET /api/events/<id>/seats' base64:
    2 bits a seat, a byte's first seat in its high bits."""
    return seating.seat_states(base64.b64decode(encoded or ""))


def seats_shown(layout: dict, now: dict, chosen: set[str], taken: set[str]) -> list[ShownSection]:
    """The map's sections as the form lists them, from the copy of the seats' state
    the map's script polls too (queue_app/availability.py), so that the page and its
    first refresh agree. `taken`: seats a refusal just named, which that copy (up
    to a refresh old) may still show free."""
    current = {section["id"]: section for section in now["sections"]}
    shown = []
    for spec in layout["sections"]:
        state = current.get(spec["id"], {})
        states, index, rows = states_of(state.get("state")), 0, []
        for row in spec["rows"]:
            seats = []
            for label in row["labels"]:
                seat_id = f"{spec['id']}-{row['row']}-{label}"
                now_is = states[index] if index < len(states) else seating.FREE
                if seat_id in taken and now_is == seating.FREE:
                    now_is = seating.HELD
                seats.append(ShownSeat(seat_id, label, now_is, seat_id in chosen and now_is == seating.FREE))
                index += 1
            rows.append(ShownRow(row["row"], seats))
        price = money.shown(spec["price"], layout["currency"]) if spec["price"] else ""
        shown.append(
            ShownSection(spec["id"], spec["name"], price, state.get("free", 0), spec["numbered"], rows)
        )
    return shown


def refused(exc: DomainError, form: SeatBookingForm) -> str:
    """What the page says of a choice of seats the booking refused."""
    name = form.names.get(form.section_asked(), "")
    if exc.code == "SEAT_TAKEN":
        taken = list(exc.details.get("seats", ()))
        seats = ", ".join(taken)
        if set(form.cleaned_data["seats"]) <= set(taken):
            return gettext("Someone just took %(seats)s. Choose other seats.") % {"seats": seats}
        return gettext("Someone just took %(seats)s; the rest of your choice is kept.") % {"seats": seats}
    if exc.code == "SEAT_NOT_FOUND":
        return gettext("There is no seat %(value)s on this map.") % {"value": ", ".join(exc.details["seats"])}
    if exc.code == "SECTION_SOLD_OUT":
        return gettext("%(section)s is sold out. Choose another section.") % {"section": name}
    if exc.code == "NO_ADJACENT_SEATS":
        n = form.cleaned_data["seat_count"]
        return ngettext(
            "%(section)s has no %(n)s seat side by side left. Untick “Side by side”, or choose fewer seats.",
            "%(section)s has no %(n)s seats side by side left. Untick “Side by side”, or choose fewer seats.",
            n,
        ) % {"section": name, "n": n}
    return str(SEAT_MESSAGES.get(exc.code, ""))


def seat_script(event: Event, layout: dict, most: int, since: int) -> dict:
    """What static/js/seat-map.js needs: where to read the map and its seats, and
    its words, translated here (the .po has them)."""
    return {
        "layoutUrl": reverse("seat-map", args=[event.event_id]),
        "seatsUrl": reverse("event-seats", args=[event.event_id]),
        # Answers read before this (ms, the servers' clock) are older than the page.
        "since": since,
        "pollMs": 1000,
        "most": most,
        "currency": layout["currency"],
        "exponent": money.EXPONENTS.get(layout["currency"], 0),
        "strings": {
            "seat": gettext("Row %(row)s, seat %(seat)s, %(price)s, %(state)s"),
            "seatNoCharge": gettext("Row %(row)s, seat %(seat)s, %(state)s"),
            "row": gettext("Row %(row)s"),
            "free": pgettext("seat map", "free"),
            "held": gettext("being paid for"),
            "sold": pgettext("seat map", "sold"),
            "blocked": gettext("not on sale"),
            "left": gettext("%(n)s left"),
            "soldOut": pgettext("seat map", "sold out"),
            "takenNow": gettext("Someone just took %(seats)s: it is no longer in your choice."),
            "most": ngettext(
                "You may choose up to %(n)s seat at once.", "You may choose up to %(n)s seats at once.", most
            )
            % {"n": most},
            "otherSection": gettext(
                "The seats of one booking are in one section: your seats in %(section)s were let go."
            ),
            "chosenNone": gettext("No seats chosen: choose them on the map or in the list, or let us pick."),
            "chosen": gettext("Your seats: %(seats)s"),
            "total": gettext("Total: %(total)s"),
        },
    }


def seat_context(event: Event, layout: dict, form: SeatBookingForm, most: int, taken: set[str]) -> dict:
    """The seat map's part of the booking page: its sections and seats as the form
    lists them, the buyer's choice kept (less the seats just taken), and the map
    script's settings."""
    now = availability.seats_available(event.event_id)
    chosen = set(form.data.getlist("seats")) - taken if form.is_bound else set()
    # A refusal's seats may still be free in a copy read before it: the page's own
    # state is then newer than any copy, and the script waits for a later one.
    since = int(time.time() * 1000) if taken else now["refreshedAt"]
    sections = seats_shown(layout, now, chosen, taken)
    return {
        "sections": sections,
        "section_chosen": form["section"].value() or "",
        "buyer_fields": [form["buyer_name"], form["buyer_email"]],
        "priced": any(section.price for section in sections),
        "seat_script": seat_script(event, layout, most, since),
    }
