"""The ASGI application production serves (gunicorn with uvicorn workers).

The crowd's endpoints are answered by the fast lane (ticketing/fastlane.py).
Everything else (booking, cancellation, pages, the admin, and any request the fast
lane refuses for its form) is Django's full stack, run in a pool of threads:
Django's own ASGI handler runs each request's sync code through asgiref, hopping
between the loop and a thread around the middleware and the view: it booked 317/s
where this pool books 407/s, and a WSGI server 478/s (interleaved runs,
docs/benchmarks.md).
The fast lane reads each body before it reaches the pool, so a slow client holds a
coroutine, never one of these threads.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")

django_application = get_wsgi_application()

from a2wsgi import WSGIMiddleware  # noqa: E402
from django.conf import settings  # noqa: E402

from ticketing.fastlane import FastLane  # noqa: E402  (needs the settings loaded above)

application = FastLane(WSGIMiddleware(django_application, workers=settings.WEB_THREADS))
