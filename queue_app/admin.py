from django.contrib import admin, messages
from django.http import HttpRequest

from booking_app.selectors import seats_sold
from queue_app import services
from queue_app.models import Event


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = (
        "event_id",
        "name",
        "status",
        "total_seats",
        "admit_per_second",
        "active_window_seconds",
        "max_active_users",
    )
    list_filter = ("status",)
    search_fields = ("event_id", "name")

    def get_readonly_fields(self, request: HttpRequest, obj: Event | None = None) -> tuple:
        # The id names the Redis keys: renaming it would orphan the live line.
        return ("event_id", "created_at", "updated_at") if obj else ("created_at", "updated_at")

    def save_model(self, request: HttpRequest, obj: Event, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        try:
            services.event_publish(obj, sold=seats_sold(obj.event_id))
        except services.SeatsBelowSold as exc:
            self.message_user(request, str(exc), messages.ERROR)
