"""/metrics as the tests read it: a scrape parsed into samples, and one sample's value."""

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(client, **extra) -> Samples:
    """GET /metrics through `client` (Django's test client, or a lane's)."""
    resp = client.get("/metrics", **extra)
    assert resp.status_code == 200, resp.content
    assert resp["Content-Type"].startswith("text/plain")
    return parse(resp.content.decode())


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
