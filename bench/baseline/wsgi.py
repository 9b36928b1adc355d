"""WSGI entry point of the baseline: `gunicorn bench.baseline.wsgi:application`."""

import os

from django.core.wsgi import get_wsgi_application

# Forced: an inherited DJANGO_SETTINGS_MODULE would measure the wrong app.
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.baseline.settings"

application = get_wsgi_application()
