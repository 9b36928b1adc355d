from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BookingAppConfig(AppConfig):
    name = "booking_app"
    verbose_name = _("Bookings")

    def ready(self) -> None:
        # As queue_app's: the modules that call Lua scripts check their calls on import.
        from booking_app import checkout, reconcile, services  # noqa: F401
