"""Who used the CPU during a measurement: the app's workers, Redis, Postgres, RabbitMQ,
wrk, and everything else on the machine.

On a small machine the load generator, the service and its backing services share the
cores, so a figure is only understood next to where the cores went. Read from /proc
(utime + stime of each process, and the machine's busy time); no process is touched.
"""

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _proc_times() -> dict[int, tuple[str, int, float]]:
    """pid -> (command name, parent pid, CPU seconds so far)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry.name)] = (name, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    return out


def _machine_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine spent busy, and those the hypervisor took (steal)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def _children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Snapshot:
    """CPU seconds so far: per process, the machine's busy and stolen time, our children."""

    procs: dict[int, tuple[str, int, float]]
    busy: float
    steal: float
    children: float


def snapshot() -> Snapshot:
    """Take one; two of them around a measurement give its CPU use."""
    return Snapshot(_proc_times(), *_machine_seconds(), _children_seconds())


def usage(before: Snapshot, after: Snapshot, seconds: float, groups: dict[str, Callable]) -> dict[str, float]:
    """Cores used per group between two snapshots (CPU seconds per second).

    `groups` maps a name to a predicate on (pid, name, parent pid). "wrk" is this
    process' waited-for children (the wrk run), "other" whatever the machine did
    besides, "machine" the total busy time, "steal" what the hypervisor gave to
    other guests (time our processes wanted a core and did not get one).
    """
    used: dict[str, float] = {name: 0.0 for name in groups}
    for pid, (name, ppid, cpu) in after.procs.items():
        start = before.procs.get(pid)
        delta = cpu - (start[2] if start and start[0] == name else 0.0)
        for group, belongs in groups.items():
            if belongs(pid, name, ppid):
                used[group] += delta
                break
    used["wrk"] = after.children - before.children
    machine = after.busy - before.busy
    used["other"] = max(0.0, machine - sum(used.values()))
    used["machine"] = machine
    used["steal"] = after.steal - before.steal
    return {k: round(v / seconds, 3) for k, v in used.items()}


def disturbed(cores: dict[str, float], limit: float = 0.2) -> bool:
    """Whether something outside the measurement took a noticeable share of the cores."""
    return cores.get("other", 0) + cores.get("steal", 0) > limit
