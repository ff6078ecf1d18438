"""The real-engine pass of `make bench-proxy` starts the local-cpu job's own engine lines: what it changes
(address, ports, the prefill's LMCache connector) and what it must keep (everything else)."""

from __future__ import annotations

import json

import pytest

from recipes.render import load, render_config
from tests.bench import proxy_real as real


@pytest.fixture(scope="module")
def plan() -> dict:
    rendered = render_config(real.CONFIG, load(real.CONFIG))[0]
    return json.loads(rendered.files["plan.json"])


def _kv(line: real.EngineLine) -> dict:
    return json.loads(real.flag_value(line.argv, "--kv-transfer-config"))


def test_both_roles_run_vllm_serve_on_loopback_at_their_own_ports(plan, tmp_path):
    lines = {line.role: line for line in real.engine_lines(plan, tmp_path)}
    assert sorted(lines) == ["decode", "prefill"]
    ports = set()
    for line in lines.values():
        assert line.argv[:2] == ["vllm", "serve"]
        assert real.flag_value(line.argv, "--host") == "127.0.0.1"
        ports.add(real.flag_value(line.argv, "--port"))
        assert line.env["VLLM_HOST_IP"] == "127.0.0.1"
        assert not any("${" in word for word in [*line.argv, *line.env.values()])
    assert len(ports) == 2
    assert lines["prefill"].env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] not in ports


def test_the_prefill_keeps_its_mooncake_producer_and_drops_lmcache(plan, tmp_path):
    lines = {line.role: line for line in real.engine_lines(plan, tmp_path)}
    prefill, decode = _kv(lines["prefill"]), _kv(lines["decode"])
    assert prefill["kv_connector"] == "MooncakeConnector" and prefill["kv_role"] == "kv_producer"
    assert prefill["kv_connector_module_path"] == "local_cpu_mooncake"  # the runner's connector module
    assert "LMCache" not in json.dumps(prefill)
    assert decode["kv_role"] == "kv_consumer" and decode["kv_load_failure_policy"] == "fail"


def test_what_the_runner_sets_is_kept(plan, tmp_path):
    """The runner's engine env and args (configs/launch.yaml cluster:local-cpu) reach the engines as in
    the job: a bench that dropped them would measure another engine."""
    lines = {line.role: line for line in real.engine_lines(plan, tmp_path)}
    for line in lines.values():
        assert line.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
        assert line.env["PYTHONPATH"] == f"{tmp_path}/connector"
        assert real.flag_value(line.argv, "--max-model-len") == "4096"
    assert real.flag_value(lines["prefill"].argv, "--num-gpu-blocks-override") == "33"


def test_a_plan_without_a_prefill_line_is_refused_by_name(plan, tmp_path):
    plan = {**plan, "roles": [r for r in plan["roles"] if r["name"] != "prefill"]}
    with pytest.raises(real.RealEngineError, match=r"\['decode'\]: want 1 prefill, 1 decode"):
        real.engine_lines(plan, tmp_path)


def test_set_flag_needs_the_flag_once():
    assert real.set_flag(["a", "--port", "1"], "--port", "2") == ["a", "--port", "2"]
    with pytest.raises(real.RealEngineError, match="--port 2 times"):
        real.set_flag(["--port", "1", "--port", "2"], "--port", "3")
    with pytest.raises(real.RealEngineError, match="no --port VALUE"):
        real.set_flag(["a", "--port"], "--port", "3")
