"""One view: GET a Redis key, answer it as JSON."""

import redis
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import path

# Module level: one client (and its connection pool) per process, as an app would.
_client = redis.Redis.from_url(settings.REDIS_URL)


def get(request: HttpRequest) -> JsonResponse:
    """One Redis round trip and a small JSON body: the least a poll can cost."""
    value = _client.get(settings.BASELINE_KEY)
    return JsonResponse({"value": value.decode() if value is not None else None})


urlpatterns = [path("baseline", get)]
