"""An event's seat map as a browser draws it: sections, prices and where each seat
is (GET /api/events/<id>/seat-map). It is served apart from which seats are free
because it changes only when the map is replaced (queue_app/seating.py), so a
browser keeps it for minutes and asks again only for the seats' state, a bit per
seat in the seats' `index` order, which this layout gives: a seat's index is its
running position across its section's rows."""

from itertools import groupby

from django.utils.translation import gettext as _

from queue_app.models import Event, Seat

# The id of the one section of an event without a map.
GENERAL_ADMISSION = "GA"


def seat_map_layout(event: Event) -> dict:
    """The event's sections in the map's order, each numbered one with its rows of
    seats (labels and x, in index order; an aisle is a gap in x, not a seat). An
    event without a map is one unnumbered section of its total seats, as bookings
    count it. Two queries: the sections, then every seat at once."""
    sections = list(event.sections.order_by("position"))
    if not sections:
        return {
            "eventId": event.event_id,
            "currency": event.currency,
            "sections": [
                {
                    "id": GENERAL_ADMISSION,
                    "name": _("General admission"),
                    "price": event.price,
                    "places": event.total_seats,
                    "numbered": False,
                    "box": None,
                    "rows": [],
                }
            ],
        }
    rows: dict[int, list[dict]] = {section.pk: [] for section in sections}
    if any(section.numbered for section in sections):
        seats = (
            Seat.objects.filter(section__event=event)
            .order_by("section__position", "index")
            .values_list("section_id", "row", "y", "label", "x")
        )
        for (section_id, row, y), run in groupby(seats, key=lambda seat: seat[:3]):
            in_row = list(run)
            labels, xs = [seat[3] for seat in in_row], [seat[4] for seat in in_row]
            rows[section_id].append({"row": row, "y": y, "labels": labels, "xs": xs})
    return {
        "eventId": event.event_id,
        "currency": event.currency,
        "sections": [
            {
                "id": section.code,
                "name": section.name,
                "price": section.price,
                "places": section.places,
                "numbered": section.numbered,
                "box": section.box,
                "rows": rows[section.pk],
            }
            for section in sections
        ],
    }
