"""gunicorn settings, from the environment (PORT, HOST, WEB_CONCURRENCY, WEB_THREADS,
WEB_WORKER_CLASS).

gthread by measurement (docs/benchmarks.md): on the hot paths sync, gthread and
gevent workers served the same within noise, and gthread keeps connections alive
(pollers reconnect every second otherwise) and copes with slow clients without
another dependency.
"""

import os

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 2))
worker_class = os.environ.get("WEB_WORKER_CLASS", "gthread")
threads = int(os.environ.get("WEB_THREADS", "4"))
keepalive = 5
accesslog = os.environ.get("ACCESS_LOG") or None
