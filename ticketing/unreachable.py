"""Redis or Postgres in trouble, said in one line an operator can act on: which
address was tried, what it answered, and how to point elsewhere. Passwords are
never printed."""

import socket
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError

_REDIS_UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def redis_address() -> str:
    url = urlsplit(settings.REDIS_URL)
    host = url.hostname or ""
    return f"{url.scheme}://{host}:{url.port or 6379}{url.path}" if host else settings.REDIS_URL


def database_address() -> str:
    db = settings.DATABASES["default"]
    host, port = db.get("HOST") or "", db.get("PORT") or 5432
    return f"postgres://{db.get('USER') or ''}@{host}:{port}/{db.get('NAME')}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _hint(variable: str) -> str:
    if settings.STACK_ATTACHED:
        return "the running stack published it: is `make run` still up?"
    return f"is it running? {variable} says where it is"


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def explain(exc: BaseException, *, probe: bool = True) -> str | None:
    """One line for Redis or Postgres in trouble; None for anything else. `probe`
    tries the database's address to tell "nothing there" from "it refused"."""
    if isinstance(exc, _REDIS_UNREACHABLE):
        return f"cannot reach Redis at {redis_address()} ({_first_line(exc)}): {_hint('REDIS_URL')}"
    if isinstance(exc, (OperationalError, InterfaceError)):
        db = settings.DATABASES["default"]
        host, port = db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)
        if probe and not _answers(host, port):
            return f"cannot reach Postgres at {database_address()}: {_hint('DATABASE_URL')}"
        return f"Postgres at {database_address()}: {_first_line(exc)}"
    return None
