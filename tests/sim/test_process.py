"""The `vllm` executable as the node scripts run it: golden prefill + decode doing PD by hand on loopback,
the LMCache start-up check, signals and injected faults. Every process is killed by the launcher fixture."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from sim.metrics import total

from .conftest import GOLDEN, free_port, make_model, sim_env
from .test_cli import golden_commands

LOCAL_SIM = GOLDEN / "local-sim-vllm-disagg-agentic" / "agentic_p2x8_d1x8_conc4" / "server_vllm.sh"
MESSAGES = [{"role": "user", "content": " ".join(f"t{i}" for i in range(100))}]


def as_node(argv: list[str], *, port: int) -> list[str]:
    """The golden `env VLLM_HOST_IP=... vllm serve ...` with a free API port (parallel-safe)."""
    out = list(argv)
    out[out.index("--port") + 1] = str(port)
    return out


def with_lmcache_port(argv: list[str], port: int) -> list[str]:
    """The golden prefill's LMCache connector pointed at the fake server's free port (the rendered line
    names the Plan's fixed port, 5555)."""
    out = list(argv)
    at = out.index("--kv-transfer-config") + 1
    config = json.loads(out[at])
    for child in config["kv_connector_extra_config"]["connectors"]:
        if child["kv_connector"] == "LMCacheMPConnector":
            child["kv_connector_extra_config"]["lmcache.mp.port"] = port
    out[at] = json.dumps(config)
    return out


def start_golden_pair(launcher, fake_lmcache):
    prefill_argv, decode_argv = golden_commands(LOCAL_SIM, LMCACHE_MP_MQ_TIMEOUT="5")
    prefill_argv = with_lmcache_port(prefill_argv, fake_lmcache.port)
    model = prefill_argv[prefill_argv.index("serve") + 1]  # the runner's model-root + the model
    make_model(launcher.tmp, model.lstrip("/"), max_position_embeddings=262144)
    boot = free_port()
    env = sim_env(SIM_MODEL_ROOT=str(launcher.tmp), VLLM_MOONCAKE_BOOTSTRAP_PORT=str(boot), SIM_KV_WAIT_S="2")
    prefill_port, decode_port = free_port(), free_port()
    prefill = launcher.run(as_node(prefill_argv, port=prefill_port), port=prefill_port, env=env)
    decode = launcher.run(as_node(decode_argv, port=decode_port), port=decode_port, env=env)
    return prefill, decode, f"http://127.0.0.1:{boot}"


def test_golden_prefill_and_decode_move_kv(launcher, fake_lmcache):
    prefill, decode, boot = start_golden_pair(launcher, fake_lmcache)
    engine_id = httpx.get(f"{boot}/query", timeout=5).json()["0"]["engine_id"]
    workers = httpx.get(f"{boot}/query", timeout=5).json()["0"]["worker_addr"]
    assert len(workers) == 8  # --tensor-parallel-size 8
    xfer = "xfer-" + "a1" * 16
    first = httpx.post(
        f"{prefill.url}/v1/chat/completions",
        timeout=10,
        json={
            "model": "amd/Kimi-K2.5-MXFP4",
            "messages": MESSAGES,
            "stream": False,
            "max_tokens": 1,
            "min_tokens": 1,
            "ignore_eos": True,
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": xfer},
        },
    )
    assert first.status_code == 200, first.text
    with httpx.stream(
        "POST",
        f"{decode.url}/v1/chat/completions",
        timeout=10,
        json={
            "model": "amd/Kimi-K2.5-MXFP4",
            "messages": MESSAGES,
            "max_tokens": 8,
            "stream": True,
            "stream_options": {"include_usage": True},
            "kv_transfer_params": {
                "do_remote_decode": False,
                "do_remote_prefill": True,
                "transfer_id": xfer,
                "remote_engine_id": engine_id,
                "remote_bootstrap_addr": boot,
            },
        },
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        body = answer.read().decode()
    assert body.count("data: ") == 11 and body.endswith("data: [DONE]\n\n")  # role, 8 tokens, usage, DONE
    d, p = decode.metrics(), prefill.metrics()
    assert total(d, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 102
    assert total(d, "sim_kv_remote_loads_total", outcome="ok") == 1
    assert total(d, "sim_kv_remote_loads_total", outcome="recomputed") == 0
    assert total(p, "sim_kv_transfers_total", fate="pulled") == 1
    assert total(p, "sim_l2_lookups_total") == 1


def test_lmcache_unreachable_refuses_to_start(launcher):
    dead = free_port()
    kv = (
        '{"kv_connector":"MultiConnector","kv_role":"kv_producer","kv_load_failure_policy":"recompute",'
        '"kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeConnector","kv_role":"kv_producer",'
        '"kv_connector_extra_config":{"mooncake_protocol":"tcp"}},{"kv_connector":"LMCacheMPConnector",'
        '"kv_role":"kv_both","kv_connector_module_path":"lmcache.integration.vllm.lmcache_mp_connector",'
        f'"kv_connector_extra_config":{{"lmcache.mp.host":"tcp://127.0.0.1","lmcache.mp.port":{dead},'
        '"lmcache.mp.mq_timeout":1}}]}}'
    )
    env = sim_env(VLLM_MOONCAKE_BOOTSTRAP_PORT=str(free_port()))
    sim = launcher.start(["--kv-transfer-config", kv], env=env, ready=False)
    assert sim.wait_exit(timeout=20) == 1
    assert (
        f"ConnectionError: LMCache MP server tcp://127.0.0.1:{dead} did not answer within "
        "lmcache.mp.mq_timeout=1 s" in sim.output()
    )


def chat(sim, **kw) -> httpx.Response:
    return httpx.post(
        f"{sim.url}/v1/chat/completions",
        timeout=kw.pop("timeout", 10),
        json={"messages": MESSAGES, "max_tokens": 2, **kw},
    )


def test_sigterm_is_a_clean_exit(launcher):
    sim = launcher.start([])
    assert chat(sim).status_code == 200
    sim.proc.terminate()
    assert sim.wait_exit() == 0


def test_crash_at_start(launcher):
    before = time.time()
    sim = launcher.start([], env=sim_env(SIM_FAULT="crash-at-start"), ready=False)
    assert sim.wait_exit() == 1 and "crash-at-start" in sim.output()
    assert before < fault_instant(sim.output(), "crash-at-start") < time.time()


def fault_instant(output: str, kind: str) -> float:
    """The `SIM FAULT <kind> at <epoch>` line a fault benchmark reads its fault instant from."""
    found = re.findall(rf"^SIM FAULT {re.escape(kind)} at ([0-9]+\.[0-9]+)$", output, re.M)
    assert len(found) == 1, output
    return float(found[0])


@pytest.mark.parametrize("fault, code", [("crash-after:2", 1), ("exit0-after:2", 0)])
def test_engine_goes_away_after_n_requests(launcher, fault, code):
    sim = launcher.start([], env=sim_env(SIM_FAULT=fault))
    assert chat(sim).status_code == 200
    assert chat(sim).status_code == 200  # the second answer is delivered, then the process ends
    assert sim.wait_exit() == code
    assert f"SIM_FAULT {fault}" in sim.output()
    fault_instant(sim.output(), fault)


@pytest.mark.parametrize("fault, kind", [("hang-after:1", "hang"), ("kv-stall-after:1", "kv-stall")])
def test_a_hung_request_keeps_health_green(launcher, fault, kind):
    """hang-after: a stuck engine; kv-stall-after: a stalled KV transfer, which also logs Mooncake's own
    line (its glog format) that the job's log watcher fails on."""
    from recipes.vllm import MOONCAKE_TRANSFER_STALLED

    sim = launcher.start([], env=sim_env(SIM_FAULT=fault))
    assert chat(sim).status_code == 200
    with pytest.raises(httpx.ReadTimeout):
        chat(sim, timeout=0.5)
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200
    assert total(sim.metrics(), "sim_faults_injected_total", kind=kind) == 1
    stalled = re.search(r"(?m)^E\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ tcp_transport_session_impl", sim.output())
    assert bool(stalled) is (kind == "kv-stall")
    assert bool(re.search(MOONCAKE_TRANSFER_STALLED["regex"], sim.output())) is (kind == "kv-stall")
    fault_instant(sim.output(), fault)


def test_error_rate_is_deterministic(launcher):
    sim = launcher.start([], env=sim_env(SIM_FAULT="error-rate:0.5"))
    codes = [chat(sim).status_code for _ in range(4)]
    assert codes == [200, 500, 200, 500]
    assert total(sim.metrics(), "vllm:request_success_total", finished_reason="error") == 2
    fault_instant(sim.output(), "error-rate:0.5")  # announced once, at the first error


def test_error_after_fails_every_later_request(launcher):
    sim = launcher.start([], env=sim_env(SIM_FAULT="error-after:2"))
    assert [chat(sim).status_code for _ in range(5)] == [200, 200, 500, 500, 500]
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200  # broken, yet healthy
    fault_instant(sim.output(), "error-after:2")


def test_fault_for_another_role_is_ignored_and_load_delay_precedes_serving(launcher):
    env = sim_env(SIM_FAULT="crash-at-start", SIM_FAULT_ROLE="decode", SIM_LOAD_DELAY_S="0.3")
    sim = launcher.start([], env=env)
    log = sim.output()
    assert log.index("loading model") < log.index("Starting vLLM API server")


def test_bound_port_is_a_startup_error(launcher):
    first = launcher.start([])
    second = launcher.start([], port=first.port, ready=False)
    assert second.wait_exit() == 1 and "error while attempting to bind" in second.output()
