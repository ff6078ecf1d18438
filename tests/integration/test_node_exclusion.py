"""Learned node exclusion on the local cluster (recipes/nodes.py), scoped: a one-node job on the three-node
runner. The first job's engine finds no GPUs on its node (the simulator's `gpus-lost`: PyTorch's own "No
HIP GPUs are available"), which the verdict classifies as the node's fault; the next submission of the
same runner leaves that node out, says why, and runs on another node to the end; `make nodes` explains and
clears the entry."""

from __future__ import annotations

import re
import subprocess
import sys

from sim.cluster.layout import ROOT

from .conftest import nothing_left, require_tools, run_demo

CONFIG = "local-sim-sglang"  # one node of cluster:local-sim's three


def nodes_cli(out, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipes.nodes", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_node_at_fault_is_left_out_of_the_next_submission(cluster, tmp_path):
    require_tools([ROOT / ".venv-bench/bin/aiperf"])
    _, run_dir = run_demo(CONFIG, tmp_path, timeout=300, env={"SIM_FAULT": "gpus-lost"}, expect=1)
    job_out = open(f"{run_dir}/job.out").read()
    verdict = re.search(
        r"^job failed: first failure on (\S+) in step '([^']*)'.*\ncause: (.*)$", job_out, re.M
    )
    assert verdict, job_out
    bad, cause = verdict[1], verdict[3]
    # the detail is the engine log's line (its timestamp first)
    assert cause.startswith("gpu-unavailable (") and cause.endswith(
        "SIM_FAULT gpus-lost: RuntimeError: No HIP GPUs are available)"
    ), job_out
    nothing_left(tmp_path)

    listed = nodes_cli(tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert f"{bad}" in listed.stdout and "gpu-unavailable -- the node's GPUs cannot be used" in listed.stdout
    assert f"evidence: {run_dir}/state/{bad}/outcome" in listed.stdout

    done, second = run_demo(CONFIG, tmp_path, timeout=300)
    assert re.search(rf"^excluding {bad}: gpu-unavailable \(", done.stdout, re.M), done.stdout
    ran_on = sorted(p.name for p in (second / "state").iterdir() if p.is_dir())
    assert len(ran_on) == 1 and ran_on != [bad], ran_on
    assert "job succeeded: every node ended cleanly" in (second / "job.out").read_text()
    assert (second / "excluded-nodes.json").is_file()

    cleared = nodes_cli(tmp_path, "--clear", bad, "--why", "GPUs back after a reset")
    assert cleared.returncode == 0, cleared.stderr
    assert "no node excluded now" in nodes_cli(tmp_path).stdout
