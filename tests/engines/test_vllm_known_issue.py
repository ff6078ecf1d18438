"""Found by running the real engine (docs/upstream-facts.md#gpu-less-engines): vLLM 0.32's API server dies
after the first PD request when the prefill's MultiConnector holds Mooncake and LMCacheMP. Lint refuses a
config pinning such an image and naming the issue; the node-side watcher names it the moment the engine logs
it."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from schemas.lint import main as lint_main

from .conftest import ROOT

ISSUE = "vllm-multiconnector-prom-metrics"
# What vLLM 0.32.0 printed before the API server died (seen 2026-11-23).
LOGGED = (
    "AssertionError: MooncakeConnector is not contained in the list of registered connectors with "
    "Prometheus metrics support: dict_keys(['LMCacheMPConnector'])"
)
LOCAL = ("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_conc4")


def _lint(tmp_path, image: str, capsys) -> tuple[int, str]:
    entries = yaml.safe_load((ROOT / "configs" / "local-master.yaml").read_text())
    entry = {**entries[LOCAL[0]], "image": image}
    path = tmp_path / "old-master.yaml"
    path.write_text(yaml.safe_dump({LOCAL[0]: entry}, sort_keys=False))
    code = lint_main([str(path)])
    return code, capsys.readouterr().out


def test_a_config_pinning_vllm_0_32_with_lmcache_is_refused_naming_the_issue(tmp_path, capsys):
    code, out = _lint(tmp_path, "vllm/vllm-openai-rocm:v0.32.0", capsys)
    assert code == 1
    assert f"known issue {ISSUE}: The API server dies after the first PD request" in out
    assert "triggered by KV connectors MultiConnector + MooncakeConnector + LMCacheMPConnector" in out
    assert "use an image of vllm-0.33.0 (configs/engine-builds.yaml)" in out


def test_the_0_33_image_passes(tmp_path, capsys):
    assert _lint(tmp_path, "vllm/vllm-openai-rocm:v0.33.0", capsys) == (0, "")


def test_the_watcher_names_it_from_the_engine_log(plans, tmp_path):
    plan = plans[LOCAL]
    assert ISSUE in [s["issue"] for s in plan["log_signatures"]]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    log = tmp_path / "vllm.log"
    log.write_text(f"INFO serving\n{LOGGED}\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "logwatch.py"), "--plan", str(tmp_path / "plan.json")]
        + ["--log", str(log), "--interval", "0.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 12, done.stdout + done.stderr
    assert ISSUE in done.stdout + done.stderr
