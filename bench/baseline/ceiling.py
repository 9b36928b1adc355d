"""The Python ceiling: the app's poll with no framework at all.

    gunicorn bench.baseline.ceiling:app --workers 1 --worker-class bench.baseline.ceiling.Worker

The same work as the app's poll (queue_app/services.py `_poll_call` and `_position`):
the token and eventId from the query string, one EVALSHA of the project's lua/poll.lua
with the same KEYS and ARGV, the same JSON answer written by orjson. Nothing else: no
routes, no validation of eventId, no throttles, no timeout, no error envelope. What is
left (uvicorn on uvloop and httptools, redis.asyncio with hiredis, orjson) is what any
Python server of the poll needs: what the app spends beyond it is its own code's cost.
One worker, where the app runs WEB_CONCURRENCY: req/s compare the set-ups, server CPU
per poll compares the code.

The EVALSHAs of one event-loop turn go out as one pipeline, as the app's fast lane
sends them (ticketing/store/clients.py Batcher): the ceiling has every trick the app has.
RAW_BATCH=0 awaits each `client.evalsha()` on its own instead.
"""

import asyncio
import hashlib
import os
import random
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qsl

import orjson
import redis.asyncio
from uvicorn_worker import UvicornWorker

# The app's script: bench/run.py names the copy of the code under test (--ref). As
# ticketing/store/scripts.py sends it: a prologue binding the names its header
# declares (`-- KEY meta ...`, `-- ARG token ...`) to KEYS and ARGV, then the
# lua/lib/ parts it asks for (`-- needs:`), then the script.
_POLL = Path(os.environ.get("POLL_SCRIPT", "lua/poll.lua"))
_HEADER = [
    line.split()[1:3] for line in _POLL.read_bytes().splitlines() if line.split()[1:2] in ([b"KEY"], [b"ARG"])
]
_PROLOGUE = [
    b"local " + b", ".join(name for kind, name in _HEADER if kind == what) + b" = "
    + b", ".join(b"%s[%d]" % (slot, i + 1) for i in range(sum(kind == what for kind, _ in _HEADER)))
    for what, slot in ((b"KEY", b"KEYS"), (b"ARG", b"ARGV"))
    if any(kind == what for kind, _ in _HEADER)
]  # fmt: skip
SCRIPT = b"\n".join(
    [
        *_PROLOGUE,
        *[
            (_POLL.parent / "lib" / f"{line[9:].strip().decode()}.lua").read_bytes()
            for line in _POLL.read_bytes().splitlines()
            if line.startswith(b"-- needs:")
        ],
        _POLL.read_bytes(),
    ]
)
SHA = hashlib.sha1(SCRIPT).hexdigest()
BATCH = os.environ.get("RAW_BATCH", "1") != "0"
HEADERS = [(b"content-type", b"application/json")]
# The app's adaptive polling (queue_app/services.py next_poll_ms).
POLL_STEPS_MS = ((100_000, 10_000), (10_000, 5_000), (1_000, 3_000), (100, 2_000))

client: redis.asyncio.Redis = redis.asyncio.Redis.from_url(os.environ["REDIS_URL"])
pending: list[tuple[tuple, asyncio.Future]] = []
sending: set[asyncio.Task] = set()  # held, or the loop might drop them midway


def evalsha(*args: object) -> asyncio.Future:
    """EVALSHA, queued for this loop turn's pipeline."""
    future = asyncio.get_running_loop().create_future()
    if not pending:
        asyncio.get_running_loop().call_soon(flush)
    pending.append((args, future))
    return future


def flush() -> None:
    task = asyncio.ensure_future(send(pending[:]))
    pending.clear()
    sending.add(task)
    task.add_done_callback(sending.discard)


async def send(batch: list[tuple[tuple, asyncio.Future]]) -> None:
    pipe = client.pipeline(transaction=False)
    for args, _ in batch:
        pipe.evalsha(*args)
    for (_, future), reply in zip(batch, await pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, Exception):
            future.set_exception(reply)
        else:
            future.set_result(reply)


async def poll(query: bytes) -> dict:
    params = dict(parse_qsl(query.decode()))
    event_id, token = params["eventId"], uuid.UUID(params["token"])
    prefix = f"ticket:{{{event_id}}}:"
    keys = [
        "meta",
        "queue:seq",
        "queue:popped",
        "queue:left",
        "queue:holes",
        "queue:leftpre",
        "admit:windows",
    ]
    keys += [f"booking:done:{token}", "seats:remaining", "queue:drawpos", "booking:places", "queue:nonces"]
    args = (SHA, len(keys), *(prefix + k for k in keys), token.bytes)
    reply = await (evalsha(*args) if BATCH else client.evalsha(*args))
    state, waiting, seats, event_status, detail, rate, opens_at, _, position = reply
    state, rate = state.decode(), float(rate)
    rank = detail if state == "WAITING" else None
    if state == "ACTIVE":
        next_ms = 2_000
    elif state == "WAITING":
        next_ms = next((ms for above, ms in POLL_STEPS_MS if rank > above), 1_000)
    else:
        next_ms = 0
    return {
        "status": state,
        "rank": rank,
        "totalWaiting": waiting,
        "ahead": rank - 1 if rank is not None else None,
        "behind": waiting - rank if rank is not None else None,
        "remainingSeats": max(seats, 0),
        "nextPollMs": int(next_ms * random.uniform(0.8, 1.2)),
        "activeExpiresAt": int(detail) if state == "ACTIVE" else None,
        "reservationId": detail.decode() if state == "BOOKED" else None,
        "eventId": event_id,
        "eventStatus": event_status.decode(),
        "soldOut": seats <= 0,
        "etaSeconds": (
            round((rank - 1) / rate)
            if rank is not None and rate > 0 and seats > 0 and event_status == b"OPEN"
            else None
        ),
        "opensAt": int(opens_at) if opens_at else None,
        "receipt": None,  # (a pre-queue's receipt: the bench's events have no scheduled start)
        "drawPosition": position or None,
    }


async def app(scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable]) -> None:
    if scope["type"] == "lifespan":
        await receive()  # lifespan.startup
        await client.script_load(SCRIPT)  # so that EVALSHA never meets NOSCRIPT
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        await client.aclose()
        return await send({"type": "lifespan.shutdown.complete"})
    if scope["path"] == "/api/status/poll":
        status, body = 200, orjson.dumps({"success": True, "data": await poll(scope["query_string"])})
    else:  # /health and anything else: no Redis
        status, body = (200, b"{}") if scope["path"] == "/health" else (404, b"{}")
    headers = [*HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Worker(UvicornWorker):
    """As the app's worker (ticketing/gunicorn_conf.py): uvloop, httptools with the
    writes of a loop turn sent together, no access log, no Server header; the
    lifespan loads the script."""

    CONFIG_KWARGS = {
        "loop": "uvloop",
        "http": "ticketing.gunicorn_conf:Protocol",
        "lifespan": "on",
        "access_log": False,
        "proxy_headers": False,
        "server_header": False,
    }
