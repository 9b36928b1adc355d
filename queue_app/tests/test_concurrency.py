"""Real concurrent clients over real HTTP: the order of the line is exact."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.conf import settings


def _join(base: str, event_id: str) -> dict:
    resp = requests.post(f"{base}/api/queue/join", json={"eventId": event_id}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def _poll(base: str, token: str, event_id: str) -> dict:
    resp = requests.get(f"{base}/api/status/poll", params={"token": token, "eventId": event_id}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def test_200_concurrent_joins_get_200_distinct_ranks(second_server, event):
    # gunicorn, as in production: Django's test server's listen backlog (10) would
    # reset some of 200 simultaneous connections.
    with ThreadPoolExecutor(max_workers=200) as pool:
        joined = list(pool.map(lambda _: _join(second_server, event.event_id), range(200)))
        # Each process's copy of the line is at most one refresh behind (docs/line.md).
        time.sleep(settings.QUEUE_LINE_REFRESH_MS / 1000 + 0.05)
        polled = list(pool.map(lambda j: _poll(second_server, j["token"], event.event_id), joined))
    assert len({j["token"] for j in joined}) == 200
    assert sorted(p["rank"] for p in polled) == list(range(1, 201))
    assert {p["totalWaiting"] for p in polled} == {200}
    assert all(p["ahead"] + 1 + p["behind"] == 200 for p in polled)
    # Arrival order and the clock agree: a better rank never joined later.
    by_rank = sorted(zip(polled, joined, strict=True), key=lambda pj: pj[0]["rank"])
    times = [j["joinedAt"] for _, j in by_rank]
    assert times == sorted(times)


@pytest.fixture
def second_server(gunicorn) -> str:
    """Another app server process on the same Redis (gunicorn, as in production)."""
    base, _ = gunicorn({"RATE_LIMIT_JOIN": "0"})
    return base


def test_arrival_order_is_fair_across_app_servers(live_server, second_server, event):
    servers = [live_server.url, second_server]
    # Alternate servers: whoever came first is ahead, whichever server they hit.
    tokens = [_join(servers[i % 2], event.event_id)["token"] for i in range(20)]
    ranks = [_poll(servers[(i + 1) % 2], t, event.event_id)["rank"] for i, t in enumerate(tokens)]
    assert ranks == list(range(1, 21))

    # Both servers at once: every rank distinct, and each client's own joins in order.
    def client(base: str) -> list[str]:
        return [_join(base, event.event_id)["token"] for _ in range(50)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        batches = list(pool.map(client, servers * 4))
    ranks_by_client = [[_poll(live_server.url, t, event.event_id)["rank"] for t in b] for b in batches]
    every = sorted(rank for ranks in ranks_by_client for rank in ranks)
    assert every == list(range(21, 421))
    assert all(ranks == sorted(ranks) for ranks in ranks_by_client)
