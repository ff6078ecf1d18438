"""SGLang engines: `python3 -m sglang.launch_server` per role, PD over Mooncake or MoRI through SGLang's own
disaggregation flags, and sglang-router in front of them (docs/upstream-facts.md#routers)."""

from __future__ import annotations

from schemas import settings as reg

from .plan import Ports, Service, Timeouts
from .target import NODE_ADDR, Target, Unsupported
from .words import argv, word

# KV transfers this renderer launches SGLang PD over: its --disaggregation-transfer-backend values.
TRANSFERS = ("mooncake", "mori")

# MoRI (AMD's RDMA KV transfer and all-to-all) as InferenceX's known-working MI355X SGLang launch sets it for
# every model (docs/sglang-mori.md): SGLang's PD and MoRI knobs, exported on every node.
MORI_ENV = {
    "SGLANG_USE_AITER": 1,
    "AITER_LOG_LEVEL": "ERROR",
    "SGLANG_MORI_DISPATCH_DTYPE": "auto",
    "SGLANG_MORI_QP_PER_TRANSFER": 4,
    "SGLANG_MORI_NUM_WORKERS": 4,
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": 3600,
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": 3600,
    "SGLANG_HEALTH_CHECK_TIMEOUT": 600,
    "SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS": 32,
    "SGLANG_ENABLE_SPEC_V2": 1,
    "SGLANG_ENABLE_OVERLAP_PLAN_STREAM": 0,
    "SGLANG_LOG_MS": "true",
    "SGLANG_MORI_DISPATCH_INTER_KERNEL_SWITCH_THRESHOLD": 1024,
    "MORI_SHMEM_MODE": "ISOLATION",
    "MORI_EP_LAUNCH_CONFIG_MODE": "AUTO",
    "MORI_APP_LOG_LEVEL": "WARNING",
    "MORI_IO_SQ_BACKOFF_TIMEOUT_US": 50000,
    "MORI_IO_QP_MAX_SEND_WR": 16384,
    "MORI_IO_QP_MAX_CQE": 32768,
    "MORI_IO_QP_MAX_SGE": 2,
    "MORI_IO_TC_DISABLE": 0,
    # a ROCm 7.2.0 graph-capture hang: collectives block instead of polling
    "TORCH_NCCL_BLOCKING_WAIT": 1,
    "NCCL_BLOCKING_WAIT": 1,
}
# Per role, on the engine's own line: MoRI's dispatch and MoE input budgets (tokens per rank), and its
# combine dtype left to SGLang (set empty, as the known-working launch does).
MORI_ROLE_ENV = {
    "prefill": {
        "SGLANG_MORI_COMBINE_DTYPE": "",
        "SGLANG_MORI_MOE_MAX_INPUT_TOKENS": 32768,
        "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK": 8192,
    },
    "decode": {
        "SGLANG_MORI_COMBINE_DTYPE": "",
        "SGLANG_MORI_MOE_MAX_INPUT_TOKENS": 2703,
        "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK": 512,
    },
}


def _over_mori(t: Target) -> bool:
    return t.disagg and t.kv_transfer == "mori"


def check(t: Target) -> None:
    if t.disagg and t.kv_transfer not in TRANSFERS:
        raise Unsupported(
            f"kv-p2p-transfer {t.kv_transfer!r} is not rendered for SGLang ({' or '.join(TRANSFERS)})",
            at=(t.key, "kv-p2p-transfer"),
        )
    if _over_mori(t) and not uses_rdma(t):
        raise Unsupported(
            f"kv-p2p-transfer mori moves KV over RDMA only, and runner {t.runner_label} names no nic-devices",
            at=(t.key, "kv-p2p-transfer"),
        )
    if t.point.space.kv_offload_backend is not None:
        raise Unsupported(
            "kv-offload-backend is not rendered for SGLang (the LMCache MP connector is vLLM's)",
            at=(*t.point.path, "kv-offload-backend"),
        )


def services(t: Target, role: str, ports: Ports, timeouts: Timeouts) -> list[Service]:
    return [_sglang_service(t, role, ports, timeouts)]


def _sglang_service(t: Target, role: str, ports: Ports, timeouts: Timeouts) -> Service:
    s = t.settings(role)
    role_env = MORI_ROLE_ENV.get(role, {}) if _over_mori(t) else {}
    args = [
        *(["env", *(word(f"{k}={v}") for k, v in role_env.items())] if role_env else []),
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        t.model_path,
        "--served-model-name",
        t.entry.model,
        "--host",
        NODE_ADDR,
        "--port",
        ports.vllm,
        "--tp-size",
        t.worker(role).tp,
        # EP over the TP group (lint refuses an ep other than 1 or tp)
        *(["--ep-size", t.worker(role).ep] if (t.worker(role).ep or 1) > 1 else []),
        *(["--trust-remote-code"] if t.model.remote_code else []),
        *t.model_args(role),
    ]
    for flag, name in (
        ("--mem-fraction-static", "MEM_FRACTION_STATIC"),
        ("--context-length", "MAX_MODEL_LEN"),
    ):
        if s[name] is not None:
            args += [flag, s[name]]
    args += [x for flag, value in reg.flag_values(s) for x in ((flag,) if value is True else (flag, value))]
    args.append("--enable-metrics")  # the KV proof and the report read them
    if role in reg.ROLES:
        args += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", t.kv_transfer]
        if role == "prefill":
            args += ["--disaggregation-bootstrap-port", ports.mooncake_bootstrap]
        if uses_rdma(t):
            args += ["--disaggregation-ib-device", ",".join(t.launch.nic_devices)]
    return Service(
        name="sglang",
        argv=argv(*args),
        ready_url=word("http://", NODE_ADDR, f":{ports.vllm}/health"),
        ready_timeout=timeouts.engine_ready,
    )


def engine_env(t: Target, ports: Ports) -> dict:
    """SGLang reads its PD settings from flags; MoRI's knobs, and where its collectives and RDMA go, from the
    environment; then the model's own."""
    env = {}
    if _over_mori(t):
        env.update(MORI_ENV)
        env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = t.launch.data_plane_interface
        env["NCCL_IB_HCA"] = ",".join(t.launch.nic_devices)
    env.update(t.recipe.env)
    return env


def uses_rdma(t: Target) -> bool:
    """Its Mooncake and MoRI backends move KV over the runner's RDMA devices when it names them (the PD
    flags)."""
    return t.disagg and bool(t.launch.nic_devices)


def transport(t: Target) -> tuple:
    """SGLang's Mooncake backend takes its devices from flags (--disaggregation-ib-device): no setting."""
    return ()


def watch_signatures(t: Target) -> tuple:
    """No LMCache server on SGLang nodes (check() refuses an offload backend)."""
    return ()


def l1_budget(t: Target) -> None:
    """No host-DRAM KV tier is rendered for SGLang (check() refuses a kv-offload-backend)."""
    return None


def shell_env(t: Target) -> tuple:
    """No LMCache on SGLang (check() refuses an offload backend): nothing for env.sh's shell section."""
    return ()


def router_service(t: Target, backends: list, ports: Ports, timeouts: Timeouts, counts: dict) -> Service:
    args = [
        "python3",
        "-m",
        "sglang_router.launch_router",
        "--pd-disaggregation",
        *backends,
        "--host",
        NODE_ADDR,
        "--port",
        ports.router,
        *_policies(t),
        "--prometheus-host",
        NODE_ADDR,
        "--prometheus-port",
        ports.router_metrics,
        "--request-timeout-secs",
        1800,
    ]
    # Its /health answers 200 before any worker registered; /workers counts the registered ones
    # (a worker registers once its /health answers).
    url = word("http://", NODE_ADDR, f":{ports.router}/workers")
    expect = tuple(f"stats.{role}_count={n}" for role, n in counts.items())
    return Service("router", argv(*args), url, timeouts.router_ready, ready_expect=expect)


def _policies(t: Target) -> list:
    """Agentic load reuses prefixes: cache-aware routing. A fixed-length sweep has no reuse to find: random
    for both roles with a short circuit breaker and retries, as InferenceX's known-working MI355X runs."""
    if t.point.scenario == "agentic-coding":
        return ["--policy", "cache_aware"]
    return [
        *("--policy", "random", "--prefill-policy", "random", "--decode-policy", "random"),
        *("--cb-timeout-duration-secs", 15, "--retry-max-retries", 3),
    ]


def router_metrics_port(t: Target, ports: Ports) -> int:
    return ports.router_metrics
