"""The fast lane behind Granian's RSGI, to measure it against the production server
(docs/benchmarks.md, "Granian's RSGI"): the lane's routes only, each request handed
to `FastLane.whole` as the production protocol hands it, anything else refused 404.
Not a server to run the service on: Django's lane is not behind it.

    granian --interface rsgi --workers 1 --loop uvloop \\
        --host 127.0.0.1 --port 8194 bench.rsgi_app:app
"""

import gc
import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")
django.setup()

from django.conf import settings  # noqa: E402

from ticketing.asgi import application as lane  # noqa: E402 (needs the settings loaded above)

_NOT_HERE = [("content-type", "application/json")]
_MOST = settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class App:
    def __rsgi_init__(self, loop: Any) -> None:
        lane.routes  # noqa: B018 (read once, as the ASGI lifespan reads them)
        gc.collect()
        gc.freeze()

    def __rsgi_del__(self, loop: Any) -> None:
        pass

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        host, _, port = scope.client.rpartition(":")
        asked = {
            "type": "http",
            "method": scope.method,
            "path": scope.path,
            "query_string": scope.query_string.encode("latin-1"),
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in scope.headers.items()],
            "client": (host, int(port or 0)),
        }
        body = b"" if scope.method == "GET" else await proto()
        route = lane.route_of(asked)
        answer = None if route is None or len(body) > _MOST else lane.whole(route, asked, body)
        if answer is None:
            proto.response_bytes(404, _NOT_HERE, b'{"success":false}')
            return
        status, headers, payload = await answer
        proto.response_bytes(status, [(k.decode(), v.decode()) for k, v in headers], payload)


app = App()
