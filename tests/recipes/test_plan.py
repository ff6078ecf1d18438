"""Plan decisions against FACTS.md: topology, KV connector JSON per role, LMCache sizing, router wiring."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import kv_config

ROOT = Path(__file__).resolve().parents[2]

SEED = ("kimik2.5-fp4-mi355x-vllm-disagg-agentic", "agentic_p1x8_d1x8")
XPYD = ("kimik2.5-fp4-mi355x-vllm-disagg", "fsl8k1k_p2x8_d2x8")
LOCAL = ("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8")
RUNTIME = {"LOCAL_ADDR": "127.0.0.1", "LMCACHE_PORT": "5555", "LMCACHE_MP_MQ_TIMEOUT": "1200"}


def flat(argv) -> list[str]:
    return ["".join(p if isinstance(p, str) else f"${{{p.var}}}" for p in w) for w in argv]


def test_variants_of_every_shipped_config(rendered):
    assert set(rendered) == {
        SEED,
        XPYD,
        ("kimik2.5-fp4-mi355x-vllm-disagg", "fsl8k1k_p1x8_d2x8"),
        LOCAL,
        ("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_vllm-router"),
    }


@pytest.mark.parametrize(
    "key, roles",
    [
        (SEED, ["prefill", "decode"]),
        (XPYD, ["prefill"] * 2 + ["decode"] * 2),
        (LOCAL, ["prefill", "prefill", "decode"]),
    ],
)
def test_rank_0_is_the_first_prefill_then_prefill_then_decode(rendered, key, roles):
    assert [n.role for n in rendered[key].plan.nodes] == roles


def test_decode_is_a_plain_mooncake_consumer_that_fails_instead_of_recomputing(rendered):
    assert kv_config(rendered[SEED].plan, "decode", RUNTIME) == {
        "kv_connector": "MooncakeConnector",
        "kv_role": "kv_consumer",
        "kv_load_failure_policy": "fail",
        "kv_connector_extra_config": {"mooncake_protocol": "tcp", "num_workers": 10},
    }


def test_prefill_is_multiconnector_mooncake_plus_lmcache_mp(rendered):
    cfg = kv_config(rendered[SEED].plan, "prefill", RUNTIME)
    assert cfg["kv_connector"] == "MultiConnector" and cfg["kv_role"] == "kv_producer"
    assert cfg["kv_load_failure_policy"] == "recompute"
    mooncake, lmcache = cfg["kv_connector_extra_config"]["connectors"]
    assert mooncake == {
        "kv_connector": "MooncakeConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"mooncake_protocol": "tcp", "num_workers": 10},
    }
    assert lmcache == {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
        "kv_connector_extra_config": {
            "lmcache.mp.host": "tcp://127.0.0.1",
            "lmcache.mp.port": 5555,
            "lmcache.mp.mq_timeout": 1200,
        },
    }


def test_without_lmcache_prefill_is_a_plain_mooncake_producer(rendered):
    cfg = kv_config(rendered[XPYD].plan, "prefill", RUNTIME)
    assert cfg["kv_connector"] == "MooncakeConnector" and cfg["kv_role"] == "kv_producer"


def test_lmcache_l1_is_runner_dram_times_utilization_per_node(rendered):
    env = dict(rendered[SEED].plan.env_shell)
    assert env["LMCACHE_L1_SIZE_GB"] == str(int(3_095_781 * 0.80 // 1024))  # 2418 GiB, one pool per node
    assert env["LMCACHE_EVICTION_POLICY"] == "LRU" and env["LMCACHE_MP_MQ_TIMEOUT"] == "1200"
    assert dict(rendered[LOCAL].plan.env_shell)["LMCACHE_L1_SIZE_GB"] == "2"


def test_lmcache_server_command_has_every_required_flag(rendered):
    lmcache = rendered[SEED].plan.roles[0].services[0]
    args = flat(lmcache.argv)
    assert args[:2] == ["lmcache", "server"]
    for flag in ("--l1-size-gb", "--eviction-policy", "--host", "--port", "--http-host", "--http-port"):
        assert flag in args
    assert flat([lmcache.ready_url]) == ["http://${LOCAL_ADDR}:${LMCACHE_HTTP_PORT}/healthcheck"]


def test_decode_nodes_run_no_lmcache(rendered):
    for r in rendered.values():
        decode = next(role for role in r.plan.roles if role.name == "decode")
        assert [s.name for s in decode.services] == ["vllm"]


def test_engine_env_sets_mooncake_and_rocm(rendered):
    env = dict(rendered[SEED].plan.env_exported)
    assert env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998" and env["VLLM_ROCM_USE_AITER"] == "1"
    vllm = flat(rendered[SEED].plan.roles[1].services[0].argv)
    assert vllm[:2] == ["env", "VLLM_HOST_IP=${NODE_ADDR}"] and "--enable-prefix-caching" in vllm


def test_vllm_router_gets_every_prefill_with_bootstrap_port_and_every_decode(rendered):
    args = flat(rendered[XPYD].plan.router.argv)
    assert args[:4] == ["vllm-router", "--vllm-pd-disaggregation", "--kv-connector", "mooncake"]
    joined = " ".join(args)
    for rank in (0, 1):
        assert f"--prefill http://${{PEER_ADDR[{rank}]}}:8000 8998" in joined
    for rank in (2, 3):
        assert f"--decode http://${{PEER_ADDR[{rank}]}}:8000" in joined


def test_pd_proxy_router_waits_for_the_expected_backend_counts(rendered):
    router = rendered[LOCAL].plan.router
    # from the job's snapshot of the repository, whatever the node script's working directory
    assert flat(router.argv)[:5] == ["env", "PYTHONPATH=${RECIPE_DIR}", "python3", "-m", "proxy"]
    assert router.ready_expect == ("prefill.healthy=2", "decode.healthy=1")


def test_one_benchmark_per_concurrency_with_inferencex_result_names(rendered):
    benches = rendered[SEED].plan.benchmarks
    assert [b.concurrency for b in benches] == [8, 16, 32]
    assert benches[0].result == "kimik2.5-fp4-mi355x-vllm-disagg-agentic_agentic_p1x8_d1x8_conc8.json"
    args = flat(benches[0].argv)
    assert "--public-dataset" in args and "--session-header" in args


@pytest.mark.parametrize(
    "runtime, expect",
    [
        ("docker", "docker run"),
        ("pyxis", "--container-image="),
        ("none", "bash ${RECIPE_DIR}/server_vllm.sh"),
    ],
)
def test_launch_wraps_srun_per_container_runtime(rendered, runtime, expect):
    from recipes.build import _launch
    from recipes.plan import Container

    args = " ".join(
        flat(_launch(Container(runtime, "vllm/vllm-openai-rocm:v0.33.0", "amd", ("/models",)), 2))
    )
    assert args.startswith("srun --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1")
    assert expect in args


def test_preflight_checks_the_programs_each_role_starts(rendered):
    plan = rendered[LOCAL].plan
    assert {r.name: flat(r.commands) for r in plan.roles} == {
        "prefill": ["lmcache", "vllm"],
        "decode": ["vllm"],
    }
    assert flat(plan.leader_commands) == ["python3", "aiperf"]


def test_nodes_advertise_their_data_plane_address_never_loopback_on_a_cluster(rendered):
    assert flat(rendered[SEED].plan.address_args) == ["--interface", "ens51np0"]
    assert flat(rendered[LOCAL].plan.address_args) == ["--slurm-nodeaddr", "--allow-loopback"]


def test_engine_flag_settings_are_refused_not_dropped(configs):
    """DENSE_AS_SPARSE and friends stand for SGLang flags; a vLLM launch that ignored them would run
    something other than what the config says."""
    import yaml

    from recipes.build import Unsupported, build_plan
    from recipes.variants import targets
    from schemas.config import MasterEntry

    doc = yaml.safe_load((ROOT / "configs" / "local-master.yaml").read_text())[LOCAL[0]]
    doc["scenarios"]["agentic-coding"][0]["search-space"][0]["prefill"]["additional-settings"].append(
        "DENSE_AS_SPARSE=true"
    )
    entry = MasterEntry.model_validate(doc)
    with pytest.raises(Unsupported, match="engine flags --dense-as-sparse are not rendered for vLLM"):
        build_plan(targets(LOCAL[0], entry, configs[1])[0])
