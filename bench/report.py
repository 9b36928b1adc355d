"""What a benchmark run tells: a line of progress as it goes, and at its end each
target of the issue against the figure that answers it, and the summary table."""

import time

TARGETS = {
    "poll_ratio": 2.5,  # poll req/s >= 2.5 x the baseline's
    "poll_rps": 2_500,  # the "about 2,500 req/s"
    "join_rps": 2_000,
    "memory_2m_bytes": 128 * 2**20,
    "tick_2m_ms": 5.0,
    "bookings_per_s": 1_000,
    "commands_per_1000_polls": 10,
}


_T0 = time.monotonic()


def say(message: str) -> None:
    """Progress, with seconds since start (a full run takes minutes)."""
    print(f"[{time.monotonic() - _T0:6.0f}s] {message}", flush=True)


def targets(results: dict, lines: tuple[int, ...]) -> list[dict]:
    """Each target of the issue against the figure that answers it."""
    big = results["phases"][str(max(lines))]
    out = [
        {
            "name": f"poll req/s >= {TARGETS['poll_ratio']}x baseline ({max(lines):,} waiting)",
            "measured": big["poll"]["ratio_to_baseline"],
            "met": big["poll"]["ratio_to_baseline"] >= TARGETS["poll_ratio"],
        },
        {
            "name": f"poll >= {TARGETS['poll_rps']:,} req/s ({max(lines):,} waiting)",
            "measured": big["poll"]["rps"],
            "met": big["poll"]["rps"] >= TARGETS["poll_rps"],
        },
        {
            "name": f"join >= {TARGETS['join_rps']:,} req/s",
            "measured": big["join"]["rps"],
            "met": big["join"]["rps"] >= TARGETS["join_rps"],
        },
        {
            "name": f"bookings end to end >= {TARGETS['bookings_per_s']:,}/s",
            "measured": results["booking"]["bookings_per_s"],
            "met": results["booking"]["bookings_per_s"] >= TARGETS["bookings_per_s"],
        },
    ]
    if "2000000" in results["phases"]:
        mem = results["phases"]["2000000"]["memory"]["delta_bytes"]
        out.append(
            {
                "name": "Redis memory for 2,000,000 waiting <= 128 MiB",
                "measured": mem / 2**20,
                "met": mem <= TARGETS["memory_2m_bytes"],
            }
        )
    out.append(
        {
            "name": f"Redis commands per 1,000 polls (waiting) <= {TARGETS['commands_per_1000_polls']}",
            "measured": big["redis_commands_per_1000_polls"],
            "met": big["redis_commands_per_1000_polls"] <= TARGETS["commands_per_1000_polls"],
        }
    )
    tick = results["tick"][0]
    out.append(
        {
            "name": f"tick of 70 at {tick['waiting']:,} waiting <= {TARGETS['tick_2m_ms']} ms (median)",
            "measured": tick["round_trip_median_ms"],
            "met": tick["round_trip_median_ms"] <= TARGETS["tick_2m_ms"],
        }
    )
    return out


def table(results: dict) -> str:
    """The human-readable summary printed at the end of a run."""
    rows = [
        (
            "measurement",
            "req/s",
            "x baseline",
            "x ceiling",
            "p50 ms",
            "p99 ms",
            "non-2xx",
            "server CPU ms/req",
            "cores used",
        )
    ]

    def row(label: str, s: dict, rate: float, server: str) -> tuple[str, ...]:
        return (
            label,
            f"{rate:,.0f}",
            f"{s['ratio_to_baseline']:.2f}",
            f"{s['ratio_to_ceiling']:.2f}" if "ratio_to_ceiling" in s else "",
            f"{s['p50_ms']:.2f}",
            f"{s['p99_ms']:.2f}",
            str(s["non_2xx_total"]),
            f"{s['cpu_ms_per_request'].get(server, 0):.2f}",
            f"{s['cpu_cores'].get('machine', 0):.2f}",
        )

    for waiting, phase in results["phases"].items():
        for name in ("baseline", "ceiling", "poll", "health", "join"):
            if name in phase:
                label = f"{name} ({int(waiting):,} waiting)"
                server = name if name in ("baseline", "ceiling") else "app"
                rows.append(row(label, phase[name], phase[name]["rps"], server))
    b = results["booking"]
    rows.append(row("booking (200s/s)", b, b["bookings_per_s"], "app"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    app, ceiling = results["app_server"], results["ceiling_server"]
    lines.append(
        f"baseline: {results['baseline_server']['command']}\n"
        f"ceiling:  {ceiling['command']}\n"
        f"          raw ASGI poll, {ceiling['worker_class']}; {ceiling['redis_calls']}\n"
        f"app:      {app['command']} ({app['observed_workers']} workers)"
    )
    for waiting, phase in results["phases"].items():
        poll, top, base = phase["poll"], phase["ceiling"], phase["baseline"]
        lines.append(
            f"poll at {int(waiting):,} waiting: {poll['rps']:,.0f} req/s = "
            f"{poll['ratio_to_ceiling']:.2f} x the Python ceiling ({top['rps']:,.0f}), "
            f"{poll['ratio_to_baseline']:.2f} x the baseline ({base['rps']:,.0f}); server CPU per poll "
            f"{poll['cpu_ms_per_request']['app']:.3f} ms = {poll['cpu_per_request_to_ceiling'] or 0:.2f} x "
            f"the ceiling's {top['cpu_ms_per_request']['ceiling']:.3f} ms"
        )
    lines.append("")
    for waiting, phase in results["phases"].items():
        m = phase["memory"]
        lines.append(
            f"Redis memory, {int(waiting):,} waiting: {m['delta_mib']:.1f} MiB, "
            f"{m['bytes_per_person']:.1f} B/person (the event's keys "
            f"{m['event_keys_bytes_per_person']:.2f}, of which nonces {m['nonces_bytes_per_person']:.2f})"
        )
    for t in results["tick"]:
        lines.append(
            f"tick of {t['batch']} at {t['waiting']:,} waiting: median {t['round_trip_median_ms']:.3f} ms, "
            f"p99 {t['round_trip_p99_ms']:.3f} ms, inside Redis {t['inside_redis_mean_ms']:.3f} ms, "
            f"PING {t['ping_median_ms']:.3f} ms"
        )
    lines.append("")
    for t in results["targets"]:
        lines.append(f"[{'met' if t['met'] else 'NOT MET'}] {t['name']}: {t['measured']:,.2f}")
    return "\n".join(lines)
