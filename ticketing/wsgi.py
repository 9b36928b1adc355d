"""Django on WSGI, for tools that want it. Production serves ticketing/asgi.py."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")

application = get_wsgi_application()
