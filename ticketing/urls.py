"""The project's routes. Each app declares its own (API and pages) in its urls.py;
the project package includes them by name and imports no app."""

import time
from functools import cache

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from django.views.i18n import set_language
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from ticketing import metrics


# No CSRF check: it changes nothing, and a POST is answered 405 like any other method
# but GET, not refused as a form without its token.
@csrf_exempt
def health(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers, the seed's bare shape: no Redis, no database."""
    if request.method not in ("GET", "HEAD"):
        return JsonResponse(
            {"success": False, "error": {"code": "METHOD_NOT_ALLOWED", "message": "Use GET."}},
            status=405,
        )
    return JsonResponse({"status": "ok", "timestamp": int(time.time() * 1000)})


@cache
def _icon() -> bytes:
    return (settings.BASE_DIR / "static" / "favicon.svg").read_bytes()


def favicon(request: HttpRequest) -> HttpResponse:
    """The icon at the address every browser asks first, whatever the page says: the
    admin's pages and a JSON answer name none, and a 404 there is an error in the
    browser's console on every page."""
    response = HttpResponse(_icon(), content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response


urlpatterns = [
    path("health", health),
    path("favicon.ico", favicon),
    path("metrics", metrics.view, name="metrics"),  # METRICS_ALLOWED_FROM only
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("accounts_app.urls")),
    path("admin/", admin.site.urls),
    # Without a CSRF token, so that a page the same for everyone carries none and may
    # be cached (deploy/nginx.conf): a forged switch changes a page's language, no more.
    path("i18n/setlang/", csrf_exempt(set_language), name="set_language"),
    path("", include("queue_app.urls")),
    path("", include("booking_app.urls")),
]

handler400 = "ticketing.errors.handler400"
handler403 = "ticketing.errors.handler403"
handler404 = "ticketing.errors.handler404"
handler500 = "ticketing.errors.handler500"
