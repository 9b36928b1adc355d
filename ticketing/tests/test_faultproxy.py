"""The fault proxy against the real Postgres and Redis: a cut before a message means the
server never got it, a cut after it means the server applied it and the client got an error."""

import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from testsupport import require
from ticketing.tests.faultproxy import (
    THREAD_PREFIX,
    Action,
    FaultProxy,
    Message,
    _PostgresFramer,
    _RedisFramer,
)


def is_commit(m: Message) -> bool:
    return m.kind == "Q" and m.text.strip().upper() == "COMMIT"


def proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


# --- Postgres ------------------------------------------------------------------------------------


@dataclass
class Pg:
    proxy: FaultProxy
    table: str
    direct: dict  # psycopg.connect() arguments for the server itself, not through the proxy

    def connect(self, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.proxy.postgres_url(self.direct["dbname"]), connect_timeout=5, **kwargs)

    def rows(self) -> list[int]:
        with psycopg.connect(**self.direct) as conn:
            return [r[0] for r in conn.execute(f"SELECT id FROM {self.table} ORDER BY id")]


@pytest.fixture
def pg(db):
    # Every commit here is made on connections of their own (direct, through the proxy, or
    # in a subprocess), never on the test's Django connection: `db` suffices, and spares a
    # flush of the test database (which can deadlock with other test runs sharing it).
    conf = settings.DATABASES["default"]
    host, port = conf.get("HOST") or "127.0.0.1", int(conf.get("PORT") or 5432)
    direct = {"host": host, "port": port, "user": conf.get("USER") or "postgres", "dbname": conf["NAME"]}
    table = f"faultproxy_probe_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**direct, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
    try:
        with FaultProxy("postgres", port, host) as proxy:
            yield Pg(proxy, table, direct)
    finally:
        with psycopg.connect(**direct, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.parametrize("action, committed", [(Action.CUT_AFTER, [1]), (Action.CUT_BEFORE, [])])
def test_postgres_cut_at_commit(pg, action, committed):
    pg.proxy.rule = lambda m: action if is_commit(m) else Action.PASS
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {pg.table} VALUES (1)")
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
        assert conn.broken
    assert [(m.text, a) for m, a in pg.proxy.cuts] == [("COMMIT", action)]
    assert pg.rows() == committed
    assert pg.proxy.seen[("postgres", "Q")] >= 3  # BEGIN, INSERT, COMMIT


@pytest.mark.parametrize("action, committed", [(Action.CUT_AFTER, [7]), (Action.CUT_BEFORE, [])])
def test_postgres_extended_protocol_cut_after_waits_for_sync(pg, action, committed):
    """A bound parameter makes psycopg send Parse/Bind/Describe/Execute/Sync; Postgres runs the
    statement (and commits it, in autocommit) only at the Sync."""
    pg.proxy.rule = lambda m: action if m.kind == "P" and m.text.startswith("INSERT") else Action.PASS
    with pg.connect(autocommit=True) as conn:
        with pytest.raises(psycopg.OperationalError):
            conn.execute(f"INSERT INTO {pg.table} VALUES (%s)", [7])
    assert [(m.kind, a) for m, a in pg.proxy.cuts] == [("P", action)]
    assert pg.rows() == committed
    assert pg.proxy.seen[("postgres", "S")] == (1 if action is Action.CUT_AFTER else 0)


def test_postgres_client_sees_the_cut_only_once_the_server_has_applied_the_statement(pg):
    slow = f"INSERT INTO {pg.table} SELECT 9 FROM pg_sleep(0.5)"
    pg.proxy.rule = lambda m: Action.CUT_AFTER if m.text == slow else Action.PASS
    with pg.connect(autocommit=True) as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            conn.execute(slow)
    assert time.monotonic() - started >= 0.5
    assert [(m.text, a) for m, a in pg.proxy.cuts] == [(slow, Action.CUT_AFTER)]
    assert pg.rows() == [9]


DJANGO_COMMIT = """
import django
django.setup()
from django.db import connection, transaction
try:
    with transaction.atomic():
        connection.cursor().execute("INSERT INTO {table} VALUES (3)")
    print("no error")
except Exception as exc:
    print(f"{{type(exc).__module__}}.{{type(exc).__name__}}")
"""


def test_django_commit_is_a_simple_query_and_a_cut_after_it_loses_the_acknowledgement(pg):
    commits: list[Message] = []
    pg.proxy.rule = lambda m: (commits.append(m), Action.CUT_AFTER)[1] if is_commit(m) else Action.PASS
    env = {
        **os.environ,
        "DATABASE_URL": pg.proxy.postgres_url(pg.direct["dbname"]),
        "DJANGO_SETTINGS_MODULE": "ticketing.settings",
    }
    out = subprocess.run(
        [sys.executable, "-c", DJANGO_COMMIT.format(table=pg.table)],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip().splitlines()[-1:] == ["django.db.utils.OperationalError"], out.stderr
    assert len(commits) == 1
    assert pg.proxy.cuts == [(commits[0], Action.CUT_AFTER)]
    assert pg.rows() == [3]
    # The broken connection is replaced at once: a second startup at least (the pool
    # may open more).
    assert pg.proxy.seen[("postgres", "startup")] >= 2
    assert pg.proxy.seen[("postgres", "P")] == 0  # no extended protocol at all


def test_postgres_cut_all_breaks_an_open_connection(pg):
    with pg.connect(autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        pg.proxy.cut_all()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")


# --- Redis -----------------------------------------------------------------------------------------


@pytest.fixture
def proxy():
    url = urlsplit(settings.REDIS_URL)
    require(url.scheme == "redis", f"REDIS_URL={settings.REDIS_URL!r} is not redis://host:port")
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        require(False, f"Redis at {settings.REDIS_URL} does not answer: {exc}")
    with FaultProxy("redis", url.port or 6379, url.hostname or "127.0.0.1") as proxy:
        yield proxy


@pytest.fixture
def direct() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


@pytest.fixture
def keys(direct):
    made = [f"faultproxy:{uuid.uuid4().hex}:{i}" for i in range(5)]
    yield made
    direct.delete(*made)


def through(proxy: FaultProxy, **kwargs) -> redis.Redis:
    """A client of the proxy that does not retry, so a cut shows as an error."""
    db = int(urlsplit(settings.REDIS_URL).path.strip("/") or 0)
    return redis.Redis.from_url(proxy.redis_url(db), retry=Retry(NoBackoff(), 0), socket_timeout=10, **kwargs)


@pytest.mark.parametrize("action, applied", [(Action.CUT_AFTER, True), (Action.CUT_BEFORE, False)])
def test_redis_cut_at_set(proxy, direct, keys, action, applied):
    key = keys[0]
    proxy.rule = lambda m: action if m.kind == "SET" and m.args[:1] == (key.encode(),) else Action.PASS
    client = through(proxy)
    assert client.ping()
    with pytest.raises(redis.ConnectionError):
        client.set(key, "v")
    assert [(m.kind, m.args[0], a) for m, a in proxy.cuts] == [("SET", key.encode(), action)]
    assert direct.get(key) == (b"v" if applied else None)
    assert proxy.seen[("redis", "SET")] == 1


@pytest.mark.parametrize("action, applied", [(Action.CUT_BEFORE, 2), (Action.CUT_AFTER, 3)])
def test_redis_pipeline_cut_at_the_third_command(proxy, direct, keys, action, applied):
    third = keys[2].encode()
    proxy.rule = lambda m: action if m.kind == "SET" and m.args[0] == third else Action.PASS
    pipe = through(proxy).pipeline(transaction=False)
    for key in keys:
        pipe.set(key, "v")
    with pytest.raises(redis.ConnectionError):
        pipe.execute()
    assert [(m.kind, m.args[0], a) for m, a in proxy.cuts] == [("SET", third, action)]
    assert [direct.get(key) for key in keys] == [b"v"] * applied + [None] * (len(keys) - applied)


def test_redis_refusing_and_cut_all(proxy):
    proxy.refusing = True
    with pytest.raises(redis.ConnectionError):
        through(proxy).ping()
    proxy.refusing = False
    client = through(proxy, single_connection_client=True)
    assert client.ping()
    proxy.cut_all()
    with pytest.raises(redis.ConnectionError):
        client.ping()


def test_redis_cut_all_breaks_a_command_in_flight(proxy, keys):
    client = through(proxy)
    errors = []

    def block() -> None:
        try:
            client.blpop([keys[0]], timeout=5)
        except redis.ConnectionError as exc:
            errors.append(exc)

    waiter = threading.Thread(target=block, daemon=True)
    waiter.start()
    deadline = time.monotonic() + 30
    while proxy.seen[("redis", "BLPOP")] == 0:
        assert time.monotonic() < deadline, "BLPOP never reached the proxy"
        time.sleep(0.01)
    proxy.cut_all()
    waiter.join(30)
    # The cut broke it: a BLPOP that ran out would have answered None, no error.
    assert not waiter.is_alive()
    assert len(errors) == 1


def test_a_failing_rule_passes_the_message(proxy, caplog):
    proxy.rule = lambda m: 1 / 0
    assert through(proxy).ping()
    assert "the rule failed" in caplog.text
    assert proxy.cuts == []


def test_many_connections_and_no_thread_left_after_close(proxy, direct, keys):
    prefix = keys[0]
    failures: list[BaseException] = []
    clients = [through(proxy) for _ in range(30)]  # kept: their connections stay open until close()

    def work(n: int) -> None:
        client = clients[n]
        try:
            for i in range(25):
                client.set(f"{prefix}:{n}", i)
                assert client.get(f"{prefix}:{n}") == str(i).encode()
        except BaseException as exc:  # noqa: B036 - reported below, whatever it is
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(30)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    direct.delete(*[f"{prefix}:{n}" for n in range(30)])
    assert failures == []
    assert proxy.seen[("redis", "SET")] == proxy.seen[("redis", "GET")] == 30 * 25
    assert len(proxy_threads()) >= 1 + 2 * 30  # the clients' pooled connections are still open
    proxy.close()  # without waiting for the clients to hang up: it cuts them
    deadline = time.monotonic() + 30
    while proxy_threads():
        assert time.monotonic() < deadline, proxy_threads()
        time.sleep(0.05)


# --- Framing ---------------------------------------------------------------------------------------


def test_redis_framing_byte_by_byte_and_many_per_read():
    wire = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n*1\r\n$4\r\nping\r\nGET  k\r\n\r\n"
    framer = _RedisFramer()
    one_by_one = [f for i in range(len(wire)) for f in framer.feed(wire[i : i + 1])]
    for frames in (_RedisFramer().feed(wire), one_by_one):
        assert b"".join(raw for _, raw in frames) == wire
        messages = [m for m, _ in frames if m is not None]
        assert [(m.kind, m.args) for m in messages] == [
            ("SET", (b"k", b"a\r\nb")),
            ("PING", ()),
            ("GET", (b"k",)),
        ]
        assert messages[0].text == "k a\r\nb"


def test_postgres_framing():
    def typed(kind: bytes, body: bytes) -> bytes:
        return kind + (len(body) + 4).to_bytes(4, "big") + body

    ssl = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")
    startup_body = (196608).to_bytes(4, "big") + b"user\0postgres\0\0"
    startup = (len(startup_body) + 4).to_bytes(4, "big") + startup_body
    wire = ssl + startup + typed(b"Q", b"COMMIT\0") + typed(b"P", b"s1\0SELECT $1\0\0\0") + typed(b"S", b"")
    framer = _PostgresFramer()
    frames = [f for i in range(0, len(wire), 3) for f in framer.feed(wire[i : i + 3])]
    assert b"".join(raw for _, raw in frames) == wire
    assert [(m.kind, m.text) for m, _ in frames] == [
        ("ssl_request", ""),
        ("startup", ""),
        ("Q", "COMMIT"),
        ("P", "SELECT $1"),
        ("S", ""),
    ]
    tls = _PostgresFramer()
    assert tls.feed(ssl)[0][0].kind == "ssl_request"
    assert tls.feed(b"\x16\x03\x01\x02\x00") == [(None, b"\x16\x03\x01\x02\x00")]  # TLS: passed through
