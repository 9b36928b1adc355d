from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BookingAppConfig(AppConfig):
    name = "booking_app"
    verbose_name = _("Bookings")
