import time

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path

from booking_app import api as booking_api
from queue_app import api as queue_api


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
    path("api/queue/join", queue_api.JoinView.as_view()),
    path("api/queue/rejoin", queue_api.RejoinView.as_view()),
    path("api/queue/leave", queue_api.LeaveView.as_view()),
    path("api/status/poll", queue_api.PollView.as_view()),
    path("api/booking", booking_api.BookingView.as_view()),
    path("api/booking/<str:reservation_id>", booking_api.CancelView.as_view()),
    path("admin/", admin.site.urls),
]

handler400 = "ticketing.errors.handler400"
handler403 = "ticketing.errors.handler403"
handler404 = "ticketing.errors.handler404"
handler500 = "ticketing.errors.handler500"
