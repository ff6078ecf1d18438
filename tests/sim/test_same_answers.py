"""scripts/proof.py same-answers against the golden prefill and decode (simulated engines, processes) behind
the real proxy, as the rendered job runs them: the disaggregated answers equal the prefill's served whole on a
clean path, and a KV path that corrupts what it moves (SIM_FAULT corrupt-kv on the decode) fails the proof,
naming the first token that differs. Both engines answer each prompt differently, so equality proves
something (the proof checks that too)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import ROOT

from .conftest import free_port, make_model, sim_env
from .test_cli import golden_commands
from .test_process import LOCAL_SIM, as_node, with_lmcache_port

MODEL = "amd/Kimi-K2.5-MXFP4"


def _pd(launcher, fake_lmcache, router=None, **fault: str) -> tuple[str, str]:
    """The golden pair behind `python -m proxy` (or ROUTER, vllm-router's binary); FAULT: SIM_FAULT*
    settings for both engines. (the prefill's URL, the router's)."""
    prefill_argv, decode_argv = golden_commands(LOCAL_SIM, LMCACHE_MP_MQ_TIMEOUT="5")
    prefill_argv = with_lmcache_port(prefill_argv, fake_lmcache.port)
    model = prefill_argv[prefill_argv.index("serve") + 1]
    make_model(launcher.tmp, model.lstrip("/"), max_position_embeddings=262144)
    boot = free_port()
    env = sim_env(SIM_MODEL_ROOT=str(launcher.tmp), VLLM_MOONCAKE_BOOTSTRAP_PORT=str(boot), **fault)
    prefill_port, decode_port, router_port = free_port(), free_port(), free_port()
    prefill = launcher.run(as_node(prefill_argv, port=prefill_port), port=prefill_port, env=env)
    decode = launcher.run(as_node(decode_argv, port=decode_port), port=decode_port, env=env)
    where = ["--host", "127.0.0.1", "--port", str(router_port), "--prefill", prefill.url, str(boot)]
    if router is None:
        argv = [sys.executable, "-m", "proxy", *where, "--decode", decode.url]
    else:  # as recipes/vllm.py starts it
        argv = [str(router), "--vllm-pd-disaggregation", "--kv-connector", "mooncake", *where]
        argv += ["--decode", decode.url, "--policy", "consistent_hash", "--health-check-endpoint", "/health"]
    launcher.run(argv, port=router_port, env={**sim_env(), "PYTHONPATH": str(ROOT)})
    return prefill.url, f"http://127.0.0.1:{router_port}"


def _proof(direct: str, router: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/proof.py"), "same-answers", "--router", router,
         "--direct", direct, "--model", MODEL, "--prompts", "4", "--tokens", "8"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_clean_pd_path_gives_the_answers_served_whole(launcher, fake_lmcache):
    direct, router = _pd(launcher, fake_lmcache)
    done = _proof(direct, router)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("same answers: 4 prompts x 8 tokens through the router match")
    assert "repeated its own answer in full on 4/4" in done.stdout


def test_kv_corrupted_in_transit_fails_naming_the_first_token(launcher, fake_lmcache):
    direct, router = _pd(launcher, fake_lmcache, SIM_FAULT="corrupt-kv", SIM_FAULT_ROLE="decode")
    done = _proof(direct, router)
    assert done.returncode == 17, done.stdout  # a quality failure: its own exit code (scripts/failures.py)
    assert "proof failed: answers differ: prompt 0 through the router gave token 0" in done.stderr
    assert "the KV that moved prefill -> decode is not the KV the prompt makes" in done.stderr


@pytest.mark.parametrize("argv", [["--prompts", "1"], ["--tokens", "0"]])
def test_too_few_prompts_or_tokens_is_a_usage_error(argv):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/proof.py"), "same-answers", "--router", "http://127.0.0.1:1",
         "--direct", "http://127.0.0.1:2", "--model", MODEL, *argv],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "invalid choice" in done.stderr


VLLM_ROUTER = ROOT / ".venv-router" / "bin" / "vllm-router"


@pytest.mark.tools
def test_through_vllm_router_too(launcher, fake_lmcache):
    """vllm-router (Rust) passes the check's fields through to both legs: logprobs back, answers equal."""
    if not VLLM_ROUTER.exists():
        pytest.fail(f"missing {VLLM_ROUTER} (make tools)")
    direct, router = _pd(launcher, fake_lmcache, router=VLLM_ROUTER)
    done = _proof(direct, router)
    assert done.returncode == 0, done.stderr
