"""The booking page (for a token in its active window), the checkout of a priced
event's hold, and each booking's own page."""

import json
import time
import uuid
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from booking_app import checkout, forms, mail, services
from booking_app.models import Reservation
from queue_app import services as queue
from queue_app import tokens
from queue_app.crowd_messages import message_text
from queue_app.layout import seat_map_layout
from queue_app.models import Event
from queue_app.views import token_cookie
from ticketing import money, store
from ticketing.errors import DomainError

MESSAGES = {
    "INSUFFICIENT_SEATS": _("Not enough seats are left for that many. Choose fewer."),
    "EVENT_CLOSED": _("This sale has closed."),
    "BOOKING_NOT_SAVED": _("Your booking could not be saved and nothing was charged. Please try again."),
    "BOOKING_PENDING": _("Your booking is being confirmed. Check the waiting room in a moment."),
    "SEAT_CAP": _("You have reached the most seats one buyer may book for this event. Choose fewer."),
    "ACCOUNT_REQUIRED": _("Sign in to book on this event."),
}


def _token(request: HttpRequest, event_id: str) -> tokens.Token | None:
    """The browser's token for the event, if this service issued it."""
    try:
        token = tokens.parse_token(request.COOKIES.get(token_cookie(event_id)))
        tokens.issued(event_id, token)
    except DomainError:
        return None
    return token


def _buyer(request: HttpRequest) -> dict[str, str]:
    """A signed-in account's name and email, for the form to start with: the person
    books in a hurry, against the window's countdown."""
    user = request.user
    if not user.is_authenticated:
        return {}
    return {"buyer_name": user.get_full_name() or user.get_username(), "buyer_email": user.email}


def book(request: HttpRequest, event_id: str) -> HttpResponse:
    """The booking form of a token in its active window. On an event with a seat map
    the buyer ticks seats (the map's script ticks them too) or asks for the best in
    a section; a seat someone took meanwhile is named, and the rest stay ticked."""
    event = get_object_or_404(Event, event_id=event_id)
    token = _token(request, event_id)
    if token is None:
        return redirect("waiting-room", event_id)
    state = queue.queue_poll(event_id=event_id, token=token)
    if state.status == "BOOKED":
        return redirect("confirmation", event_id, state.reservation_id)
    # A booking this token was told is pending was not saved: its window, while it
    # lasts, is theirs to book again.
    not_saved = state.status == "NOT_SAVED" and state.active_expires_at is not None
    if state.status != "ACTIVE" and not not_saved:
        return redirect("waiting-room", event_id)  # it shows why: waiting, expired, closed
    if state.remaining_seats <= 0:
        return redirect("waiting-room", event_id)  # it says sold out, and watches for seats or the close
    most = max(1, min(event.max_seats_per_booking, state.remaining_seats))
    layout = seat_map_layout(event) if event.sections.exists() else None
    if layout is None:
        form = forms.BookingForm(request.POST or None, most=most, initial=_buyer(request))
    else:
        form = forms.SeatBookingForm(request.POST or None, most=most, layout=layout, initial=_buyer(request))
    error = "BOOKING_NOT_SAVED" if not_saved and request.method != "POST" else None
    error_message, taken = "", set[str]()
    if request.method == "POST" and form.is_valid():
        try:
            booked = services.booking_reserve(
                event_id=event_id,
                token=token,
                buyer_name=form.cleaned_data["buyer_name"],
                buyer_email=form.cleaned_data["buyer_email"],
                user_id=request.user.pk if request.user.is_authenticated else None,
                **form.choice(),
            )
        except DomainError as exc:
            if exc.code == "BOOKING_PENDING":  # decided later: its mail waits for it
                rid, email = exc.details["reservationId"], form.cleaned_data["buyer_email"]
                mail.confirmation_soon(request, rid, buyer_email=email, pending=True)
            if exc.code in ("ALREADY_BOOKED", "BOOKING_PENDING"):
                return redirect("confirmation", event_id, exc.details["reservationId"])
            if exc.code in ("NOT_ACTIVE", "SOLD_OUT"):
                return redirect("waiting-room", event_id)
            error = exc.code
            if layout is not None:
                error_message = forms.refused(exc, form)
                taken = set(exc.details.get("seats", ())) if exc.code == "SEAT_TAKEN" else set()
        else:
            if booked.status == Reservation.Status.HELD:
                return redirect("checkout", mail.link_token(booked.reservation_id))
            email = form.cleaned_data["buyer_email"]
            mail.confirmation_soon(request, booked.reservation_id, buyer_email=email)
            return redirect("confirmation", event_id, booked.reservation_id)
    context = {
        "event": event,
        "form": form,
        "state": state,
        "error": error,
        "error_message": error_message or MESSAGES.get(error, ""),
        "now_ms": store.now_ms(event.event_id),
        "price": money.shown(event.price, event.currency) if event.price else "",
        # The operator's message to the crowd, as the poll above carried it, and the
        # poll that keeps it current while the person books (static/js/crowd-message.js).
        "crowd_message": message_text(state.message, translation.get_language()),
        "crowd_poll": reverse("status-poll") + "?" + urlencode({"token": token.text, "eventId": event_id}),
    }
    if layout is not None:
        context.update(forms.seat_context(event, layout, form, most, taken))
    return render(request, "booking_app/book.html", context, status=409 if error in forms.CONFLICTS else 200)


def confirmation(request: HttpRequest, event_id: str, reservation_id: str) -> HttpResponse:
    token = _token(request, event_id)
    try:
        rid = uuid.UUID(reservation_id)
    except ValueError:
        raise Http404 from None
    if token is None:
        raise Http404  # only the browser that booked sees the details
    reservation = (
        Reservation.objects.select_related("event")
        .exclude(status=Reservation.Status.VOID)
        .filter(reservation_id=rid, token=token.text, event_id=event_id)
        .first()
    )
    if reservation is None:
        # Seats held in Redis, the row not decided yet (Postgres was away): say so
        # until reconcile has written it.
        state = queue.queue_poll(event_id=event_id, token=token)
        if state.status == "BOOKED" and state.reservation_id == str(rid):
            context = {"pending": True, "reservation_id": rid}
            return render(request, "booking_app/confirmation.html", context, status=202)
        if state.status == "NOT_SAVED" and state.reservation_id == str(rid):
            return redirect("book" if state.active_expires_at else "waiting-room", event_id)
        raise Http404
    return _booking(request, reservation)


def _booking(request: HttpRequest, reservation: Reservation, **context) -> HttpResponse:
    signed = mail.link_token(reservation.reservation_id)
    paid, currency = reservation.amount, reservation.currency
    share = checkout.refund_share(paid, reservation.event.refund_percent)
    refunded = reservation.refunded_amount
    context = {
        "reservation": reservation,
        "link": reverse("booking-page", args=[signed]),
        "checkout_link": reverse("checkout", args=[signed]),
        "amount": money.shown(paid, currency) if paid else "",
        # What cancelling would give back, and what was, when that is not all of it.
        "cancel_refund": money.shown(share, currency) if share != paid else "",
        "refunded": money.shown(refunded, currency) if refunded is not None and refunded != paid else "",
        **context,
    }
    return render(request, "booking_app/confirmation.html", context)


def _provider_reply(request: HttpRequest) -> dict[str, str] | None:
    """What the buyer's payment step sent back, for the provider to act on: the test
    provider's form (POST, outcome pay or decline), or Toss Payments' widget, which
    comes back to this page with paymentKey, orderId and amount. None when the page
    is only shown; {} for a reply that is not one."""
    if request.method == "POST":
        outcome = request.POST.get("outcome")
        return {"outcome": outcome} if outcome in ("pay", "decline") else {}
    if "paymentKey" in request.GET:
        return {k: request.GET.get(k, "") for k in ("paymentKey", "orderId", "amount")}
    return None


# What the checkout page says when a payment did not go through.
PAYMENT_MESSAGES = {
    "PAYMENT_NOT_MADE": _(
        "The payment was not completed and nothing was charged; your seats are still held."
    ),
    "PAYMENT_UNAVAILABLE": _(
        "The payment could not be completed just now; your seats are still held. Try again."
    ),
}


@require_http_methods(["GET", "POST"])
def checkout_page(request: HttpRequest, signed: str) -> HttpResponse:
    """A held booking's checkout, reached by its signed link (the booking answer's
    checkoutUrl): the amount, the time left, and the provider's step. The built-in
    test provider's step is a Pay and a Decline button. Any other state of the
    booking is shown on its own page."""
    rid = mail.reservation_id_of(signed)
    row = Reservation.objects.select_related("event").filter(reservation_id=rid).first()
    if rid is None or row is None or row.status == Reservation.Status.VOID:
        raise Http404
    error = None
    reply = _provider_reply(request)
    if reply is not None and row.status == Reservation.Status.HELD:
        if not reply:
            return HttpResponse(status=400)
        try:
            # The confirmation is mailed by whoever confirms the booking: with this
            # request's address and language when it is this payment.
            site, language = request.build_absolute_uri("/").rstrip("/"), translation.get_language() or ""
            checkout.hold_pay(reservation_id=rid, reply=reply, site=site, language=language)
        except DomainError as exc:
            if exc.code not in PAYMENT_MESSAGES:
                return redirect("booking-page", signed)  # declined, run out: its page says so
            error = exc.code
        else:
            return redirect("booking-page", signed)
    if row.status != Reservation.Status.HELD:
        return redirect("booking-page", signed)
    if request.GET.get("code"):  # the widget's fail URL: nothing was taken, the hold stays
        error = "PAYMENT_NOT_MADE"
    context = {
        "reservation": row,
        "provider": settings.PAYMENTS_PROVIDER,
        "widget": {
            "clientKey": settings.TOSS_CLIENT_KEY,
            "orderId": str(row.reservation_id),
            "orderName": f"{row.event} x {row.seat_count}"[:100],
            "amount": row.amount,
            "customerEmail": row.buyer_email,
            "customerName": row.buyer_name,
            "successUrl": request.build_absolute_uri(request.path),
            "failUrl": request.build_absolute_uri(request.path),
        },
        "amount": money.shown(row.amount, row.currency),
        "expires_ms": int(row.hold_expires_at.timestamp() * 1000),
        "now_ms": int(time.time() * 1000),
        "link": reverse("booking-page", args=[signed]),
        "error": error,
        "error_message": PAYMENT_MESSAGES.get(error, ""),
    }
    return render(
        request, "booking_app/checkout.html", context, status=503 if error == "PAYMENT_UNAVAILABLE" else 200
    )


@require_http_methods(["GET", "POST"])
def booking_page(request: HttpRequest, signed: str) -> HttpResponse:
    """The booking's page, reached by the signed link in the confirmation email:
    the link is the buyer's proof, wherever the mail is read. A POST cancels."""
    rid = mail.reservation_id_of(signed)
    reservation = Reservation.objects.select_related("event").filter(reservation_id=rid).first()
    if rid is None or reservation is None or reservation.status == Reservation.Status.VOID:
        raise Http404
    if request.method == "POST":
        try:
            reservation = checkout.booking_end(reservation_id=rid, by_buyer=True)
        except DomainError:  # ALREADY_CANCELLED (twice, or in another tab): the page shows it is
            reservation.refresh_from_db()
            return _booking(request, reservation)
        return _booking(request, reservation, just_cancelled=True)
    return _booking(request, reservation)


@csrf_exempt
@require_http_methods(["POST"])
def toss_webhook(request: HttpRequest) -> HttpResponse:
    """Toss Payments' notifications (PAYMENT_STATUS_CHANGED). Nothing in the body is
    believed but the payment's key: checkout reads the payment back from Toss. Any
    other notification, or a body that is not one, is acknowledged and ignored, so
    that Toss does not send it again and again."""
    try:
        sent = json.loads(request.body)
        key = sent["data"]["paymentKey"] if sent.get("eventType") == "PAYMENT_STATUS_CHANGED" else None
    except (ValueError, KeyError, TypeError, AttributeError):
        key = None
    if not isinstance(key, str) or not key or settings.PAYMENTS_PROVIDER != "toss":
        return JsonResponse({"success": True, "data": {"done": "IGNORED"}})
    try:
        done = checkout.payment_notified(key)
    except DomainError as exc:  # Toss could not be asked: a 503, so that it sends it again later
        return JsonResponse(exc.body(), status=exc.status)
    return JsonResponse({"success": True, "data": {"done": done}})
