"""What the integration tests share: the tools a job needs, and reading its Prometheus snapshots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from scripts.promtext import samples as prom_samples
from sim.cluster.layout import ROOT


def require_tools(paths: list[Path]) -> None:
    """`make test` builds the tools first; only a bare pytest run can miss one."""
    missing = [str(t) for t in paths if not t.exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `make tools` (make test does)")


# What the simulated demo jobs run for real: LMCache, the vllm-router variant, sglang-router, AIPerf.
DEMO_TOOLS = [
    ROOT / ".venv-lmcache/bin/lmcache",
    ROOT / ".venv-router/bin/vllm-router",
    ROOT / ".venv-sglang-router/bin/python",
    ROOT / ".venv-bench/bin/aiperf",
]


@pytest.fixture(scope="session")
def demo_tools() -> None:
    require_tools(DEMO_TOOLS)


def metric(path: Path, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples whose labels include `labels`; it must have some."""
    values = prom_samples(path.read_text(), name, *(f'{k}="{v}"' for k, v in labels.items()))
    assert values, f"{name}{labels or ''} not in {path.name}"
    return sum(values)


def run_demo(
    config: str,
    out: Path,
    *extra: str,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    expect: int = 0,
    retry_cause: str | None = None,
) -> tuple[subprocess.CompletedProcess, Path]:
    """`python -m sim.demo CONFIG` as `make demo` runs it, ENV added to its environment (a simulator fault);
    it must exit EXPECT. A job that failed of RETRY_CAUSE (an upstream flake the job itself names, e.g. a
    stalled Mooncake transfer) runs once more, with a warning in the test summary. (the output, the run
    folder)"""

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "sim.demo", config, "--out", str(out), "--timeout", str(timeout), *extra],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout + 300,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    done = run()
    cause = retry_cause and re.search(rf"^cause: {re.escape(retry_cause)} \(.*$", done.stdout, re.M)
    if done.returncode != expect and cause:
        warnings.warn(
            f"{config}: the job failed of a known upstream flake, run once more: {cause[0]}", stacklevel=2
        )
        done = run()
    folder = re.search(r"^run folder: (.+)$", done.stdout, re.M)
    if done.returncode != expect:  # the run folder is gone with the CI machine: say what its logs said
        pytest.fail(f"exit code {done.returncode}, not {expect}\n{done.stdout}\n{done.stderr}"
                    + (log_problems(Path(folder[1])) if folder else ""), pytrace=False)  # fmt: skip
    return done, Path(folder[1])


LOG_PROBLEM = re.compile(r"ERROR|Error|Traceback|WARNING|FAILED|failed")


def log_problems(run_dir: Path, per_file: int = 8, width: int = 300) -> str:
    """The last lines of each of a run's logs (engines, router, AIPerf) that look like trouble."""
    shown = []
    for log in sorted([*run_dir.glob("logs/*/*.log"), *run_dir.glob("results/*/logs/aiperf.log")]):
        lines = [ln[:width] for ln in log.read_text(errors="replace").splitlines() if LOG_PROBLEM.search(ln)]
        if lines:
            shown.append(
                f"--- {log.relative_to(run_dir)}: last {min(per_file, len(lines))} of {len(lines)} ---"
            )
            shown.extend(lines[-per_file:])
    return "\n--- what the run's logs said ---\n" + "\n".join(shown) if shown else ""


def nothing_left(run_dir: Path) -> None:
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False).stdout
    assert left == "", f"processes left behind: {left}"
