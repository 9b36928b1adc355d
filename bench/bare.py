"""What the HTTP server costs per request by itself: the floor under every fast-lane
answer.

A bare answer of a join's size (the same JSON for every request: no Django view,
no Redis), three ways, each on one worker of the production server (gunicorn with
the uvicorn worker of ticketing/gunicorn_conf.py, its Protocol), driven by wrk with
the seed's join script as side by side drives the app:

- `asgi`: an ASGI application that reads the body and sends the answer, the path
  of every request the lane does not answer itself (uvicorn's request cycle, a
  task, the messages);
- `held`: a fast route's request as the production protocol answers it (held whole,
  then a task asks the lane, here a stand-in that gives the bare answer at once);
- `protocol`: the answer written by the protocol itself once httptools has parsed
  the request, without uvicorn's request cycle: what parsing and the socket calls
  cost alone.

Each run reports requests a second and the worker's CPU µs per request (from /proc:
bench/cpu.py), in interleaved rounds. Compared with `python -m bench.join_commands
--workers 1` (the join, whole) and `python -m bench.lane` (the join without HTTP):
docs/benchmarks.md, "Where a join's time goes".

    .venv/bin/python -m bench.bare [--duration 5s] [--rounds 3] [--conns 64]
"""

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import textwrap
from pathlib import Path

from bench import cpu
from bench.join_commands import PEERS
from bench.serving import prepare
from bench.stack import Stack
from ticketing import servers

ANSWER = (
    b'{"success":true,"data":{"token":"0a1b2c3d-0000-8000-8000-000000000000","eventId":"bare",'
    b'"joinedAt":1765000000000,"receipt":null,"status":"WAITING","position":{"status":"WAITING",'
    b'"rank":12345,"totalWaiting":12345,"ahead":12344,"behind":0,"remainingSeats":100}}}'
)

BARE = f'''
"""A bare answer, on the production server (bench/bare.py)."""
from ticketing.gunicorn_conf import *  # noqa: F403 (the production settings)
from ticketing.gunicorn_conf import Protocol, Worker

ANSWER = {ANSWER!r}
HEAD = b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: %d\\r\\n\\r\\n"


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({{"type": message["type"] + ".complete"}})
            if message["type"] == "lifespan.shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
    await send({{"type": "http.response.start", "status": 200, "headers": headers}})
    await send({{"type": "http.response.body", "body": ANSWER}})


class _Lane:
    """The fast lane's two questions, answered with the bare answer: the production
    protocol's own path for a fast route's request."""

    async def __call__(self, scope, receive, send):
        await application(scope, receive, send)

    def route_of(self, scope):
        return scope["path"] == "/api/queue/join" or None

    def whole(self, scope, body):
        return self._answer()

    async def _answer(self):
        return 200, [(b"content-type", b"application/json")], ANSWER


lane = _Lane()


class Bare(Protocol):
    """httptools' parse, then the answer: no request cycle."""

    def on_message_begin(self):
        self.unfinished, self.headed = True, False

    def on_url(self, url):
        pass

    def on_header(self, name, value):
        pass

    def on_headers_complete(self):
        self.headed = True

    def on_body(self, body):
        pass

    def on_message_complete(self):
        self.unfinished = False
        self.transport.write(HEAD % len(ANSWER) + ANSWER)


class BareWorker(Worker):
    CONFIG_KWARGS = {{**Worker.CONFIG_KWARGS, "http": Bare}}
'''


# name, worker class, application
SERVERS = (
    ("asgi", "bare.Worker", "bare:application"),
    ("held", "bare.Worker", "bare:lane"),
    ("protocol", "bare.BareWorker", "bare:application"),
)


def _run(url: str, seconds: str, conns: int) -> dict:
    out = subprocess.run(
        ["wrk", "-t2", f"-c{conns}", f"-d{seconds}", "-s", str(PEERS / "wrk" / "join.lua"), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(part.split("=") for part in out.split("RESULT ", 1)[1].split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default="5s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conns", type=int, default=64)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bare-"))
    stack = Stack(workdir)
    try:
        prepare(stack, "redis")  # (the settings the server's configuration reads)
        (workdir / "bare.py").write_text(textwrap.dedent(BARE))
        env = {
            **stack.env,
            "WEB_CONCURRENCY": "1",
            "HOST": "127.0.0.1",
            "PYTHONPATH": f"{workdir}:{stack.app_dir}",
        }
        urls, pids = {}, {}
        for name, worker, app in SERVERS:
            port = servers.free_port()
            urls[name] = f"http://127.0.0.1:{port}/api/queue/join"
            command = [app, "--config", "python:bare", "--worker-class", worker]
            proc = stack.start_gunicorn(
                name, command, {**env, "PORT": str(port)}, f"http://127.0.0.1:{port}/"
            )
            pids[name] = proc.pid
        results: dict[str, list[dict]] = {name: [] for name in urls}
        for url in urls.values():
            _run(url, "2s", args.conns)  # warm
        for _ in range(args.rounds):
            for name, url in urls.items():
                master = pids[name]
                before = cpu.snapshot()
                found = _run(url, args.duration, args.conns)
                used = cpu.usage(
                    before, cpu.snapshot(), 1, {"app": lambda pid, n, ppid, m=master: m in (pid, ppid)}
                )
                requests = int(found["requests"])
                result = {"server": name, "rps": round(float(found["rps"])), "non2xx": int(found["non2xx"]),
                          "cpu_usec_per_request": round(used["app"] * 1e6 / requests, 1)}  # fmt: skip
                results[name].append(result)
                print(json.dumps(result), flush=True)
        print(json.dumps({
            name: {"median_rps": statistics.median(r["rps"] for r in runs),
                   "median_cpu_usec_per_request": statistics.median(r["cpu_usec_per_request"] for r in runs)}
            for name, runs in results.items()
        }))  # fmt: skip
    finally:
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
