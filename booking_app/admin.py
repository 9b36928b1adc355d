import csv
import datetime
import uuid

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from booking_app import checkout
from booking_app.models import Reservation
from ticketing.errors import DomainError

# The export's columns, in order.
EXPORTED = (
    "reservation_id",
    "event_id",
    "status",
    "seat_count",
    "amount",
    "currency",
    "payment_id",
    "buyer_name",
    "buyer_email",
    "created_at",
    "hold_expires_at",
    "paid_at",
    "released_at",
    "cancelled_at",
    "refunded_at",
    "refunded_amount",
)


def _cell(value: object) -> str:
    """A value as a cell; text a spreadsheet would run as a formula (=, +, -, @)
    is quoted, since names and emails are the buyers' own."""
    if value is None:
        return ""
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).isoformat()
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = (
        "reservation_id",
        "event",
        "seat_count",
        "status",
        "amount",
        "refunded_amount",
        "payment_id",
        "buyer_name",
        "buyer_email",
        "created_at",
        "published_at",
    )
    list_filter = ("status", "event")
    search_fields = ("reservation_id", "token", "buyer_email", "buyer_name", "payment_id")
    readonly_fields = [f.name for f in Reservation._meta.fields]
    actions = ["cancel", "export_csv"]

    @admin.action(permissions=["view"], description=_("Export the selected reservations (CSV)"))
    def export_csv(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse:
        """The selection as a spreadsheet reads it: one row each, amounts in the
        currency's minor unit, times in ISO 8601 (UTC)."""
        answer = HttpResponse(content_type="text/csv; charset=utf-8")
        answer["Content-Disposition"] = 'attachment; filename="reservations.csv"'
        rows = csv.writer(answer)
        rows.writerow(EXPORTED)
        for row in queryset.order_by("created_at").iterator(chunk_size=2000):
            rows.writerow(_cell(getattr(row, name)) for name in EXPORTED)
        return answer

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # reservations come from the booking flow only

    def has_delete_permission(self, request: HttpRequest, obj: Reservation | None = None) -> bool:
        return False  # cancel instead: deleting would lose the seats' history

    def get_search_results(self, request, queryset, search_term):
        # token and reservation_id are UUIDs: search them exactly, not as text.
        try:
            value = uuid.UUID(search_term.strip())
        except ValueError:
            return super().get_search_results(request, queryset, search_term)
        return queryset.filter(reservation_id=value) | queryset.filter(token=value), False

    @admin.action(
        permissions=["change"], description=_("Cancel the selected reservations (seats go back on sale)")
    )
    def cancel(self, request: HttpRequest, queryset: QuerySet) -> None:
        done = 0
        for reservation in queryset:
            try:
                checkout.booking_end(reservation_id=reservation.reservation_id)
                done += 1
            except DomainError as exc:
                # The one refusal an operator meets here, in their words; anything
                # else as the service said it.
                said = gettext("This reservation was already cancelled.")
                said = said if exc.code == "ALREADY_CANCELLED" else exc.message
                self.message_user(request, f"{reservation.reservation_id}: {said}", messages.WARNING)
        self.message_user(request, gettext("Cancelled %(n)s reservation(s).") % {"n": done}, messages.SUCCESS)
