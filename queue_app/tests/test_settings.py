"""Settings come from the environment; a bad value stops start-up and names itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE = Path(__file__).resolve().parents[2]


def _start(**env) -> subprocess.CompletedProcess:
    # (Not the cluster run's REDIS_CLUSTER: the settings of a plain environment.)
    clean = {k: v for k, v in os.environ.items() if k not in env and k != "REDIS_CLUSTER"}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; "
            "print(s.REDIS_URL, s.ENTRY_BATCH_SIZE, s.BROKER_URL)",
        ],
        cwd=BASE,
        env={**clean, "DJANGO_SETTINGS_MODULE": "ticketing.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ENTRY_BATCH_SIZE", "seventy"),
        ("ACTIVE_USER_TTL_SEC", "0"),
        ("TOTAL_SEATS", "-3"),
        ("PORT", "http"),
        ("REDIS_URL", "localhost:6379"),
        ("RABBITMQ_URL", "rabbit"),
        ("DATABASE_URL", "nosuchdb://x"),
        ("DEBUG", "maybe"),
        ("REDIS_CLUSTER", "maybe"),
        ("TRUSTED_PROXIES", "10.0.0.300"),
    ],
)
def test_a_bad_value_stops_start_up_naming_the_variable(name, value):
    result = _start(**{name: value})
    assert result.returncode != 0
    assert name in result.stderr, result.stderr


def test_redis_host_port_password_build_the_url():
    result = _start(REDIS_URL="", REDIS_HOST="cache.internal", REDIS_PORT="6380", REDIS_PASSWORD="p@ss")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "redis://:p%40ss@cache.internal:6380/0"


def test_the_broker_defaults_to_redis_and_takes_rabbitmq_url():
    out = _start(REDIS_URL="redis://h:1/0", RABBITMQ_URL="").stdout.split()
    assert out[2] == "redis://h:1/0"
    out = _start(REDIS_URL="redis://h:1/0", RABBITMQ_URL="amqp://guest:guest@mq:5672//").stdout.split()
    assert out[2] == "amqp://guest:guest@mq:5672//"


def test_a_redis_cluster_needs_rabbitmq_for_the_broker():
    result = _start(REDIS_URL="redis://h:1/0", REDIS_CLUSTER="true", RABBITMQ_URL="")
    assert result.returncode != 0
    assert "REDIS_CLUSTER=true needs RABBITMQ_URL" in result.stderr, result.stderr
    result = _start(REDIS_URL="redis://h:1/0", REDIS_CLUSTER="true", RABBITMQ_URL="amqp://mq:5672//")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[2] == "amqp://mq:5672//"
    result = _start(REDIS_URL="redis://h:1/0", REDIS_CLUSTER="true", RABBITMQ_URL="redis://broker:6379/0")
    assert result.returncode == 0, result.stderr  # a plain Redis of its own is a broker


def test_env_example_covers_the_seed_variables():
    names = {
        line.split("=", 1)[0].strip()
        for line in (BASE / ".env.example").read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    }
    seed = {
        "PORT",
        "NODE_ENV",
        "REDIS_HOST",
        "REDIS_PORT",
        "REDIS_PASSWORD",
        "ENTRY_BATCH_SIZE",
        "ACTIVE_USER_TTL_SEC",
        "EVENT_ID",
        "TOTAL_SEATS",
        "RABBITMQ_URL",
        "BOOKING_QUEUE",
        "DATABASE_URL",
    }
    assert seed <= names
