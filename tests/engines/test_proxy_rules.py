"""The proxy's request rules (proxy/validate.py, also the simulator's) against a real vLLM: every request of
tests/proxy/vllm_cases.py, as the decode leg would carry it, through vLLM 0.33's own request models and
sampling checks (tests/proxy/check_vllm.py). What the proxy serves, the decode serves; what the decode
refuses, the proxy refuses before its prefill leg keeps KV for it."""

from __future__ import annotations

import subprocess

import pytest

from recipes.engines.judge import ROOT, probe_env

from .conftest import need_tools

pytestmark = pytest.mark.tools  # needs a tool virtualenv (`make tools`): not run by make test-unit


def test_the_proxy_refuses_exactly_what_a_real_vllm_decode_refuses(builds, tmp_path):
    vllm = next(t for t in need_tools(builds) if t.package == "vllm")
    env = {**probe_env(tmp_path), "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [str(vllm.python), "-m", "tests.proxy.check_vllm"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert " 0 disagreements" in done.stdout, done.stdout
