"""Where a request's time goes, from a py-spy raw (collapsed stacks) profile.

    .venv/bin/python bench/profile_report.py /tmp/bench-profiles/poll.cpu.txt [--requests N]

bench/run.py --profile records two profiles per path:

* `<path>.cpu.txt` (`py-spy --gil`): only the thread holding the GIL, i.e. the
  Python CPU time of a worker, which is what caps a worker's requests per second.
* `<path>.wall.txt` (`py-spy --idle`): every thread, running or waiting; under WSGI the
  report keeps the samples inside Django's handler, so it shows where a request's wall
  time goes (waiting for Postgres, the broker or Redis included). An ASGI worker's
  awaiting coroutines are on no thread's stack: its wall profile is the whole worker.

Each sample is given to its *owner*: the innermost frame that belongs to a part of
the stack we might change (gunicorn, one middleware, DRF, redis-py, the app...).
Shared helpers (the standard library, django.utils) have no owner of their own and
count for whoever called them, so "LocaleMiddleware" includes the translation
machinery it drives and "DRF: JSON rendering" includes json.dumps.
"""

import argparse
import re
from collections import Counter
from pathlib import Path

# (substring of the frame's file, group, owner); the innermost frame with a match wins.
OWNERS: list[tuple[str, str, str]] = [
    ("gunicorn/http/wsgi.py", "gunicorn", "WSGI environ, start_response, writing the response"),
    ("gunicorn/util.py", "gunicorn", "WSGI environ, start_response, writing the response"),
    ("gunicorn/http/", "gunicorn", "HTTP request parsing"),
    ("gunicorn/workers/", "gunicorn", "gthread: accept, keep-alive, poller, thread pool"),
    # gthread's pool under WSGI; under ASGI, the threads asgiref runs Django's sync code in.
    ("concurrent/futures/", "threads", "thread pools (gthread's, asgiref's)"),
    ("gunicorn/", "gunicorn", "other (config, arbiter)"),
    ("uvicorn", "uvicorn", "HTTP protocol (httptools), ASGI plumbing, worker"),
    ("asgiref/", "Django core", "asgiref: sync_to_async / async_to_sync hops"),
    ("django/core/handlers/exception.py", "Django middleware", "chain plumbing (MiddlewareMixin)"),
    ("django/utils/deprecation.py", "Django middleware", "chain plumbing (MiddlewareMixin)"),
    ("django/middleware/security.py", "Django middleware", "SecurityMiddleware"),
    ("whitenoise/", "Django middleware", "WhiteNoiseMiddleware"),
    ("django/contrib/sessions/", "Django middleware", "SessionMiddleware"),
    ("django/middleware/locale.py", "Django middleware", "LocaleMiddleware"),
    ("django/middleware/common.py", "Django middleware", "CommonMiddleware"),
    ("django/middleware/csrf.py", "Django middleware", "CsrfViewMiddleware"),
    ("django/contrib/auth/", "Django middleware", "AuthenticationMiddleware"),
    ("django/contrib/messages/", "Django middleware", "MessageMiddleware"),
    ("django/middleware/clickjacking.py", "Django middleware", "XFrameOptionsMiddleware"),
    ("django/core/handlers/", "Django core", "WSGI/ASGI handler, request/response setup"),
    ("django/core/signals", "Django core", "request_started/finished signals"),
    ("django/dispatch/", "Django core", "request_started/finished signals"),
    ("django/http/", "Django core", "HttpRequest / HttpResponse"),
    ("django/urls/", "Django core", "URL resolving"),
    ("django/views/", "Django core", "views (csrf_exempt, View.as_view)"),
    ("django/template/", "Django core", "templates"),
    ("django/conf/", "Django core", "settings access"),
    ("django/db/", "Postgres", "Django ORM and connection handling"),
    ("psycopg/", "Postgres", "psycopg"),
    ("rest_framework/renderers.py", "DRF", "JSON rendering"),
    ("rest_framework/utils/encoders.py", "DRF", "JSON rendering"),
    ("rest_framework/response.py", "DRF", "Response"),
    ("rest_framework/negotiation.py", "DRF", "content negotiation"),
    ("rest_framework/parsers.py", "DRF", "JSON parsing of the body"),
    ("rest_framework/request.py", "DRF", "Request wrapper"),
    ("rest_framework/views.py", "DRF", "APIView dispatch"),
    ("rest_framework/", "DRF", "other"),
    ("redis/", "redis-py", "commands, connection pool, socket I/O, parsing"),
    ("django_redis/", "redis-py", "commands, connection pool, socket I/O, parsing"),
    ("hiredis", "redis-py", "commands, connection pool, socket I/O, parsing"),
    ("kombu/", "broker", "publish (kombu / amqp)"),
    ("amqp/", "broker", "publish (kombu / amqp)"),
    ("celery/", "broker", "publish (kombu / amqp)"),
    ("ticketing/store/", "app", "ticketing.store (client, script lookup)"),
    ("ticketing/fastlane.py", "app", "the ASGI fast lane"),
    ("uuid.py", "app", "uuid"),
    ("queue_app/", "app", "views and services"),
    ("booking_app/", "app", "views and services"),
    ("ticketing/", "app", "views and services"),
    ("bench/baseline/", "app", "views and services"),
    # Last: the event loop's own frames, under every coroutine of an ASGI worker.
    ("asyncio/", "asyncio", "event loop, tasks, futures"),
]

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")

Frames = list[tuple[str, str]]


def parse(path: Path) -> list[tuple[Frames, int]]:
    """[(frames root-first as (function, file), samples)]."""
    stacks = []
    for line in path.read_text().splitlines():
        text, _, count = line.strip().rpartition(" ")
        frames = [(m["func"], m["file"]) for part in text.split(";") if (m := _FRAME.match(part))]
        if frames and count.isdigit():
            stacks.append((frames, int(count)))
    return stacks


def owner(frames: Frames) -> tuple[str, str]:
    """(group, owner) of a sample: its innermost frame with an owner."""
    for _, file in reversed(frames):
        for needle, group, name in OWNERS:
            if needle in file:
                return group, name
    return "other", "interpreter, threading"


def report(
    path: Path | str, *, requests: int | None = None, rate: int = 100, within: str = "", top: int = 25
) -> str:
    """A plain-text report: shares by group and owner, then the heaviest functions.

    With `requests` (answered during the profile) shares also become milliseconds per
    request; `within` keeps only samples whose stack has that function.
    """
    stacks = parse(Path(path))
    if within:
        stacks = [(f, n) for f, n in stacks if any(func == within for func, _ in f)]
    total = sum(n for _, n in stacks)
    if not total:
        return f"{path}: no samples\n"
    groups: Counter[str] = Counter()
    owners: Counter[tuple[str, str]] = Counter()
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for frames, n in stacks:
        who = owner(frames)
        groups[who[0]] += n
        owners[who] += n
        for name in {f"{func} ({file})" for func, file in frames}:
            inclusive[name] += n
        leaf[f"{frames[-1][0]} ({frames[-1][1]})"] += n

    def cost(n: int) -> str:
        share = f"{100 * n / total:5.1f}%"
        return f"{share} {1000 * n / rate / requests:6.3f} ms" if requests else share

    head = f"{path}: {total} samples" + (f" within {within}" if within else "")
    if requests:
        head += f", {requests} requests: {1000 * total / rate / requests:.3f} ms of samples per request"
    out = [head, "", "by group"]
    out += [f"  {cost(n)}  {name}" for name, n in groups.most_common()]
    out += ["", "by owner"]
    out += [f"  {cost(n)}  {g}: {name}" for (g, name), n in owners.most_common()]
    out += ["", "inclusive, heaviest functions"]
    out += [f"  {cost(n)}  {name}" for name, n in inclusive.most_common(top)]
    out += ["", "self (leaf frame), heaviest functions"]
    out += [f"  {cost(n)}  {name}" for name, n in leaf.most_common(top)]
    return "\n".join(out) + "\n"


def main() -> None:
    """Print the report of each profile named on the command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("profiles", nargs="+", type=Path)
    parser.add_argument("--requests", type=int, help="requests answered while profiling")
    parser.add_argument("--rate", type=int, default=100, help="py-spy --rate of the profile")
    parser.add_argument("--within", default="", help="only samples under this function")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    for path in args.profiles:
        print(report(path, requests=args.requests, rate=args.rate, within=args.within, top=args.top))


if __name__ == "__main__":
    main()
