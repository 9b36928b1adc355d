"""The ASGI application production serves (gunicorn with uvicorn workers): the
crowd's endpoints on the fast lane, everything else on Django's ASGI application."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")

django_application = get_asgi_application()

from ticketing.fastlane import FastLane  # noqa: E402  (needs the settings loaded above)

application = FastLane(django_application)
