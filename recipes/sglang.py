"""SGLang engines: `python3 -m sglang.launch_server` per role, PD over Mooncake through SGLang's own
disaggregation flags, and sglang-router in front of them (docs/upstream-facts.md#routers)."""

from __future__ import annotations

from schemas import settings as reg

from .plan import Ports, Service, Timeouts
from .target import NODE_ADDR, Target, Unsupported
from .words import argv, word


def check(t: Target) -> None:
    if t.disagg and t.kv_transfer != "mooncake":
        raise Unsupported(
            f"kv-p2p-transfer {t.kv_transfer!r} is not rendered for SGLang (mooncake only)",
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
    args = [
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
        args += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "mooncake"]
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
    """SGLang reads its PD settings from flags, not the environment: only the model's own."""
    return dict(t.recipe.env)


def uses_rdma(t: Target) -> bool:
    """Its Mooncake backend moves KV over the runner's RDMA devices when it names them (the PD flags)."""
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
        "--policy",
        "cache_aware",
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


def router_metrics_port(t: Target, ports: Ports) -> int:
    return ports.router_metrics
