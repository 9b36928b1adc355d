"""Settings of the baseline: the least Django that serves a view.

No apps, no middleware, no database, no templates: what is left is Django's request
and response handling plus one redis-py round trip, the part of a poll that no
optimisation of ours can remove.
"""

import os

SECRET_KEY = "bench-baseline-has-no-secrets"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "bench.baseline.urls"
WSGI_APPLICATION = "bench.baseline.wsgi.application"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict = {}
USE_TZ = True
USE_I18N = False
LOGGING_CONFIG = None

REDIS_URL = os.environ["REDIS_URL"]
# The key the view reads; bench/run.py sets it before measuring.
BASELINE_KEY = os.environ.get("BASELINE_KEY", "bench:baseline")
