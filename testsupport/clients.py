"""Clients the tests speak to the service through: `Api` (the JSON API, returning
status and parsed body) over any of them; `LaneClient`, the ASGI application
production serves, in-process (the fast lane for the crowd's endpoints); and
`ServerClient`, an app server over HTTP. All answer as Django's test Client does."""

import asyncio
import json
import threading

from django.http import HttpResponse
from django.test import Client


class Api:
    """The JSON API through Django's test client: returns (status, parsed body)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.last = None

    def call(self, method: str, path: str, body=None, **extra) -> tuple[int, dict]:
        kwargs = {}
        if body is not None:
            kwargs = {
                "data": body if isinstance(body, (bytes, str)) else json.dumps(body),
                "content_type": extra.pop("content_type", "application/json"),
            }
        resp = getattr(self.client, method)(path, **kwargs, **extra)
        self.last = resp
        return resp.status_code, json.loads(resp.content)

    def join(self, event_id: str | None = None, **extra) -> tuple[int, dict]:
        return self.call(
            "post", "/api/queue/join", {} if event_id is None else {"eventId": event_id}, **extra
        )

    def rejoin(self, token: str, event_id: str | None = None, **extra) -> tuple[int, dict]:
        body = {"token": token} | ({"eventId": event_id} if event_id else {})
        return self.call("post", "/api/queue/rejoin", body, **extra)

    def leave(self, token: str, event_id: str, **extra) -> tuple[int, dict]:
        return self.call("delete", f"/api/queue/leave?token={token}&eventId={event_id}", **extra)

    def poll(self, token: str, event_id: str, **extra) -> tuple[int, dict]:
        return self.call("get", f"/api/status/poll?token={token}&eventId={event_id}", **extra)

    def token(self, event_id: str) -> str:
        status, body = self.join(event_id)
        assert status == 200, body
        return body["data"]["token"]


class LaneClient:
    """Django's test Client, except that the fast lane's routes go through the ASGI
    application production serves (ticketing/asgi.py: the fast lane, and Django's
    ASGI application behind it), in-process on one event loop."""

    _loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, django_client: Client) -> None:
        self.django = django_client

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        if cls._loop is None:
            cls._loop = asyncio.new_event_loop()
            threading.Thread(target=cls._loop.run_forever, name="lane-client", daemon=True).start()
        return cls._loop

    def generic(
        self, method: str, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        from ticketing.asgi import application

        route_path, _, query = path.partition("?")
        route = application.routes.get(route_path)
        if route is None or route.method != method.upper():
            return self.django.generic(
                method, path, data, content_type or "application/octet-stream", **extra
            )
        body = data.encode() if isinstance(data, str) else data
        headers = [(b"host", b"testserver"), (b"content-length", str(len(body)).encode())]
        if content_type:
            headers.append((b"content-type", content_type.encode()))
        for name, value in extra.items():
            if name.startswith("HTTP_"):
                headers.append((name[5:].lower().replace("_", "-").encode(), value.encode()))
        if self.django.cookies:
            cookies = "; ".join(f"{name}={morsel.value}" for name, morsel in self.django.cookies.items())
            headers.append((b"cookie", cookies.encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method.upper(),
            "scheme": "http",
            "path": route_path,
            "raw_path": route_path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": (extra.get("REMOTE_ADDR", "127.0.0.1"), 50000),
            "server": ("testserver", 80),
        }
        return asyncio.run_coroutine_threadsafe(_asgi_call(application, scope, body), self.loop()).result(60)

    def get(self, path: str, data: dict | None = None, **extra) -> HttpResponse:
        assert not data, "put the query in the path"
        return self.generic("GET", path, **extra)

    def delete(
        self, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        return self.generic("DELETE", path, data, content_type, **extra)

    def put(
        self, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        return self.generic("PUT", path, data, content_type, **extra)

    def post(
        self, path: str, data: bytes | str | None = None, content_type: str | None = None, **extra
    ) -> HttpResponse:
        if data is not None and not isinstance(data, (bytes, str)):
            return self.django.post(path, data, **extra)  # a form: not the fast lane's
        return self.generic("POST", path, data or b"", content_type, **extra)


async def _asgi_call(app, scope: dict, body: bytes) -> HttpResponse:
    sent = False
    started: dict = {}
    chunks: list[bytes] = []

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # no disconnect while the app answers
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    response = HttpResponse(b"".join(chunks), status=started["status"])
    for name, value in started.get("headers", []):
        response.headers[name.decode("latin-1")] = value.decode("latin-1")
    response.json = lambda: json.loads(response.content)
    return response


class ServerClient:
    """An app server spoken to over HTTP, called as Django's test Client is
    (`generic`), answering an HttpResponse as the test Client does. REMOTE_ADDR
    is sent as X-Forwarded-For (which the server believes from TRUSTED_PROXIES
    only); other HTTP_* names as their headers."""

    def __init__(self, base: str) -> None:
        import requests

        self.base = base
        self.session = requests.Session()
        self.session.headers.clear()  # nothing the test Client would not send

    def generic(
        self, method: str, path: str, data: bytes | str = b"", content_type: str | None = None, **extra
    ) -> HttpResponse:
        headers = {"Content-Type": content_type} if content_type else {}
        for name, value in extra.items():
            if name == "REMOTE_ADDR":
                headers["X-Forwarded-For"] = value
            elif name.startswith("HTTP_"):
                headers[name[5:].replace("_", "-")] = value
            else:
                raise TypeError(f"{name}: not a header")
        answer = self.session.request(
            method.upper(),
            self.base + path,
            data=data.encode() if isinstance(data, str) else data,
            headers=headers,
            timeout=60,
            allow_redirects=False,
        )
        response = HttpResponse(answer.content, status=answer.status_code)
        del response.headers["Content-Type"]  # only what the server sent
        for name, value in answer.headers.items():
            response.headers[name] = value
        response.json = answer.json
        return response
