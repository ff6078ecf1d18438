"""The host preflight on the local cluster: before any engine starts, every node's host checks that no
process of an earlier job is left and its NICs (scripts/hostcheck.sh, scripts/leftovers.py, scripts/nics.py):
the data plane (loopback here, the real sysfs) up and, through the simulated `nicctl` (sim/nicctl.py), the
NICs' QoS and DCQCN. One node's RoCE device with DCQCN disabled ends the three-node job in the host
preflight, the verdict naming the node, the device and the value; no engine, LMCache or router ever
started, and the node ledger holds the node for the next submission. A process an ended job left behind
ends it the same way, named, with SLURM itself saying its job no longer runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sim.cluster.layout import ROOT

from .conftest import nothing_left, run_demo

CONFIG = "local-sim-vllm-disagg-agentic"


def test_a_nic_not_roce_ready_ends_the_job_before_anything_starts(cluster, demo_tools, tmp_path):
    _, run_dir = run_demo(
        CONFIG, tmp_path, timeout=300, env={"SIM_NIC_FAULT": "dcqcn-off", "SIM_FAULT_HOST": "sim2"}, expect=1
    )
    job_out = open(f"{run_dir}/job.out").read()
    said = "NICs not ready: RoCE device ionic_1 (NIC 0000:16:00.0): DCQCN is Disabled"
    assert f"FAILED host preflight on sim2: {said}" in job_out
    assert "job failed: first failure on sim2 in step 'host preflight' (exit code 1)\n" in job_out
    assert f"cause: nic-not-ready ({said})" in job_out
    # what the failing host showed is in the run's provenance (the others may be ended before they write)
    facts = json.loads(open(f"{run_dir}/state/sim2/nic-facts.json").read())
    assert facts["dcqcn"]["ionic_1 (NIC 0000:16:00.0)"]["Status"] == "Disabled"
    assert facts["nicctl"]["firmware"]["0000:06:00.0"]["Firmware-A"] == "1.117.5-a-45"
    # nothing of the job started: no node script step, no service log
    assert "step: preflight" not in job_out
    assert not list((tmp_path / "runs").glob("*/*/*/logs/*/*.log"))
    nothing_left(tmp_path)

    listed = subprocess.run(
        [sys.executable, "-m", "recipes.nodes", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "sim2" in listed.stdout and "nic-not-ready" in listed.stdout, listed.stdout


def test_a_process_an_ended_job_left_ends_the_job_before_anything_starts(cluster, demo_tools, tmp_path):
    """A stray process of job 1 (long ended: SLURM no longer knows it) holds on to this host."""
    stray = subprocess.Popen(
        ["sleep", "300"], env={**os.environ, "RUN_DIR": str(tmp_path / "old-run"), "SLURM_JOB_ID": "1"},
        start_new_session=True,
    )  # fmt: skip
    try:
        _, run_dir = run_demo(CONFIG, tmp_path, timeout=300, expect=1)
    finally:
        stray.kill()
        stray.wait()
    job_out = open(f"{run_dir}/job.out").read()
    said = f"pid {stray.pid} (sleep) of job 1 (ended), run {tmp_path / 'old-run'}"
    assert f"processes of earlier jobs still run here: {said}" in job_out
    assert "in step 'host preflight' (exit code 1)\ncause: leftover-process (" in job_out
    assert not list((tmp_path / "runs").glob("*/*/*/logs/*/*.log"))
