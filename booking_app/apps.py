from django.apps import AppConfig


class BookingAppConfig(AppConfig):
    name = "booking_app"
    verbose_name = "Bookings"
