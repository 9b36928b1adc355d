import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")

django_application = get_wsgi_application()

from ticketing.hotpath import HotPaths  # noqa: E402  (needs the settings loaded above)

# The hot endpoints answer before Django's request handling: see ticketing/hotpath.py.
application = HotPaths(django_application)
