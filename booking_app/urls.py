from django.urls import path

from booking_app import api, views

urlpatterns = [
    path("api/booking", api.BookingView.as_view(), name="booking-create"),
    path("api/booking/<str:reservation_id>", api.CancelView.as_view(), name="booking-cancel"),
    path("bookings/<str:signed>/", views.booking_page, name="booking-page"),
    path("bookings/<str:signed>/checkout/", views.checkout_page, name="checkout"),
    path("payments/toss/webhook", views.toss_webhook, name="toss-webhook"),
    path("events/<str:event_id>/book/", views.book, name="book"),
    path(
        "events/<str:event_id>/reservations/<str:reservation_id>/",
        views.confirmation,
        name="confirmation",
    ),
]
