"""The operator's seat map of an event, a page of its admin: each section's price,
and numbered seats blocked (for the press, accessibility, technical reasons) or
released, with the protections of queue_app/seating.py: a held or sold seat is never
blocked, and a price applies to bookings made after it."""

import re

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.module_loading import import_string
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from queue_app import events, seating
from queue_app.models import Event, Seat, Section
from ticketing import money
from ticketing.errors import REDIS_ERRORS

# A map unit (seats in a row are 1 apart) on the seat map page, in rem.
SEAT_UNIT_REM = 1.75

# A numbered seat's state (queue_app/seating.py) as the seat map page shows it: its
# name in the page's markup, and its word.
SEAT_STATES = {
    seating.FREE: ("free", pgettext_lazy("seat state", "free")),
    seating.HELD: ("held", pgettext_lazy("seat state", "held")),
    seating.SOLD: ("sold", pgettext_lazy("seat state", "sold")),
    seating.BLOCKED: ("blocked", pgettext_lazy("seat state", "blocked")),
}

_SEAT_IDS_SEPARATOR = re.compile(r"[\s,]+")


def seat_drawing(seats: list[tuple[str, str, str, float, float, int]]) -> dict:
    """Where a numbered section's seats `(seat_id, row, label, x, y, state)` go on the
    page, in rem from the section's top left, with each row's name left of its first
    seat: the map's own coordinates, so that the operator sees the seats (and the
    aisles between them) as the map places them."""
    starts: dict[tuple[str, float], float] = {}
    for _seat_id, row, _label, x, y, _state in seats:
        starts[row, y] = min(x, starts.get((row, y), x))
    left = min(starts.values()) - 1  # room for the rows' names
    top = min(y for _row, y in starts)

    def at(x: float, y: float) -> dict[str, str]:
        return {"left": f"{(x - left) * SEAT_UNIT_REM:.2f}", "top": f"{(y - top) * SEAT_UNIT_REM:.2f}"}

    return {
        "width": f"{(max(seat[3] for seat in seats) - left + 1) * SEAT_UNIT_REM:.2f}",
        "height": f"{(max(seat[4] for seat in seats) - top + 1) * SEAT_UNIT_REM:.2f}",
        "rows": [{"row": row, **at(x - 1, y)} for (row, y), x in starts.items()],
        "seats": [
            {
                "id": seat_id,
                "label": label,
                "state": SEAT_STATES[state][0],
                "word": SEAT_STATES[state][1],
                **at(x, y),
            }
            for seat_id, _row, label, x, y, state in seats
        ],
    }


class SectionPriceForm(forms.Form):
    """A section's new price, one form a section on the seat map page."""

    section = forms.CharField(max_length=8, widget=forms.HiddenInput)
    price = forms.IntegerField(label=_("new price"), min_value=0, max_value=money.MAX_PRICE)

    def clean_price(self) -> int:
        # As the event's own price: a priced seat is held until paid, which needs a provider.
        price = self.cleaned_data["price"]
        if price and not settings.PAYMENTS_PROVIDER:
            raise ValidationError(
                _("No payment provider is set up (PAYMENTS_PROVIDER): this server sells free seats only.")
            )
        return price


class _SeatList(forms.Field):
    """The seats ticked on the map: checkboxes the page draws at each seat."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: object) -> list[str]:
        return [str(seat_id) for seat_id in value or []]


class SeatsForm(forms.Form):
    """Seats to block or release, named in the box or ticked on the map (or both)."""

    ids = forms.CharField(
        label=_("seat ids"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("Separated by commas or spaces, e.g. R-A-1, R-A-2."),
    )
    seats = _SeatList(required=False)
    action = forms.ChoiceField(choices=[("block", _("Block")), ("release", _("Release"))])

    def clean(self) -> dict:
        data = super().clean()
        typed = [seat_id for seat_id in _SEAT_IDS_SEPARATOR.split(data.get("ids", "")) if seat_id]
        data["seat_ids"] = list(dict.fromkeys([*typed, *data.get("seats", [])]))
        if not data["seat_ids"]:
            raise ValidationError(_("Name the seats: by id in the box, or ticked on the map."))
        return data


def _price_form(code: str, **kwargs: object) -> SectionPriceForm:
    # One form a section on the page: its fields' ids carry the section's code.
    return SectionPriceForm(auto_id=f"id_%s_{code}", **kwargs)


class SeatMapAdmin:
    """EventAdmin's seat map page (its URL is EventAdmin.get_urls')."""

    # --- The seat map page: prices per section, blocked seats -------------------------

    def seats_page(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The event's sections and numbered seats as Postgres has them (free, held,
        sold or blocked), a form per section for its price and one to block or release
        seats. Who may view the event sees it; a change needs the change permission.
        Plain forms, answered by a redirect once done: the page needs no script."""
        event = self._viewable(request, pk)
        price_form = seats_form = None
        if request.method == "POST":
            if not self.has_change_permission(request, event):
                raise PermissionDenied
            if "section" in request.POST:
                price_form = _price_form(request.POST["section"], data=request.POST)
                if self._price_change(request, event, price_form):
                    return redirect(request.path)
            else:
                seats_form = SeatsForm(request.POST)
                if self._seats_change(request, event, seats_form):
                    return redirect(request.path)
        context = self._seats_context(request, event, price_form, seats_form or SeatsForm())
        return render(request, "admin/queue_app/event/seats.html", context)

    def _seats_context(
        self, request: HttpRequest, event: Event, price_form: SectionPriceForm | None, seats_form: SeatsForm
    ) -> dict:
        sections = list(event.sections.order_by("position"))
        taken = import_string(settings.SEATS_TAKEN)(event.event_id)
        by_section: dict[int, list] = {section.pk: [] for section in sections}
        rows = (
            Seat.objects.filter(section__event=event)
            .order_by("section__position", "index")
            .values_list("section_id", "seat_id", "row", "label", "x", "y", "blocked")
        )
        for section_id, seat_id, row, label, x, y, blocked in rows:
            state = seating.BLOCKED if blocked else taken.get(seat_id, seating.FREE)
            by_section[section_id].append((seat_id, row, label, x, y, state))
        posted = price_form.data.get("section") if price_form else None
        shown = []
        for section in sections:
            seats = by_section[section.pk]
            blocked = sum(seat[5] == seating.BLOCKED for seat in seats)
            initial = {"section": section.code, "price": section.price}
            shown.append(
                {
                    "section": section,
                    "price": money.shown(section.price, event.currency),
                    "blocked": blocked,
                    "free": section.places - section.sold - blocked,
                    "form": price_form
                    if posted == section.code
                    else _price_form(section.code, initial=initial),
                    "drawing": seat_drawing(seats) if seats else None,
                }
            )
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "event": event,
            "title": gettext("%(event)s — seat map") % {"event": event},
            "sections": shown,
            "numbered": any(section["drawing"] for section in shown),
            "can_change": self.has_change_permission(request, event),
            "seats_form": seats_form,
            "ticked": set(seats_form.data.getlist("seats")) if seats_form.is_bound else set(),
            "states": list(SEAT_STATES.values()),
        }

    def _price_change(self, request: HttpRequest, event: Event, form: SectionPriceForm) -> bool:
        """Save the section's price and put it in Redis, where bookings read it: both or
        neither. A booking made before keeps its amount, which is the reservation's own."""
        if not form.is_valid():
            messages.error(request, gettext("The price was not changed: see its form below."))
            return False
        section = event.sections.filter(code=form.cleaned_data["section"]).first()
        if section is None:
            raise Http404
        price = form.cleaned_data["price"]
        try:
            with transaction.atomic():
                Section.objects.filter(pk=section.pk).update(price=price)
                events.event_publish(event)
        except REDIS_ERRORS:
            messages.error(request, gettext("Redis could not be reached, so nothing changed; try again."))
            return False
        done = gettext("%(section)s: %(price)s a seat, for bookings made from now on.") % {
            "section": section,
            "price": money.shown(price, event.currency),
        }
        self.message_user(request, done, messages.SUCCESS)
        return True

    def _seats_change(self, request: HttpRequest, event: Event, form: SeatsForm) -> bool:
        """Block or release the seats named (seating.seats_block: all or none), and say
        how many moved and which ones Redis left as they were."""
        if not form.is_valid():
            return False
        ids, block = form.cleaned_data["seat_ids"], form.cleaned_data["action"] == "block"
        # Seats already so: Redis leaves them as they are too, and that is no booking's doing.
        already = Seat.objects.filter(section__event=event, seat_id__in=ids, blocked=block)
        same = set(already.values_list("seat_id", flat=True))
        try:
            kept = seating.seats_block(event, ids, block=block)
        except seating.SeatMapError as refused:
            messages.error(request, self._seats_refusal(event, ids, refused))
            return False
        except REDIS_ERRORS:
            messages.error(request, gettext("Redis could not be reached, so nothing changed; try again."))
            return False
        moving = len(ids) - len(same)
        kept = [seat_id for seat_id in kept if seat_id not in same]
        if block:
            done = (
                gettext("%(n)s seat(s) blocked, %(same)s already were.")
                if same
                else gettext("%(n)s seat(s) blocked.")
            )
        else:
            done = (
                gettext("%(n)s seat(s) released, %(same)s were not blocked.")
                if same
                else gettext("%(n)s seat(s) released.")
            )
        self.message_user(request, done % {"n": moving, "same": len(same)}, messages.SUCCESS)
        if kept:
            held = gettext(
                "Redis left these as they were, held there by a booking not yet decided; "
                "try them again once it is: %(ids)s"
            )
            self.message_user(request, held % {"ids": ", ".join(kept)}, messages.WARNING)
        return True

    @staticmethod
    def _seats_refusal(event: Event, ids: list[str], refused: seating.SeatMapError) -> str:
        """Why seats_block changed nothing, in the operator's language: the seats that
        are not on the map, or those held or sold; else in seating's own words."""
        seats = Seat.objects.filter(section__event=event, seat_id__in=ids)
        known = set(seats.values_list("seat_id", flat=True))
        unknown = [seat_id for seat_id in ids if seat_id not in known]
        if unknown:
            return gettext("Nothing changed: the map has no seat %(ids)s.") % {"ids": ", ".join(unknown)}
        taken = import_string(settings.SEATS_TAKEN)(event.event_id)
        held = [seat_id for seat_id in ids if seat_id in taken]
        if held:
            return gettext("Nothing changed: a held or sold seat cannot be blocked (%(ids)s).") % {
                "ids": ", ".join(held)
            }
        return gettext("Nothing changed: %(reason)s") % {"reason": " ".join(refused.args)}
