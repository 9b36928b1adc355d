"""The support lookup, a page of the event's admin: an operator types what a person
can tell them (a token or its first digits, a receipt, an account, an email address)
and sees each place it names, with its number, status and history
(queue_app/support.py). Looking up changes nothing, so whoever may view the event
may look people up."""

from datetime import datetime

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from queue_app import support
from queue_app.models import Event
from ticketing.errors import REDIS_ERRORS, DomainError

# A place's state (lua/place_state.lua) in the operator's words.
STATES = {
    "PRE_QUEUE": pgettext_lazy("place state", "in the pre-queue"),
    "DRAWING": pgettext_lazy("place state", "being drawn"),
    "WAITING": pgettext_lazy("place state", "waiting"),
    "ACTIVE": pgettext_lazy("place state", "active (may book)"),
    "UNCLAIMED": pgettext_lazy("place state", "turn passed (did not come back)"),
    "EXPIRED": pgettext_lazy("place state", "window over"),
    "LEFT": pgettext_lazy("place state", "left the line"),
    "BOOKED": pgettext_lazy("place state", "booked"),
    "NOT_SAVED": pgettext_lazy("place state", "booking not saved"),
    "NOT_FOUND": pgettext_lazy("place state", "not a place of this line"),
}

_EVENT_STATUSES = dict(Event.Status.choices)

# How a place was found (queue_app/support.py).
FOUND_BY = {
    support.TOKEN: _("token"),
    support.PREFIX: _("token's first digits"),
    support.RECEIPT: _("receipt"),
    support.ACCOUNT: _("account"),
    support.EMAIL: _("buyer's email"),
    support.NOTIFY: _("notify-me email"),
}


class SupportLookupForm(forms.Form):
    # Its length is the lookup's to refuse, with the others' reasons (support.parse_query).
    q = forms.CharField(
        label=_("Token, receipt, account or email"),
        required=False,
        widget=forms.TextInput(attrs={"size": 48, "autofocus": True}),
        help_text=_(
            "A whole token, or its first 8 or more hex digits; a pre-queue receipt (16 hex digits); "
            "an account's username or email address; a buyer's email address."
        ),
    )


def history(place: support.Place) -> list[dict]:
    """The place's steps, each `{kind, name, when, derived, text, url}`: joined,
    admitted, claimed, booked."""
    steps = [_joined(place), _admitted(place), _claimed(place)]
    steps += _booked(place)
    return steps


def _step(
    kind: str, name: str, text: str, when: datetime | None = None, derived: bool = False, url: str = ""
) -> dict:
    return {"kind": kind, "name": name, "text": text, "when": _time(when), "derived": derived, "url": url}


def _joined(place: support.Place) -> dict:
    name = gettext("joined")
    if not place.signed:
        return _step("joined", name, gettext("This token was not issued by this service for this event."))
    if not place.of_line:
        said = gettext(
            "Arrival number %(n)s of another line: the event's line was rebuilt since, or the number was "
            "issued again to someone else after Redis came back from an older copy."
        )
        return _step("joined", name, said % {"n": f"{place.number:,}"})
    said = gettext("Arrival number %(n)s; the line keeps no time of arrival.") % {"n": f"{place.number:,}"}
    if place.prequeue:
        said += " " + gettext("In the scheduled start's pre-queue, receipt %(receipt)s.") % {
            "receipt": place.receipt
        }
        if place.place:
            said += " " + gettext("Drawn to place %(p)s.") % {"p": f"{place.place:,}"}
    return _step("joined", name, said)


def _admitted(place: support.Place) -> dict:
    name = gettext("admitted")
    if not place.of_line:
        return _step("admitted", name, "–")
    if place.status == "LEFT":
        return _step("admitted", name, gettext("No: the person left the line before their turn."))
    if not place.admitted:
        if place.status == "WAITING":
            said = gettext("Not yet: rank %(rank)s of %(waiting)s waiting.")
            return _step(
                "admitted", name, said % {"rank": f"{place.rank:,}", "waiting": f"{place.waiting:,}"}
            )
        return _step("admitted", name, gettext("Not yet: the pre-queue is admitted after its draw."))
    a = place.admission
    if a is None:
        said = gettext(
            "Yes. Its admission is no longer in the log (the log drops an admission once its window is over)."
        )
        return _step("admitted", name, said)
    said = gettext(
        "Yes, with places %(first)s–%(last)s (%(n)s people); their active window ends at %(ends)s."
    ) % {
        "first": f"{a.first:,}",
        "last": f"{a.last:,}",
        "n": f"{a.admitted:,}",
        "ends": _time(a.window_ends_at),
    }
    return _step("admitted", name, said, a.admitted_at, derived=True)


def _claimed(place: support.Place) -> dict:
    name = gettext("came back")
    claim = place.claim
    if not place.admitted:
        return _step("claimed", name, "–")
    if claim is None:
        return _step(
            "claimed", name, gettext("No claim time applied (or its admission is no longer in the log).")
        )
    said = {
        "CLAIMED": gettext("Yes, in time (by %(deadline)s)."),
        "PASSED": gettext("No: not back by %(deadline)s, so the turn went to the next person."),
        "PENDING": gettext("Not yet; has until %(deadline)s."),
    }[claim.outcome]
    return _step("claimed", name, said % {"deadline": _time(claim.deadline)})


def _booked(place: support.Place) -> list[dict]:
    name = gettext("booked")
    steps = []
    for b in place.bookings:
        said = gettext("Reservation %(id)s: %(status)s, %(seats)s seat(s).") % {
            "id": b.reservation_id,
            "status": b.status_label,
            "seats": b.seat_count,
        }
        url = reverse("admin:booking_app_reservation_change", args=[b.pk])
        steps.append(_step("booked", name, said, b.created_at, url=url))
    known = {b.reservation_id for b in place.bookings}
    if place.booking_mark and place.booking_mark not in known:
        said = (
            gettext(
                "Redis says reservation %(id)s was not saved: the person may book again "
                "while their window lasts."
            )
            if place.status == "NOT_SAVED"
            else gettext(
                "Redis marks reservation %(id)s, which Postgres does not have yet (it is being saved)."
            )
        )
        steps.append(_step("booked", name, said % {"id": place.booking_mark}))
    if not steps:
        said = (
            gettext("Its place booked, and that booking was taken back since.")
            if place.booked_place
            else gettext("No.")
        )
        steps.append(_step("booked", name, said))
    return steps


def _time(at: datetime | None) -> str:
    """A time to the second, in the site's time zone: claim times are seconds long."""
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S") if at else ""


def shown(place: support.Place) -> dict:
    """A place as a row of the results."""
    return {
        "place": place,
        "found_by": ", ".join(str(FOUND_BY.get(way, way)) for way in place.found_by),
        "state": STATES.get(place.status, place.status),
        "event_status": _EVENT_STATUSES.get(place.event_status, place.event_status),
        "history": history(place),
    }


class SupportAdmin:
    """EventAdmin's support lookup page (its URL is EventAdmin.get_urls')."""

    def support_page(self, request: HttpRequest, pk: int) -> HttpResponse:
        """A search box and, once asked, the places found. A GET: a lookup is a read,
        and its URL can be handed to a colleague."""
        event = self._viewable(request, pk)
        form = SupportLookupForm(request.GET if "q" in request.GET else None)
        lookup, error, notes = None, None, []
        if form.is_bound and form.is_valid():
            try:
                lookup = support.place_lookup(event, form.cleaned_data["q"])
            except DomainError as refusal:
                error = (
                    gettext("This event has no line in Redis (not published, or wiped).")
                    if refusal.code == "EVENT_NOT_FOUND"
                    else refusal.message
                )
            except REDIS_ERRORS:
                error = gettext("Redis could not be reached, so nothing was looked up; try again.")
        if lookup is not None:
            if not lookup.places:
                notes.append(gettext("Nothing found for “%(query)s”.") % {"query": lookup.query.text})
            if lookup.query.short:
                notes.append(
                    gettext("A token's first digits are looked up from %(n)s hex digits on.")
                    % {"n": support.MIN_PREFIX}
                )
            if lookup.more:
                notes.append(
                    gettext(
                        "More than %(n)s places match; the first %(n)s are shown: type more of the token."
                    )
                    % {"n": support.MAX_FOUND}
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "event": event,
            "title": gettext("%(event)s — support lookup") % {"event": event},
            "form": form,
            "error": error,
            "notes": notes,
            "places": [shown(place) for place in lookup.places] if lookup else [],
            "looked_up": lookup is not None,
        }
        return render(request, "admin/queue_app/event/support.html", context)
