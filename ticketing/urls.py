import time

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from booking_app import api as booking_api
from booking_app import views as booking_views
from queue_app import views as queue_views


def health(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers, the seed's bare shape: no Redis, no database."""
    if request.method not in ("GET", "HEAD"):
        return JsonResponse(
            {"success": False, "error": {"code": "METHOD_NOT_ALLOWED", "message": "Use GET."}},
            status=405,
        )
    return JsonResponse({"status": "ok", "timestamp": int(time.time() * 1000)})


urlpatterns = [
    path("health", health),
    # POST /api/booking, /api/queue/* and /api/status/poll: ticketing.hotpath, ahead of this.
    path("api/booking/<str:reservation_id>", booking_api.CancelView.as_view()),
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", queue_views.event_list, name="event-list"),
    path("events/<str:event_id>/", queue_views.waiting_room, name="waiting-room"),
    path("events/<str:event_id>/book/", booking_views.book, name="book"),
    path(
        "events/<str:event_id>/reservations/<str:reservation_id>/",
        booking_views.confirmation,
        name="confirmation",
    ),
]

handler400 = "ticketing.errors.handler400"
handler403 = "ticketing.errors.handler403"
handler404 = "ticketing.errors.handler404"
handler500 = "ticketing.errors.handler500"
