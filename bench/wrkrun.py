"""Running wrk and reading its figures.

Each script in bench/wrk/ ends with one `BENCH_JSON {...}` line (see common.lua), so
the numbers come from wrk itself rather than from parsing its human-readable table.
"""

import json
import shutil
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import cpu

WRK_DIR = Path(__file__).resolve().parent / "wrk"


@dataclass(frozen=True)
class Load:
    """wrk's parameters, the same for every measurement of a run."""

    threads: int = 2
    connections: int = 64
    duration_s: int = 15
    timeout_s: int = 10


@dataclass
class Run:
    """One wrk run's figures."""

    requests: int
    duration_s: float
    latency_ms: dict[str, float]
    statuses: dict[str, int]
    codes: dict[str, int]
    socket_errors: dict[str, int]
    exhausted_threads: int
    # Cores used by each part of the machine during the run (bench/cpu.py).
    cpu_cores: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        """Answers with a 2xx status."""
        return sum(n for s, n in self.statuses.items() if s.startswith("2"))

    @property
    def non_2xx(self) -> int:
        return sum(n for s, n in self.statuses.items() if not s.startswith("2"))

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s

    @property
    def ok_per_s(self) -> float:
        return self.ok / self.duration_s


@dataclass
class Series:
    """Repeats of one measurement and their medians."""

    name: str
    runs: list[Run] = field(default_factory=list)

    def median(self, value: str) -> float:
        """Median over the runs of a Run property or latency percentile."""
        return statistics.median(_pick(run, value) for run in self.runs)

    def total(self, value: str) -> int:
        """Sum over the runs."""
        return sum(int(_pick(run, value)) for run in self.runs)

    def summary(self) -> dict:
        """The medians that the report shows, and every run for the JSON."""
        groups = self.runs[0].cpu_cores.keys() if self.runs else ()
        return {
            "cpu_cores": {g: statistics.median(r.cpu_cores[g] for r in self.runs) for g in groups},
            "cpu_ms_per_request": {
                g: statistics.median(1000 * r.cpu_cores[g] / r.rps for r in self.runs if r.requests)
                for g in groups
            },
            "rps": self.median("rps"),
            "ok_per_s": self.median("ok_per_s"),
            "p50_ms": self.median("p50"),
            "p90_ms": self.median("p90"),
            "p99_ms": self.median("p99"),
            "non_2xx_total": self.total("non_2xx"),
            "socket_errors_total": sum(sum(run.socket_errors.values()) for run in self.runs),
            # Runs during which other work took > 0.2 cores (bench/cpu.py): still in the median.
            "disturbed_runs": sum(cpu.disturbed(run.cpu_cores) for run in self.runs),
            "runs": [
                {**asdict(run), "rps": run.rps, "ok_per_s": run.ok_per_s, "non_2xx": run.non_2xx}
                for run in self.runs
            ],
        }


def _pick(run: Run, value: str) -> float:
    if value in run.latency_ms:
        return run.latency_ms[value]
    return getattr(run, value)


def wrk_version() -> str:
    """wrk's own version line, for the record of the machine."""
    done = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    return (done.stdout + done.stderr).splitlines()[0].strip()


def run_wrk(url: str, script: str, args: list[str], load: Load, *, duration_s: int | None = None) -> Run:
    """One wrk run of `bench/wrk/<script>.lua` against `url`."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    argv = [
        "wrk",
        f"-t{load.threads}",
        f"-c{load.connections}",
        f"-d{duration_s or load.duration_s}s",
        f"--timeout={load.timeout_s}s",
        "--latency",
        "-s",
        str(WRK_DIR / f"{script}.lua"),
        url,
    ]
    if args:
        argv += ["--", *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    latency = {k: v / 1000 for k, v in data["latency_us"].items()}
    return Run(
        requests=data["requests"],
        duration_s=data["duration_us"] / 1e6,
        latency_ms=latency,
        statuses=data["statuses"],
        codes=data["codes"],
        socket_errors=data["errors"],
        exhausted_threads=data["exhausted_threads"],
    )
