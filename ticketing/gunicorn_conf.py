"""gunicorn settings, from the environment (PORT, HOST, WEB_CONCURRENCY, WEB_THREADS)."""

import os

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 2))
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "4"))
keepalive = 5
accesslog = os.environ.get("ACCESS_LOG") or None
