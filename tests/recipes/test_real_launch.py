"""The rendered MI355X launch against what a real cluster needs (the defects a review against InferenceX's
known-working launch found, each as a class): model facts reach every consumer, nothing is fetched on a node,
every setting reaches its process, the container has what RDMA and ROCm need."""

from __future__ import annotations

import dataclasses

import pytest

from recipes.build import HUB_OFFLINE, build_plan
from recipes.render import render_plan
from recipes.target import Unsupported
from schemas import settings as reg

from .test_plan import SEED, flat

XPYD = ("kimik2.5-fp4-mi355x-vllm-disagg", "fsl8k1k_p2x8_d2x8")


def _target(configs, key_variant, *, launch=None, settings=None):
    """A shipped variant's target, its launch profile and its workers' settings changed."""
    key, variant = key_variant
    t = next(t for t in configs.targets(key) if t.variant == variant)
    if launch:
        t = dataclasses.replace(t, launch=t.launch.model_copy(update=launch))
    if settings:
        space = t.point.space
        changed = {}
        for role in ("prefill", "decode"):
            worker = getattr(space, role)
            given = [s for s in worker.additional_settings if s.split("=")[0] not in settings]
            extra = [f"{k}={v}" for k, v in settings.items() if role in reg.REGISTRY[k].roles]
            changed[role] = worker.model_copy(update={"additional_settings": given + extra})
        t = dataclasses.replace(t, point=dataclasses.replace(t.point, space=space.model_copy(update=changed)))
    return t


def _services(plan, name, role=None):
    return [
        " ".join(flat(s.argv))
        for r in plan.roles
        if role in (None, r.name)
        for s in r.services
        if s.name == name
    ]


def test_the_seed_client_loads_kimis_tokenizer_code_and_reads_the_staged_corpus(rendered):
    plan = rendered[SEED].plan
    for bench in plan.benchmarks:
        args = flat(bench.argv)
        assert "--tokenizer-trust-remote-code" in args  # Kimi's tokenizer is code (InferenceX #1369)
        # the pinned corpus the scenario lock accepts, read offline from the run's own datasets cache
        at = args.index("--public-dataset")
        assert args[at : at + 2] == [
            "--public-dataset",
            "semianalysis_cc_traces_weka_with_subagents_060826_256k",
        ]
        assert "--input-file" not in args and "--custom-dataset-type" not in args
        # InferenceX's agentic replay, so results compare with its dashboard
        assert args[args.index("--benchmark-duration") + 1] == "3600"
        assert args[args.index("--agentic-cache-warmup-duration") + 1] == "600"
        assert args[args.index("--scenario") + 1] == "inferencex-agentx-mvp"
        assert "--unsafe-override" not in args
    traces = {s.name: s for s in plan.staged}["traces"]
    assert (traces.kind, traces.path, traces.source) == (
        "hf-dataset",
        "/models/hf-cache",
        "semianalysis_cc_traces_weka_with_subagents_060826_256k",
    )
    assert plan.container.read_only == ("/models/hf-cache",)
    # AIPerf reads its tokenizer folder without the Hub's offline switch (which makes it refuse a local path);
    # the datasets library stays offline (env.sh's HF_DATASETS_OFFLINE) and reads the run's datasets cache
    assert flat(plan.benchmarks[0].argv)[:9] == [
        "env",
        "-u",
        "HF_HUB_OFFLINE",
        "-u",
        "TRANSFORMERS_OFFLINE",
        "HF_DATASETS_CACHE=${RUN_DIR}/datasets-cache",
        "AIPERF_DATASET_CONFIGURATION_TIMEOUT=1800",
        "AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT=1800",
        "aiperf",
    ]
    checks = [" ".join(flat(c)) for c in plan.input_checks]
    assert checks[0].endswith("inputs.py verify --lock ${RUN_DIR}/lock.json --recipe-dir ${RECIPE_DIR}")
    assert "inputs.py tokenizer /models/amd/Kimi-K2.5-MXFP4 --remote-code" in checks[1]
    assert "-v /models/hf-cache:/models/hf-cache:ro" in " ".join(
        flat(plan.launch)
    )  # read-only in the containers


def test_a_model_whose_folder_holds_code_gets_trust_remote_code_in_every_consumer(rendered):
    from recipes.models import facts

    for (key, variant), r in rendered.items():
        remote = facts(r.plan.model).remote_code
        engines = _services(r.plan, "vllm") + _services(r.plan, "sglang")
        assert engines and all(("--trust-remote-code" in e) is remote for e in engines), (key, variant)
        assert all(("--tokenizer-trust-remote-code" in flat(b.argv)) is remote for b in r.plan.benchmarks)
        assert ("--remote-code" in flat(r.plan.input_checks[-1])) is remote


def test_every_node_runs_with_the_hub_offline(rendered):
    for r in rendered.values():
        env = r.files["env.sh"]
        for name in HUB_OFFLINE:
            assert f"\nexport {name}=1\n" in env


def test_an_agentic_run_with_no_staged_trace_set_is_refused_at_render(configs):
    t = _target(configs, SEED, launch={"benchmark": configs.launch.profiles["cluster:mi355x-amds"].benchmark})
    bench = t.launch.benchmark.model_copy(update={"hf_cache": None})
    t = dataclasses.replace(t, launch=t.launch.model_copy(update={"benchmark": bench}))
    with pytest.raises(Unsupported, match="nothing is fetched on a compute node"):
        build_plan(t)


def test_the_mi355x_container_has_the_known_working_limits_and_no_rdma_devices_over_tcp(rendered):
    args = " ".join(flat(rendered[SEED].plan.launch))
    assert (
        "--entrypoint  --network host --ipc host --device /dev/kfd --device /dev/dri --group-add video"
        in args
    )
    for words in (
        "--ulimit memlock=-1",
        "--ulimit stack=67108864",
        "--ulimit nofile=1048576:1048576",
        "--cap-add SYS_PTRACE",
        "--security-opt seccomp=unconfined",
        "-v /sys:/sys",
    ):
        assert words in args
    assert "/dev/infiniband" not in args and "--privileged" not in args  # MC_PROTOCOL=tcp


def test_an_rdma_variant_gets_the_verbs_devices_mooncakes_device_list_and_the_sites_own_words(configs):
    from .conftest import kv_config

    extra = {"extra": ["--ulimit", "core=0"]}
    container = configs.launch.profiles["cluster:mi355x-amds"].container_options.model_copy(update=extra)
    t = _target(
        configs,
        XPYD,
        launch={"mooncake_registration": "dmabuf", "container": container},
        settings={"MC_PROTOCOL": "rdma"},
    )
    plan = build_plan(t)
    args = " ".join(flat(plan.launch))
    # the verbs devices of the runner's NICs and the host's RDMA userspace, found on each node's host
    devices = " ".join(f"--rdma-device rdma{i}" for i in range(8))
    assert f"container.sh run --as-submitter {devices} --host-file " in args
    assert "--host-file /etc/libibverbs.d= -- --pull never" in args
    assert "seccomp=unconfined -v /sys:/sys --ulimit core=0 -e RUN_DIR" in args
    # every engine node registers GPU memory over those NICs before any weights load
    assert " ".join(flat(plan.rdma_probe)) == (
        "--host ${NODE_ADDR} --devices rdma0,rdma1,rdma2,rdma3,rdma4,rdma5,rdma6,rdma7 --engine-command vllm"
    )
    for role in ("prefill", "decode"):
        extra_config = kv_config(plan, role, {})["kv_connector_extra_config"]
        assert extra_config["device_name"] == ",".join(f"rdma{i}" for i in range(8))
    render_plan(plan)  # and it renders


# Each setting of the registry, a non-default value for it, and where it must arrive: the words of the
# service that reads it ('vllm', 'lmcache', 'sglang', 'client'), or the variant's env.sh ('env.sh').
# A setting added to schemas/settings.py without a row here fails the test below: no setting may reach
# no process.
REACHES = {
    "MC_PROTOCOL": ("rdma", "vllm", '"mooncake_protocol":"rdma"'),
    "MC_NUM_WORKERS": ("7", "vllm", '"num_workers":7'),
    "MAX_MODEL_LEN": ("131072", "vllm", "--max-model-len 131072"),
    "MAX_NUM_BATCHED_TOKENS": ("4096", "vllm", "--max-num-batched-tokens 4096"),
    "MAX_NUM_SEQS": ("7", "vllm", "--max-num-seqs 7"),
    "ENABLE_PREFIX_CACHING": ("0", "vllm", "--no-enable-prefix-caching"),
    "GPU_MEMORY_UTILIZATION": ("0.85", "vllm", "--gpu-memory-utilization 0.85"),
    "WEKA_LOADER_OVERRIDE": ("other_set", "client", "--public-dataset other_set"),
    "LMCACHE_L1_INIT_SIZE_GB": ("21", "env.sh", "LMCACHE_L1_INIT_SIZE_GB=21"),
    "LMCACHE_L1_READ_TTL_SECONDS": ("3601", "env.sh", "LMCACHE_L1_READ_TTL_SECONDS=3601"),
    "LMCACHE_CHUNK_SIZE": ("512", "env.sh", "LMCACHE_CHUNK_SIZE=512"),
    "LMCACHE_MAX_WORKERS": ("9", "env.sh", "LMCACHE_MAX_WORKERS=9"),
    "LMCACHE_MP_MQ_TIMEOUT": ("1201", "env.sh", "LMCACHE_MP_MQ_TIMEOUT=1201"),
}
# The env.sh variables of LMCache and the server flag or connector key each becomes in the node script.
LMCACHE_CONSUMER = {
    "LMCACHE_L1_INIT_SIZE_GB": ("lmcache", "--l1-init-size-gb ${LMCACHE_L1_INIT_SIZE_GB}"),
    "LMCACHE_L1_READ_TTL_SECONDS": ("lmcache", "--l1-read-ttl-seconds ${LMCACHE_L1_READ_TTL_SECONDS}"),
    "LMCACHE_CHUNK_SIZE": ("lmcache", "--chunk-size ${LMCACHE_CHUNK_SIZE}"),
    "LMCACHE_MAX_WORKERS": ("lmcache", "--max-workers ${LMCACHE_MAX_WORKERS}"),
    "LMCACHE_MP_MQ_TIMEOUT": ("vllm", '"lmcache.mp.mq_timeout":${LMCACHE_MP_MQ_TIMEOUT}'),
    "LMCACHE_EVICTION_POLICY": ("lmcache", "--eviction-policy ${LMCACHE_EVICTION_POLICY}"),
    "LMCACHE_L1_SIZE_GB": ("lmcache", "--l1-size-gb ${LMCACHE_L1_SIZE_GB}"),
}
# Settings with no consumer in a vLLM launch, and why (each is an SGLang flag, derived, or InferenceX's).
NOT_VLLM = {
    "HF_HUB_CACHE": "refused at render (test below): nothing is fetched on a node",
    "DECODE_MTP_SIZE": "above 0 refused at render (test below): no MTP launch yet",
    "LMCACHE_EVICTION_POLICY": "one choice (LRU), its default: reaches the server as the table below shows",
    "MEM_FRACTION_STATIC": "SGLang only (tests/recipes/test_plan.py renders it)",
    "ATTENTION_BACKEND": "SGLang only, a flag setting (known-issue tests render it)",
    "DENSE_AS_SPARSE": "SGLang only, a flag setting (known-issue tests render it)",
    "DISABLE_CUDA_GRAPH": "SGLang only, a flag setting (known-issue tests render it)",
    **{
        f"HICACHE_{name}": "SGLang's HiCache only (tests/recipes/test_hicache.py renders it)"
        for name in ("RATIO", "IO_BACKEND", "MEM_LAYOUT", "WRITE_POLICY", "PREFETCH_POLICY")
    },
    "CLIENT_IMAGE": "InferenceX's client image: our pinned AIPerf does its job, env.sh says so "
    "(test_hicache.py)",
    "CONFIG_FILE": "the point's srt-slurm recipe, read as its srt-recipe (tests/outside/test_srt_recipe*.py)",
    "EVAL_CONFIG_FILE": "the point's eval recipe, read as its eval-srt-recipe",
}


def test_every_setting_has_a_consumer_checked_here():
    derived = {name for name, s in reg.REGISTRY.items() if s.kind == "derived"}
    assert set(reg.REGISTRY) - derived == set(REACHES) | set(NOT_VLLM)


@pytest.mark.parametrize("name", sorted(REACHES))
def test_a_setting_with_a_non_default_value_reaches_the_process_that_reads_it(configs, name):
    value, consumer, expect = REACHES[name]
    launch = {"mooncake_registration": "dmabuf"} if name == "MC_PROTOCOL" else None
    rendered = render_plan(build_plan(_target(configs, SEED, settings={name: value}, launch=launch)))
    plan = rendered.plan
    if consumer == "client":
        seen = " ".join(" ".join(flat(b.argv)) for b in plan.benchmarks)
    elif consumer == "env.sh":
        seen = rendered.files["env.sh"]
        where, flag = LMCACHE_CONSUMER[name]
        assert all(flag in s for s in _services(plan, where, "prefill"))  # env.sh's value is the flag's
    else:
        seen = " ".join(_services(plan, consumer))
    assert expect in seen


@pytest.mark.parametrize("name", sorted(LMCACHE_CONSUMER))
def test_every_lmcache_variable_of_env_sh_is_expanded_into_its_consumer(rendered, name):
    where, flag = LMCACHE_CONSUMER[name]
    assert f"{name}=" in rendered[SEED].files["env.sh"]
    services = _services(rendered[SEED].plan, where, "prefill")
    assert services and all(flag in s for s in services)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("HF_HUB_CACHE", "/hf", "nothing is fetched on a compute node"),
    ],
)
def test_a_setting_no_process_would_read_is_refused_not_dropped(configs, name, value, said):
    with pytest.raises(Unsupported, match=f"{name}={value} would reach no process: .*{said}"):
        build_plan(_target(configs, SEED, settings={name: value}))
    build_plan(_target(configs, XPYD, settings={"DECODE_MTP_SIZE": "0"}))  # a value that changes nothing


def test_mtp_steps_without_mtp_are_refused_not_dropped(configs):
    """InferenceX's launch runs MTP when DECODE_MTP_SIZE > 0, whatever spec-decoding says: one would be
    silently dropped, so the two must agree."""
    with pytest.raises(Unsupported, match="DECODE_MTP_SIZE=2 with spec-decoding none"):
        build_plan(_target(configs, XPYD, settings={"DECODE_MTP_SIZE": "2"}))
