"""Browser pages of the waiting room. The live parts (join, position, admission)
are the JSON API driven by static/js/waiting-room.js; these views render the frame."""

from urllib.parse import quote

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.translation import gettext as _

from queue_app.models import Event


def token_cookie(event_id: str) -> str:
    """The cookie that keeps a browser's place in line (beside localStorage)."""
    return f"queue_token_{event_id}"


def event_list(request: HttpRequest) -> HttpResponse:
    events = Event.objects.exclude(status=Event.Status.CLOSED).order_by("created_at")
    return render(request, "queue_app/event_list.html", {"events": events})


def waiting_room(request: HttpRequest, event_id: str) -> HttpResponse:
    event = get_object_or_404(Event, event_id=event_id)
    config = {
        "eventId": event.event_id,
        "cookie": token_cookie(event.event_id),
        "api": {
            "join": reverse("queue-join"),
            "rejoin": reverse("queue-rejoin"),
            "poll": reverse("status-poll"),
            "challenge": reverse("queue-challenge"),
        },
        "bookUrl": reverse("book", args=[event.event_id]),
        "confirmationUrl": reverse("confirmation", args=[event.event_id, "RID"]),
        # Proof of work at join: the page solves it in the background, with the
        # vendored ALTCHA widget (loaded by the template only when asked, and by the
        # script should the event start asking while the page is open).
        "proofOfWork": event.proof_of_work > 0,
        "widget": static("vendor/altcha/altcha.min.js"),
        "requireAccount": event.require_account,
        "signedIn": request.user.is_authenticated,
        "loginUrl": reverse("login") + "?next=" + quote(request.path),
        "strings": {
            "joining": _("Joining the line…"),
            "position": _("You are number %(rank)s in line"),
            "ahead": _("%(n)s ahead of you"),
            "behind": _("%(n)s behind you"),
            "eta": _("Estimated wait: %(time)s"),
            "etaUnknown": _("Estimated wait: calculating…"),
            "minutes": _("%(n)s min"),
            "seconds": _("%(n)s s"),
            "seats": _("%(n)s seats left"),
            "admitted": _("It's your turn! Taking you to booking…"),
            "paused": _("The sale is paused. You keep your place in line."),
            "networkError": _("We could not reach the waiting room. Retrying…"),
            "rateLimited": _("Too many requests. Retrying in a moment…"),
            "checking": _("Checking that you are a person… (this takes a second or two)"),
            "checkFailed": _("The check did not pass. Trying again…"),
            "tooManyPlaces": _("You already hold as many places as this address may."),
            "signIn": _("Sign in to join this line."),
            "signInLink": _("Sign in"),
        },
    }
    return render(request, "queue_app/waiting_room.html", {"event": event, "config": config})
