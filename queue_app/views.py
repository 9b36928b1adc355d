"""Browser pages of the waiting room. The live parts (join, position, admission)
are the JSON API driven by static/js/waiting-room.js; these views render the frame."""

from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers, patch_cache_control
from django.utils.translation import gettext as _

from queue_app import draw, notify, services
from queue_app.events import events_seats_left
from queue_app.models import Draw, Event, commitment
from ticketing.errors import DomainError


def token_cookie(event_id: str) -> str:
    """The cookie that keeps a browser's place in line (beside localStorage)."""
    return f"queue_token_{event_id}"


def event_list(request: HttpRequest) -> HttpResponse:
    """The sales on offer with their seats left and scheduled starts, then those that
    closed lately (for as long as their line is kept: people who waited come back to
    see how it ended)."""
    now = timezone.now()
    recently = now - timedelta(seconds=settings.EVENT_PURGE_AFTER_SECONDS)
    events = sorted(
        Event.objects.filter(~Q(status=Event.Status.CLOSED) | Q(closed_at__gte=recently)).order_by(
            "created_at"
        ),
        key=lambda event: event.status == Event.Status.CLOSED,
    )
    seats_left = events_seats_left(events)
    for event in events:
        event.seats_left = seats_left[event.event_id]
        event.starts_at = event.opens_at if event.opens_at and event.opens_at > now else None
    context = {
        "events": events,
        # `make run`'s first page says where the operators' side is, until an
        # operator's account exists (in production too: a fresh deployment is where
        # the hint is wanted, and it goes once the operator has signed up).
        "no_operator": not get_user_model().objects.filter(is_superuser=True, is_active=True).exists(),
    }
    return render(request, "queue_app/event_list.html", context)


def waiting_room(request: HttpRequest, event_id: str) -> HttpResponse:
    event = get_object_or_404(Event, event_id=event_id)
    config = {
        "eventId": event.event_id,
        "cookie": token_cookie(event.event_id),
        "api": {
            "join": reverse("queue-join"),
            "rejoin": reverse("queue-rejoin"),
            "leave": reverse("queue-leave"),
            "poll": reverse("status-poll"),
            "challenge": reverse("queue-challenge"),
            "signedReceipt": reverse("queue-draw-signed-receipt"),
        },
        "bookUrl": reverse("book", args=[event.event_id]),
        "confirmationUrl": reverse("confirmation", args=[event.event_id, "RID"]),
        # Proof of work at join: the page solves it in the background, with the
        # vendored ALTCHA widget (loaded by the template only when asked, and by the
        # script should the event start asking while the page is open).
        "proofOfWork": event.proof_of_work > 0,
        "widget": static("vendor/altcha/altcha.min.js"),
        "requireAccount": event.require_account,
        "drawUrl": reverse("draw-page", args=[event.event_id]),
        "signedIn": request.user.is_authenticated,
        "loginUrl": reverse("login") + "?next=" + quote(request.path),
        # A signed-in account whose email address must be confirmed first: told so
        # before it tries (a join would answer EMAIL_UNCONFIRMED).
        "mustConfirm": request.user.is_authenticated and not services.account_may_hold_place(request.user.pk),
        "confirmUrl": reverse("confirm-email") + "?next=" + quote(request.path),
        # A presale's end (ms), said beside the code's form; None: no presale.
        "presaleUntil": int(event.public_from.timestamp() * 1000) if event.public_from else None,
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
            "soldOut": _("Sold out"),
            "noSeatFree": _("No seat free right now"),
            "onHold": _("%(n)s seats are being paid for and may come back: stay on this page."),
            "rateLimited": _("Too many requests. Retrying in a moment…"),
            "checking": _("Checking that you are a person… (this takes a second or two)"),
            "checkFailed": _("The check did not pass. Trying again…"),
            "signIn": _("Sign in to join this line."),
            "signInLink": _("Sign in"),
            "confirmEmail": _("Confirm your email address to join this line."),
            "confirmEmailLink": _("Confirm your email address"),
            "preQueue": _("You are in. The order is drawn at %(time)s."),
            "countdown": _("Starts in %(time)s"),
            "drawing": _("Drawing the order of everyone who came before the start…"),
            "drawnPosition": _("Drawn position %(n)s"),
            "copied": _("Copied"),
            "copyFailed": _("Select it and copy it by hand."),
            "presaleRequired": _("This sale is in its presale. Enter your presale code to join the line."),
            "presaleInvalid": _("This code is not valid for this sale. Check it and try again."),
            "presaleUsedUp": _("This code has been used as many times as it allows."),
            "presaleMalformed": _("A presale code is 10 letters and digits, such as ABCDE-FGH23."),
            "presaleOpens": _("Everyone may join from %(time)s."),
            "rejecting": _("This line is not taking new people right now. This page will try again."),
        },
    }
    config["notify"] = notify_config(request, event)
    # The commitment to the draw's seed, shown in the pre-queue for people to keep:
    # only a copy kept from before the start shows that the seed published after it
    # is the one chosen before (the draw page's own copy is the service's word). A
    # start is scheduled only for a line nobody joined, so a page that joins the
    # pre-queue was rendered with the start's commitment.
    found = Draw.objects.filter(event=event).first() if event.opens_at else None
    context = {"event": event, "config": config, "commitment": found.commitment if found else ""}
    response = render(request, "queue_app/waiting_room.html", context)
    if config["notify"]["place"]:
        add_never_cache_headers(response)  # it carries a token: for this browser only
    elif request.user.is_authenticated:
        patch_cache_control(response, private=True)  # the account's name, its CSRF token
    else:
        # The same page for everyone (per language): the person's token lives in the
        # browser (localStorage, the cookie), and the page asks the API for the rest.
        patch_cache_control(response, public=True, max_age=settings.WAITING_ROOM_MAX_AGE)
    return response


def notify_config(request: HttpRequest, event: Event) -> dict:
    """Notify me's part of the waiting room (static/js/waiting-room.js): its endpoint,
    its words, and the place a mail's signed link brings back (queue_app/notify.py),
    which the page keeps as its own; or, for a link that does not verify, a word
    saying so (the page goes on as it would without it)."""
    signed = request.GET.get(notify.LINK_PARAMETER)
    place = notify.place_of_link(event.event_id, signed) if signed else None
    return {
        "api": reverse("queue-notify"),
        "parameter": notify.LINK_PARAMETER,
        "place": place or "",
        "badLink": bool(signed) and place is None,
        "strings": {
            "asked": _("We will email %(email)s when your turn is near."),
            "sent": _("We emailed %(email)s: your turn is near."),
            "badEmail": _("Enter an email address, such as name@example.com."),
            "notWaiting": _("Your place is not waiting in line any more: there is nothing to tell you."),
            "tooFast": _("Too many requests. Try again in a moment."),
            "notSaved": _("We could not save your email just now. Try again in a moment."),
            "badLink": _(
                "This link could not bring back your place: it is not valid, or too old. "
                "If this browser kept your place, you still have it."
            ),
            "alertsOn": _("This page will show a notification and play a sound when it's your turn."),
            "soundOnly": _(
                "Notifications are blocked in this browser: this page will play a sound when it's your turn."
            ),
            "alertTitle": _("It's your turn!"),
            "alertBody": _("%(event)s: you may book now.") % {"event": event},
        },
    }


def draw_page(request: HttpRequest, event_id: str) -> HttpResponse:
    """The draw as anyone can check it: the commitment before the start; then the
    seed, the figures, the list, and a receipt's position (?receipt=)."""
    event = get_object_or_404(Event, event_id=event_id)
    context: dict = {"event": event}
    try:
        context["draw"] = published = draw.published(event_id=event_id)
        if published.seed is not None:
            # Computed here from the seed revealed, beside the commitment published
            # before the start: a person compares both with the copy they kept.
            context["seed_commitment"] = commitment(bytes.fromhex(published.seed))
            context["commitments_match"] = context["seed_commitment"] == published.commitment
        wanted = request.GET.get("receipt", "").strip().lower()
        if wanted:
            context["asked"] = wanted
            context["found"] = draw.published(event_id=event_id, receipt=draw.parse_receipt(wanted))
    except DomainError as exc:
        if exc.code in ("NO_DRAW", "EVENT_NOT_FOUND"):
            context["draw"] = None
        else:
            context["lookup_error"] = {
                "RECEIPT_NOT_FOUND": _("No place of this draw has this receipt."),
                "NOT_DRAWN": _("The order is drawn at the start: look again then."),
            }.get(exc.code, _("A receipt is 16 characters: digits and the letters a to f."))
    return render(request, "queue_app/draw.html", context)


def verify_script(request: HttpRequest) -> FileResponse:
    """docs/verify_draw.py, for anyone to check a draw with nothing of this service."""
    path = Path(settings.BASE_DIR) / "docs" / "verify_draw.py"
    return FileResponse(
        path.open("rb"), content_type="text/x-python; charset=utf-8", filename="verify_draw.py"
    )
