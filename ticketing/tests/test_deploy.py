"""The production shape, checked without Docker: docker-compose.yml and
deploy/nginx.conf read as text, and Django's deploy checks run with the environment
compose would give the web service. Plus the settings for a TLS proxy, and the
warning for an X-Forwarded-For nobody trusts."""

import base64
import ipaddress
import json
import logging
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.http import HttpResponse
from django.middleware.security import SecurityMiddleware
from django.test import Client, RequestFactory

from ticketing import ratelimit

BASE_DIR = Path(__file__).resolve().parents[2]
COMPOSE_TEXT = (BASE_DIR / "docker-compose.yml").read_text()
NGINX_CONF = (BASE_DIR / "deploy" / "nginx.conf").read_text()
APP_SERVICES = ("web", "worker", "beat")
REQUIRED = (
    "SECRET_KEY",
    "DRAW_SIGNING_KEY",
    "ALLOWED_HOSTS",
    "REDIS_PASSWORD",
    "POSTGRES_PASSWORD",
    "RABBITMQ_PASSWORD",
)

# What an operator's .env holds: the required variables only, so every other
# value is compose's default.
DOT_ENV = {
    "SECRET_KEY": secrets.token_urlsafe(50),
    "DRAW_SIGNING_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
    "ALLOWED_HOSTS": "tickets.example.com",
    "REDIS_PASSWORD": secrets.token_hex(24),
    "POSTGRES_PASSWORD": secrets.token_hex(24),
    "RABBITMQ_PASSWORD": secrets.token_hex(24),
}

_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?)([-?])([^}]*))?\}|\$(\w+)")


def interpolate(value: object, env: dict[str, str]) -> object:
    """Compose's interpolation: $$, ${VAR}, ${VAR:-default}, ${VAR-default},
    ${VAR:?error} and ${VAR?error} (the colon forms treat empty as unset)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(5)
        colon, op, arg = m.group(2), m.group(3), m.group(4)
        missing = name not in env or (colon == ":" and env[name] == "")
        if op == "-" and missing:
            return arg
        if op == "?" and missing:
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return env.get(name, "")

    return _VARIABLE.sub(one, value)


def compose(env: dict[str, str] = DOT_ENV) -> dict:
    return interpolate(yaml.safe_load(COMPOSE_TEXT), env)


def service_env(name: str, env: dict[str, str] = DOT_ENV) -> dict[str, str]:
    return {k: str(v) for k, v in compose(env)["services"][name]["environment"].items()}


def test_every_long_running_service_has_a_healthcheck() -> None:
    services = compose()["services"]
    assert {"nginx", "web", "worker", "beat", "redis", "postgres", "rabbitmq"} <= set(services)
    for name, service in services.items():
        if service.get("restart") == "no":  # a one-shot (migrate) is waited for, not watched
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert "/health" in str(services["web"]["healthcheck"]["test"])


def test_only_nginx_publishes_a_port() -> None:
    services = compose()["services"]
    assert [name for name, s in services.items() if s.get("ports")] == ["nginx"]
    assert services["nginx"]["ports"] == ["8080:80"]


@pytest.mark.parametrize("name", REQUIRED)
def test_compose_refuses_to_start_without_each_secret(name: str) -> None:
    without = {k: v for k, v in DOT_ENV.items() if k != name}
    with pytest.raises(ValueError, match=name):
        compose(without)
    with pytest.raises(ValueError, match=name):
        compose({**without, name: ""})
    # Every use is required, none has a default to fall back on.
    uses = re.findall(r"\$\{" + name + r"([^}]*)\}", COMPOSE_TEXT)
    assert uses and all(use.startswith(":?") for use in uses), uses


def test_redis_has_a_password_and_keeps_an_append_only_file() -> None:
    services = compose()
    redis_command = services["services"]["redis"]["command"]
    assert f"--requirepass {DOT_ENV['REDIS_PASSWORD']}" in redis_command
    assert "--appendonly yes" in redis_command
    for name in APP_SERVICES:
        url = service_env(name)["REDIS_URL"]
        assert url == f"redis://:{DOT_ENV['REDIS_PASSWORD']}@redis:6379/0"


def test_web_worker_and_beat_run_one_image() -> None:
    services = compose()["services"]
    images = {services[name]["image"] for name in (*APP_SERVICES, "migrate")}
    builds = {str(services[name].get("build")) for name in (*APP_SERVICES, "migrate")}
    assert images == {"ticketing-app"}
    assert builds == {"."}
    assert "celery -A ticketing worker" in services["worker"]["command"]
    assert "celery -A ticketing beat" in services["beat"]["command"]


def test_the_app_trusts_nginx_network_and_nothing_wider() -> None:
    whole = compose()
    subnet = ipaddress.ip_network(whole["networks"]["default"]["ipam"]["config"][0]["subnet"])
    trusted = [ipaddress.ip_network(n) for n in service_env("web")["TRUSTED_PROXIES"].split(",")]
    assert trusted == [subnet]
    assert subnet.num_addresses <= 256


def _directive(name: str) -> str:
    found = re.findall(rf"^\s*{name}\s+([^;]+);", NGINX_CONF, re.MULTILINE)
    assert len(found) == 1, f"{name}: {found}"
    return found[0].strip()


def _seconds(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(s|m)?", value).groups()
    return int(number) * (60 if unit == "m" else 1)


def test_nginx_buffers_requests_limits_bodies_and_times_out() -> None:
    assert "proxy_request_buffering off" not in NGINX_CONF
    assert _directive("proxy_request_buffering") == "on"
    for name in ("client_header_timeout", "client_body_timeout", "proxy_read_timeout"):
        assert 1 <= _seconds(_directive(name)) <= 60, name
    size = re.fullmatch(r"(\d+)k", _directive("client_max_body_size"))
    assert size and 10 <= int(size.group(1)) <= 1024  # above the API's own 10 KB answer
    assert set(re.findall(r"^\s*proxy_pass\s+([^;]+);", NGINX_CONF, re.MULTILINE)) == {"http://app"}
    assert re.search(r"upstream app \{\s*server web:8000;", NGINX_CONF)
    # A location that sets a proxy header sets them all (nginx inherits none then): each
    # place that sets any sets these, the same.
    headers = [h.split(None, 1) for h in re.findall(r"proxy_set_header\s+([^;]+);", NGINX_CONF)]
    places = sum(name == "Host" for name, _ in headers)
    for name, value in (
        ("X-Forwarded-For", "$proxy_add_x_forwarded_for"),
        ("X-Forwarded-Proto", "$forwarded_proto"),
        ("Host", "$http_host"),  # with the port: CSRF compares origins with it
        ("Connection", '""'),
    ):
        assert [v for n, v in headers if n == name] == [value] * places, name


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=BASE_DIR,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_under_the_compose_environment() -> None:
    done = _check_deploy(service_env("web"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_check_deploy_catches_a_plain_http_setup() -> None:
    """The check above is not vacuous: without the proxy settings it fails."""
    done = _check_deploy(
        service_env("web", {**DOT_ENV, "BEHIND_TLS_PROXY": "false", "SECURE_HSTS_SECONDS": "0"})
    )
    assert done.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):
        assert f"security.{warning}" in done.stderr


@pytest.fixture
def behind_tls_proxy(settings) -> None:
    """The settings compose's environment gives (ticketing/settings.py)."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.ALLOWED_HOSTS = service_env("web")["ALLOWED_HOSTS"].split(",")


def test_plain_http_is_redirected_but_health_answers_the_healthcheck(behind_tls_proxy) -> None:
    client = Client()
    page = client.get("/accounts/login/", HTTP_HOST="tickets.example.com")
    assert page.status_code == 301
    assert page["Location"] == "https://tickets.example.com/accounts/login/"
    # What the web container's healthcheck asks: plain HTTP, Host localhost.
    health = client.get("/health", HTTP_HOST="localhost")
    assert health.status_code == 200
    assert "Strict-Transport-Security" not in health  # HSTS is for https only
    # Prometheus scrapes a server directly, over plain HTTP too.
    security = SecurityMiddleware(lambda request: HttpResponse())
    assert security.process_request(RequestFactory().get("/metrics", HTTP_HOST="localhost")) is None


@pytest.mark.django_db
def test_a_form_posted_over_https_passes_csrf(behind_tls_proxy) -> None:
    """Before the proxy header was believed, every form POST behind TLS was a
    CSRF failure: the browser's https Origin did not match an http request."""
    client = Client(enforce_csrf_checks=True)
    https = {"HTTP_HOST": "tickets.example.com", "HTTP_X_FORWARDED_PROTO": "https"}
    page = client.get("/accounts/login/", **https)
    assert page.status_code == 200
    assert "max-age=31536000" in page["Strict-Transport-Security"]
    assert client.cookies["csrftoken"]["secure"]
    answer = client.post(
        "/accounts/login/",
        {"username": "nobody", "password": "wrong", "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
        HTTP_ORIGIN="https://tickets.example.com",
        **https,
    )
    assert answer.status_code == 200  # the form again, with its error: not CSRF's 403


@pytest.fixture
def fresh_client_ip(settings, monkeypatch) -> None:
    monkeypatch.setattr(ratelimit, "_warned_untrusted_xff", False)
    ratelimit._trusted.cache_clear()
    yield
    ratelimit._trusted.cache_clear()


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ticketing.ratelimit" and r.levelno == logging.WARNING
    ]


def test_forwarded_for_with_no_trusted_proxy_warns_once(settings, fresh_client_ip, caplog) -> None:
    settings.TRUSTED_PROXIES = ()
    caplog.set_level(logging.WARNING, logger="ticketing.ratelimit")
    assert ratelimit.client_ip({"REMOTE_ADDR": "198.51.100.9"}) == "198.51.100.9"
    assert _warnings(caplog) == []

    meta = {"REMOTE_ADDR": "172.30.0.5", "HTTP_X_FORWARDED_FOR": "203.0.113.7"}
    assert ratelimit.client_ip(meta) == "172.30.0.5"  # the proxy, as warned
    assert ratelimit.client_ip(meta) == "172.30.0.5"
    (warning,) = _warnings(caplog)
    assert "TRUSTED_PROXIES" in warning and "172.30.0.5" in warning


def test_forwarded_for_from_a_trusted_proxy_is_believed_silently(settings, fresh_client_ip, caplog) -> None:
    settings.TRUSTED_PROXIES = (ipaddress.ip_network("172.30.0.0/24"),)
    caplog.set_level(logging.WARNING, logger="ticketing.ratelimit")
    meta = {"REMOTE_ADDR": "172.30.0.5", "HTTP_X_FORWARDED_FOR": "10.9.9.9, 203.0.113.7"}
    assert ratelimit.client_ip(meta) == "203.0.113.7"
    assert _warnings(caplog) == []


_SETTINGS_SHOWN = (
    "import django, json; django.setup(); from django.conf import settings as s; print(json.dumps(["
    "s.SECURE_PROXY_SSL_HEADER, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE]))"
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, [None, False, False, False]),  # a developer's http://localhost
        ({"BEHIND_TLS_PROXY": "true"}, [["HTTP_X_FORWARDED_PROTO", "https"], True, True, True]),
        (
            {"BEHIND_TLS_PROXY": "true", "DEBUG": "true"},
            [["HTTP_X_FORWARDED_PROTO", "https"], False, False, False],
        ),
        (
            {"BEHIND_TLS_PROXY": "true", "SECURE_SSL_REDIRECT": "false"},
            [["HTTP_X_FORWARDED_PROTO", "https"], False, True, True],
        ),
    ],
)
def test_tls_settings_follow_the_environment(env: dict[str, str], expected: list) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SETTINGS_SHOWN],
        cwd=BASE_DIR,
        env={
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "ticketing.settings",
            "SECRET_KEY": "x",
            "DRAW_SIGNING_KEY": base64.b64encode(bytes(32)).decode(),
            # Only read, never reached: the settings want to be told where the services are.
            "REDIS_URL": "redis://127.0.0.1:1/0",
            "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nothing",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == expected
