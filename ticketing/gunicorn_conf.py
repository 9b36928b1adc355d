"""gunicorn settings, from the environment (PORT, HOST, WEB_CONCURRENCY).

gunicorn runs the ASGI application (ticketing/asgi.py) in uvicorn workers (the
uvicorn-worker package): uvloop and httptools. Each worker is one event loop, so a
slow client holds a coroutine, not a thread, and the crowd's endpoints answer from
the fast lane without Django's request cycle (docs/benchmarks.md).
"""

import os

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 2))
worker_class = "ticketing.gunicorn_conf.Worker"
keepalive = 5
accesslog = os.environ.get("ACCESS_LOG") or None
# gunicorn's control socket sits at one path per user (~/.gunicorn/gunicorn.ctl):
# two servers on one machine (a test server, a benchmark) would take it from each
# other. Nothing here uses it.
control_socket_disable = True


from uvicorn_worker import UvicornWorker  # noqa: E402


class Worker(UvicornWorker):
    """uvicorn with uvloop and httptools, no access log (gunicorn's `accesslog`
    turns one on), and the ASGI lifespan the fast lane answers. uvicorn's own
    reading of X-Forwarded-For is off: the app believes it only from
    TRUSTED_PROXIES (ticketing/ratelimit.py)."""

    CONFIG_KWARGS = {
        "loop": "uvloop",
        "http": "httptools",
        "lifespan": "on",
        "access_log": False,
        "proxy_headers": False,
        "server_header": False,
    }
