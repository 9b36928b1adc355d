from django.http import HttpRequest, HttpResponse
from django.urls import path

from ticketing.urls import handler500, urlpatterns  # noqa: F401  (the handler is looked up here)


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


urlpatterns = [*urlpatterns, path("boom", boom)]
