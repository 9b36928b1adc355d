"""deploy/nginx.conf run by a real nginx in front of the production server: what
nginx refuses itself (a body over its limit, a request it cannot read, one too slow
to arrive) reaches the client in the app's JSON envelope, as the app answers them."""

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from django.conf import settings

from queue_app import notify
from queue_app.views import token_cookie as token_cookie_of
from testsupport import require
from ticketing.servers import free_port

CONF = Path(settings.BASE_DIR) / "deploy" / "nginx.conf"


def _config(app: str, port: int, tmp: Path) -> str:
    """The deployed file, pointed at this test's app server and port, its logs in
    `tmp`, and its body deadline cut to a second (the test waits for it)."""
    text = CONF.read_text()
    for old, new in (
        ("server web:8000;", f"server {app};"),
        ("listen 80 default_server;", f"listen 127.0.0.1:{port} default_server;"),
        ("access_log /dev/stdout;", "access_log off;"),
        ("error_log /dev/stderr warn;", f"error_log {tmp / 'error.log'} warn;"),
        ("client_body_timeout 10s;", "client_body_timeout 1s;"),
        ("proxy_cache_path /var/cache/nginx/pages ", f"proxy_cache_path {tmp / 'pages'} "),
    ):
        assert text.count(old) == 1, old  # the deployed file still says it
        text = text.replace(old, new)
    # Started by root, its workers would run as nobody, who may not enter the test's
    # directory to keep the page cache there.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"{user}pid {tmp / 'nginx.pid'};\n" + text


@pytest.fixture
def nginx(production_server, tmp_path) -> Iterator[str]:
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    require(binary is not None, "nginx is not installed (apt-get install nginx-light)")
    tmp_path.chmod(0o755)  # its workers run as nobody when started by root
    port = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(_config(production_server.removeprefix("http://"), port, tmp_path))
    proc = subprocess.Popen(
        [binary, "-p", str(tmp_path), "-c", str(conf), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "nginx did not start"
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def _raw(address: str, request: bytes, *, wait: float = 10) -> bytes:
    """Send `request` as it is and read until nginx closes or `wait` passes."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=wait) as conn:
        conn.sendall(request)
        answer = b""
        try:
            while chunk := conn.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    return answer


def _envelope(answer: bytes) -> tuple[int, str, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers.get("Content-Type", ""), json.loads(body)


def test_nginx_passes_the_app_through(nginx) -> None:
    """The app's own answers, its refusals included, pass through as they are."""
    answer = requests.get(f"http://{nginx}/api/queue/challenge", params={"eventId": "nothing"}, timeout=10)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "EVENT_NOT_FOUND"
    assert requests.get(f"http://{nginx}/health", timeout=10).status_code == 200
    internal = requests.get(f"http://{nginx}/nginx-errors/bad-request", timeout=10)
    assert internal.status_code == 404  # nginx's error answers are its own, not a page


@pytest.mark.parametrize(
    ("name", "request_bytes", "status", "code"),
    [
        (
            "a body over nginx's limit",
            b"POST /api/booking HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200000\r\n\r\n{",
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        ("a request line it cannot read", b"GARBAGE\r\n\r\n", 400, "BAD_REQUEST"),
        (
            "a header it cannot read",
            b"GET /api/status/poll HTTP/1.1\r\nHost: x\r\nBad Header Line\x00\r\n\r\n",
            400,
            "BAD_REQUEST",
        ),
        ("a URI it cannot read", b"GET /%%% HTTP/1.1\r\nHost: x\r\n\r\n", 400, "BAD_REQUEST"),
        ("an HTTP version it does not speak", b"GET / HTTP/2.5\r\nHost: x\r\n\r\n", 505, "BAD_REQUEST"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else None,
)
def test_what_nginx_refuses_itself_is_in_the_envelope(nginx, name, request_bytes, status, code) -> None:
    answer = _raw(nginx, request_bytes)
    assert answer, f"{name}: nginx closed without an answer"
    got, content_type, body = _envelope(answer)
    assert (got, content_type, body["success"], body["error"]["code"]) == (
        status,
        "application/json",
        False,
        code,
    ), answer


def test_a_body_that_stops_coming_is_cut_and_never_reaches_the_app(nginx) -> None:
    """nginx drops a client that stops sending its body (client_body_timeout; 1 s
    here) without an answer: the client is not reading anyway."""
    started = time.monotonic()
    answer = _raw(
        nginx,
        b"POST /api/booking HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"token":',
    )
    assert answer == b"" and time.monotonic() - started < 9  # closed at its deadline, not ours


@pytest.mark.django_db(transaction=True)
def test_the_waiting_room_page_is_rendered_once_per_language_and_served_from_the_cache(
    nginx, make_event
) -> None:
    """2,000,000 arrivals cost no render each: the page of an event is asked of the app
    once per language (nginx keeps it for the app's max-age), whatever cookie a
    returning person's token left; a signed-in person's page is never kept, nor one
    that carries a place (a mail's link). (That the app marks a signed-in person's
    page private: queue_app/tests/test_pages.py.)"""
    event = make_event()
    url = f"http://{nginx}/events/{event.event_id}/"

    def get(**headers: str) -> requests.Response:
        answer = requests.get(url, headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer

    first = get(**{"Accept-Language": "ko-KR,ko;q=0.9"})
    assert first.headers["X-Cache"] == "MISS" and '<html lang="ko">' in first.text
    token_cookie = f"{token_cookie_of(event.event_id)}=00000000-0000-8000-8000-000000000000"
    for headers in ({"Accept-Language": "ko"}, {"Accept-Language": "ko", "Cookie": token_cookie}, {}):
        if not headers:
            headers = {"Cookie": "django_language=ko"}
        again = get(**headers)
        assert (again.headers["X-Cache"], again.content) == ("HIT", first.content), headers
    english = get(**{"Accept-Language": "en-GB,en;q=0.8"})
    assert english.headers["X-Cache"] == "MISS" and '<html lang="en">' in english.text
    assert get(**{"Accept-Language": "de"}).headers["X-Cache"] == "HIT"  # English, as the app says
    assert get(**{"Accept-Language": "ko", "Cookie": "django_language=en"}).content == english.content

    for _ in range(2):  # a signed-in person's page is theirs: asked each time
        assert get(Cookie=f"{settings.SESSION_COOKIE_NAME}=any").headers["X-Cache"] == "BYPASS"
    token = requests.post(f"http://{nginx}/api/queue/join", json={"eventId": event.event_id}, timeout=10)
    signed = notify.link_token(event.event_id, token.json()["data"]["token"])
    for _ in range(2):  # a mail's link carries a place: for that browser only
        linked = requests.get(url, params={notify.LINK_PARAMETER: signed}, timeout=10)
        assert linked.headers["X-Cache"] == "MISS" and "no-store" in linked.headers["Cache-Control"]
