import uuid

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from booking_app import services
from booking_app.models import Reservation
from ticketing.errors import DomainError


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = (
        "reservation_id",
        "event",
        "seat_count",
        "status",
        "buyer_name",
        "buyer_email",
        "created_at",
        "published_at",
    )
    list_filter = ("status", "event")
    search_fields = ("reservation_id", "token", "buyer_email", "buyer_name")
    readonly_fields = [f.name for f in Reservation._meta.fields]
    actions = ["cancel"]

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
                services.booking_cancel(reservation_id=reservation.reservation_id)
                done += 1
            except DomainError as exc:
                # The one refusal an operator meets here, in their words; anything
                # else as the service said it.
                said = gettext("This reservation was already cancelled.")
                said = said if exc.code == "ALREADY_CANCELLED" else exc.message
                self.message_user(request, f"{reservation.reservation_id}: {said}", messages.WARNING)
        self.message_user(request, gettext("Cancelled %(n)s reservation(s).") % {"n": done}, messages.SUCCESS)
