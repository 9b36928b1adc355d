"""deploy/nginx.conf run by a real nginx in front of the production server: what
nginx refuses itself (a body over its limit, a request it cannot read, one too slow
to arrive) reaches the client in the app's JSON envelope, as the app answers them."""

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from django.conf import settings

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
    ):
        assert text.count(old) == 1, old  # the deployed file still says it
        text = text.replace(old, new)
    return f"pid {tmp / 'nginx.pid'};\n" + text


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
