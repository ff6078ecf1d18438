"""scripts/results.py: the gate a benchmark result must pass before the job counts it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS

RESULTS = SCRIPTS / "results.py"


def summary(**over) -> dict:
    """AIPerf 0.13.0's profile_export_aiperf.json, the keys the gate reads."""
    doc = {
        "request_count": {"avg": 100.0},
        "total_output_tokens": {"avg": 4000.0},
        "benchmark_duration": {"avg": 20.1},
        "was_cancelled": False,
        "is_complete": True,
    }
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not None}


def check(tmp_path: Path, doc) -> subprocess.CompletedProcess:
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return subprocess.run(
        [sys.executable, str(RESULTS), "check", str(path), "--max-error-rate", "0.10", "--min-duration", "5"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_complete_run_passes(tmp_path):
    done = check(tmp_path, summary(error_request_count={"avg": 5.0}))  # 5 of 105: under 10 %
    assert done.returncode == 0, done.stderr
    assert "100 requests, 4000 output tokens" in done.stdout


@pytest.mark.parametrize(
    "doc, reason",
    [
        (summary(request_count={"avg": 0.0}), "no successful request"),
        (summary(request_count=None), "no successful request"),
        (summary(total_output_tokens={"avg": 0.0}), "no output tokens"),
        (summary(error_request_count={"avg": 20.0}), "20 of 120 requests failed (more than 10%)"),
        (summary(was_cancelled=True, is_complete=False), "AIPerf cancelled the run"),
        (summary(benchmark_duration=None), "no benchmark duration"),
        (summary(benchmark_duration={"avg": 1.5}), "it measured 1.5 s, less than the 5 s a valid run takes"),
        ([], "not a JSON object"),
        ("{truncated", "unreadable"),
    ],
)
def test_the_gate_refuses_what_is_not_a_measurement(tmp_path, doc, reason):
    done = check(tmp_path, doc)
    assert done.returncode == 10
    assert reason in done.stderr
