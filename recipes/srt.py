"""A point rendered from the srt-slurm recipe it names (docs/guides/srt-slurm.md): the recipe's engine flags
and environment per role, through this repository's launch and gates.

The recipe decides the engine's tuning: its flags (MoRI's and the speculative depth included) and its
environment. The launch decides what belongs to the site and the run: the model's path and name, addresses
and ports, the PD wiring, the NICs, the interface collectives bind and the traffic class RDMA is marked with
(the runner's launch profile), the caches (staging). Where the recipe states one of those, it must agree with
the entry (parallelism, transfer, model name: refused otherwise, both values said), or it is the site's,
replaced by the runner's value and said so in env.sh. Nothing of the recipe is dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from schemas import settings as reg
from schemas.entries import role_nodes, splits_experts

from .outside.srt_recipe import cli
from .target import Target, Unsupported

# The recipe's environment that is the site's: the runner's launch profile (or the staging) sets it.
SITE_ENV = {
    "IBDEVICES": "the runner's nic-devices",
    "NCCL_IB_HCA": "the runner's nic-devices",
    "GLOO_SOCKET_IFNAME": "the runner's data-plane-interface",
    "NCCL_SOCKET_IFNAME": "the runner's data-plane-interface",
    "MORI_RDMA_TC": "the runner's rdma-traffic-class",
    "MORI_IO_TC": "the runner's rdma-traffic-class",
    "MORI_RDMA_SL": "the runner's rdma-traffic-class",
    "MORI_IO_SL": "the runner's rdma-traffic-class",
    "HF_HOME": "the run's staged model and cache paths",
    "HF_HUB_CACHE": "the run's staged model and cache paths",
    "HUGGINGFACE_HUB_CACHE": "the run's staged model and cache paths",
}
# SGLang flags the launch writes itself; a recipe's value of one is compared (COMPARED) or the site's.
SGLANG_OURS = {
    "model-path": "the runner's model-root and the entry's model",
    "host": "the node's address",
    "port": "the plan's ports",
    "disaggregation-mode": "the role",
    "disaggregation-bootstrap-port": "the plan's ports",
    "disaggregation-ib-device": "the runner's nic-devices",
    "enable-metrics": "the launch (its KV proof reads them)",
}
# sglang-router flags the launch writes itself: where it listens and exports metrics, which workers it fronts.
ROUTER_OURS = ("host", "port", "prometheus-host", "prometheus-port", "pd-disaggregation", "prefill", "decode")
COMPARED = ("served-model-name", "tp-size", "tp", "ep-size", "dp-size", "enable-dp-attention",
            "disaggregation-transfer-backend")  # fmt: skip
DRAFT_PATH = "speculative-draft-model-path"

# vLLM flags the launch writes itself. The KV transfer config is the launch's PD wiring, written from the
# settings it carries (MOONCAKE_EXTRA, LMCACHE_EXTRA): the recipe's must be that config as srt-slurm runs it.
VLLM_OURS = {
    "host": "the node's address",
    "port": "the plan's ports",
    "kv-transfer-config": "written from the settings the recipe states, the same as the recipe's (compared)",
}
VLLM_COMPARED = ("served-model-name", "tensor-parallel-size", "enable-expert-parallel", "trust-remote-code")
# vLLM flags that are settings of ours: the recipe's value is the point's setting, the launch writes the flag.
VLLM_SETTINGS = {
    "gpu-memory-utilization": "GPU_MEMORY_UTILIZATION",
    "max-model-len": "MAX_MODEL_LEN",
    "max-num-batched-tokens": "MAX_NUM_BATCHED_TOKENS",
    "max-num-seqs": "MAX_NUM_SEQS",
    "enable-prefix-caching": "ENABLE_PREFIX_CACHING",
    "no-enable-prefix-caching": "ENABLE_PREFIX_CACHING",  # true here: the setting false
}
# vLLM's environment the launch sets on each engine line itself.
VLLM_LAUNCH_ENV = {
    "VLLM_HOST_IP": "the node's data-plane address",
    "VLLM_MOONCAKE_BOOTSTRAP_PORT": "the plan's ports",
    "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT": "the launch's bound on an abandoned transfer",
}
# Settings in a connector's kv_connector_extra_config, by connector.
MOONCAKE_EXTRA = {"mooncake_protocol": "MC_PROTOCOL", "num_workers": "MC_NUM_WORKERS"}
LMCACHE_EXTRA = {"lmcache.mp.mq_timeout": "LMCACHE_MP_MQ_TIMEOUT"}
CONNECTOR_SETTINGS = {"MooncakeConnector": MOONCAKE_EXTRA, "LMCacheMPConnector": LMCACHE_EXTRA}
# srt-slurm's LMCache MP server (services[].type lmcache-server, from InferenceX's srt-slurm patch): it
# listens on ports of its own on every node it is placed on, and a worker's LMCache connector dials it there.
LMCACHE_SERVER = "lmcache-server"
SRT_LMCACHE_DIAL = {"lmcache.mp.host": "tcp://localhost", "lmcache.mp.port": 8750}
LMCACHE_SERVER_OURS = ("host", "port", "http-host", "http-port")  # the service kind writes them itself
LMCACHE_SERVER_BUDGET = "l1-size-gb"  # compared with the budget the runner's DRAM gives (l1_budget)
LMCACHE_SERVER_SITE = (
    "supported-transfer-mode",
    "worker-reap-timeout-seconds",
)  # the runner's lmcache profile
# The benchmark's settings a recipe states in benchmark.env; the rest of it is srt-slurm's benchmark stage's.
BENCHMARK_SETTINGS = ("WEKA_LOADER_OVERRIDE",)
VLLM_ROUTER_OURS = ("host", "port", "prometheus-host", "prometheus-port", "vllm-pd-disaggregation",
                    "kv-connector", "prefill", "decode", "health-check-endpoint")  # fmt: skip


def check(t: Target) -> None:
    """The recipe and the entry describe one launch: same engine, workers, nodes, parallelism, transfer,
    router, model and speculative decoding; no setting of the entry's beside it."""
    srt = t.srt
    assert srt is not None
    at = t.srt_at
    said = f"the recipe {srt.pointer}"
    if srt.engine != t.engine:
        raise Unsupported(
            f"{said} runs engine {srt.engine}; framework {t.entry.framework} runs {t.engine}", at
        )
    if t.engine not in ("sglang", "vllm"):
        raise Unsupported(f"{said}: points are rendered from srt-slurm recipes on SGLang and vLLM only", at)
    for role in t.roles:
        if role not in srt.roles:
            raise Unsupported(f"{said} has no {role} role", at)
        _check_role(t, role, at, said)
        # the pointer itself, node counts InferenceX states (lint holds them to what is derived), and an
        # MTP depth that says what the recipe does (DECODE_MTP_SIZE=0 beside a recipe without speculation)
        given = {
            k: v
            for k, v in t.given(role).items()
            if reg.REGISTRY[k].kind not in ("recipe", "derived")
            and not (k == "DECODE_MTP_SIZE" and v == t.mtp_steps)
        }
        if given:
            name = next(iter(given))
            raise Unsupported(
                f"{role}: {name} beside {said}: with a recipe, the engine's flags and environment are the "
                "recipe's; set it there",
                at=(*t.role_path(role), "additional-settings"),
            )
    router_ours = ROUTER_OURS if t.engine == "sglang" else VLLM_ROUTER_OURS
    if owned := sorted(set(srt.frontend_args) & set(router_ours)):
        raise Unsupported(f"{said}'s frontend sets {owned}, which the launch decides", at)
    router = t.router
    if srt.frontend is not None and router is not None and srt.frontend != router.name:
        raise Unsupported(f"{said} fronts its workers with {srt.frontend}, the entry with {router.name}", at)
    speculates = any(k.startswith("speculative-") for r in srt.roles.values() for k in r.args)
    if t.engine == "vllm":
        _check_vllm_offload(t, at, said)
        return
    if speculates != (t.point.space.spec_decoding == "mtp"):
        raise Unsupported(
            f"{said} {'runs' if speculates else 'runs no'} speculative decoding; the point says "
            f"spec-decoding {t.point.space.spec_decoding}",
            at=(*t.point.path, "spec-decoding"),
        )
    if t.point.space.kv_offloading == "dram":
        raise Unsupported(f"{said}: a KV offload tier is not rendered from a recipe yet", at)


def _check_role(t: Target, role: str, at: tuple, said: str) -> None:
    """The role's shape and the engine's parallelism, transfer and model, as the recipe and the entry say."""
    rl, w = t.srt.roles[role], t.worker(role)  # type: ignore[union-attr]
    args = rl.args
    pairs = [
        ("workers", rl.workers, w.num_worker),
        ("nodes", rl.nodes, role_nodes(w, t.hardware.gpus_per_node)),
        ("served-model-name", args.get("served-model-name", t.entry.model), t.entry.model),
    ]
    if rl.gpus is not None:
        pairs.append(("gpus", rl.gpus, w.tp))
    if t.engine == "sglang":
        pairs += [
            ("tp-size", args.get("tp-size", args.get("tp", w.tp)), w.tp),
            ("ep-size", args.get("ep-size", 1), w.ep or 1),
            ("enable-dp-attention", bool(args.get("enable-dp-attention", False)), bool(w.dp_attn)),
            ("disaggregation-transfer-backend", args.get("disaggregation-transfer-backend", t.kv_transfer),
             t.kv_transfer),
        ]  # fmt: skip
        if w.dp_attn:
            pairs.append(("dp-size", args.get("dp-size", w.tp), w.tp))
    else:
        pairs += [
            ("tensor-parallel-size", args.get("tensor-parallel-size", w.tp), w.tp),
            ("enable-expert-parallel", bool(args.get("enable-expert-parallel", False)), splits_experts(w)),
            ("trust-remote-code", bool(args.get("trust-remote-code", False)), bool(t.model.remote_code)),
        ]
    for what, theirs, ours in pairs:
        if theirs != ours:
            raise Unsupported(f"{role}: {said} says {what} {theirs}, the entry {ours}", at)
    if t.engine == "vllm":
        _check_vllm_flags(t, role, at, said)


def _check_vllm_flags(t: Target, role: str, at: tuple, said: str) -> None:
    args = t.srt.roles[role].args  # type: ignore[union-attr]
    if "kv-transfer-config" not in args:
        raise Unsupported(f"{role}: {said} states no kv-transfer-config (its PD transfer, compared)", at)
    for flag in ("data-parallel-size", "speculative-config"):
        if flag in args:
            raise Unsupported(f"{role}: {said} sets --{flag}: not rendered for vLLM", at)
    for flag, name in VLLM_SETTINGS.items():
        if flag in args and not isinstance(args[flag], (int, float, bool)):
            raise Unsupported(f"{role}: {said} says {flag} {args[flag]!r}, not a value of {name}", at)


def _check_vllm_offload(t: Target, at: tuple, said: str) -> None:
    """A vLLM recipe's LMCache tier is srt-slurm's lmcache-server on the prefill nodes, exactly when the
    point offloads to LMCache; no other service is rendered."""
    srt = t.srt
    assert srt is not None
    for svc in srt.services:
        if svc.type != LMCACHE_SERVER:
            raise Unsupported(f"{said}: service {svc.name!r} of type {svc.type} is not rendered", at)
        if svc.placement != "prefill":
            raise Unsupported(
                f"{said}: its LMCache server runs on {svc.placement!r} nodes; this launch places it on the "
                "prefill nodes only (a decode-side lookup races the remote-prefill load)",
                at,
            )
    servers = [svc for svc in srt.services if svc.type == LMCACHE_SERVER]
    if bool(servers) != t.uses_lmcache:
        raise Unsupported(
            f"{said} {'runs' if servers else 'runs no'} LMCache server; the point "
            f"{'offloads to LMCache' if t.uses_lmcache else 'names no LMCache offload'}",
            at=(*t.point.path, "kv-offload-backend"),
        )
    if len(servers) > 1:
        raise Unsupported(f"{said}: {len(servers)} LMCache servers; one per prefill node is rendered", at)


def kv_config(t: Target, role: str) -> dict[str, Any]:
    """The recipe's --kv-transfer-config for `role`, parsed (a raw JSON string, which srt-slurm passes
    through untouched)."""
    text = t.srt.roles[role].args["kv-transfer-config"]  # type: ignore[union-attr]
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise Unsupported(f"{role}: the recipe's kv-transfer-config is not a JSON object", t.srt_at)
    return value


def connectors(kv: dict[str, Any]) -> list[dict[str, Any]]:
    """A kv-transfer-config's connectors: a MultiConnector's children, or the one it names."""
    inner = kv.get("kv_connector_extra_config", {})
    found = inner.get("connectors") if kv.get("kv_connector") == "MultiConnector" else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else [kv]


def server_args(t: Target) -> dict[str, str]:
    """The recipe's LMCache server flags (its service's args as flag -> value)."""
    svc = next((s for s in t.srt.services if s.type == LMCACHE_SERVER), None)  # type: ignore[union-attr]
    if svc is None:
        return {}
    words, out = list(svc.args), {}
    while words:
        flag = words.pop(0)
        if not flag.startswith("--") or not words or words[0].startswith("--"):
            raise Unsupported(
                f"the recipe's LMCache server args: {flag!r} is not a --flag with its value", t.srt_at
            )
        out[flag[2:]] = words.pop(0)
    return out


def recipe_settings(t: Target, role: str) -> dict[str, Any]:
    """The settings of ours a vLLM recipe states for `role`, typed: its flags that are settings, its KV
    connectors' extra config, its LMCache server's flags (prefill) and its benchmark's trace set. The
    launch writes them back where it writes any setting, so nothing of them is lost or said twice."""
    srt = t.srt
    if srt is None or t.engine != "vllm" or role not in srt.roles:
        return {}
    args, raw = srt.roles[role].args, {}
    for flag, name in VLLM_SETTINGS.items():
        if args.get(flag) is not None:
            raw[name] = args[flag] if flag != "no-enable-prefix-caching" else not args[flag]
    if "kv-transfer-config" in args:
        for connector in connectors(kv_config(t, role)):
            extra = connector.get("kv_connector_extra_config", {})
            for key, name in CONNECTOR_SETTINGS.get(str(connector.get("kv_connector")), {}).items():
                if isinstance(extra, dict) and key in extra:
                    raw[name] = extra[key]
    if role == "prefill":
        from . import vllm  # recipes/vllm.py imports this module: its server flags read at call time

        server = server_args(t)
        raw.update(
            {
                name: server[flag]
                for flag, name in vllm.LMCACHE_SETTINGS.items()
                if flag in server and flag != LMCACHE_SERVER_BUDGET  # the budget is derived, compared
            }
        )
    raw.update({name: srt.benchmark_env[name] for name in BENCHMARK_SETTINGS if name in srt.benchmark_env})
    out = {}
    for name, value in raw.items():
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        try:
            out[name] = reg.REGISTRY[name].parse(text)
        except reg.SettingError as err:
            raise Unsupported(
                f"{role}: the recipe {srt.pointer} gives {name} {text!r}: {err}", t.srt_at
            ) from None
    return out


def vllm_engine_args(t: Target, role: str) -> list[Any]:
    """A vLLM recipe's flags for `role` as srt-slurm writes them, less the launch's own, the compared ones
    and those that are settings (the launch writes those from the settings, recipe_settings)."""
    rl = t.srt.roles[role]  # type: ignore[union-attr]
    skip = {*VLLM_OURS, *VLLM_COMPARED, *VLLM_SETTINGS}
    return cli({k: v for k, v in rl.args.items() if k not in skip})


def engine_args(t: Target, role: str) -> list[Any]:
    """The recipe's flags for `role` as srt-slurm writes them, less the ones the launch writes itself: the
    compared ones (the same by check()) and the site's; a draft model's path is the runner's staged copy."""
    rl = t.srt.roles[role]  # type: ignore[union-attr]
    kept = {k: v for k, v in rl.args.items() if k not in SGLANG_OURS and k not in COMPARED}
    if DRAFT_PATH in kept:
        kept[DRAFT_PATH] = f"{t.launch.model_root}/{kept[DRAFT_PATH]}"
    return cli(kept)


def role_env(t: Target, role: str) -> dict[str, str]:
    """The recipe's environment for `role`, less the site's (the runner sets that) and the launch's own."""
    env = t.srt.roles[role].env  # type: ignore[union-attr]
    return {k: v for k, v in sorted(env.items()) if k not in SITE_ENV and k not in VLLM_LAUNCH_ENV}


def notes(t: Target) -> tuple:
    """env.sh's word on where the launch stands for the recipe: its file, and each of its values the site's
    launch profile replaces."""
    srt = t.srt
    if srt is None:
        return ()
    out = [f"Engine flags and environment: srt-slurm recipe {srt.pointer} ({srt.name})."]
    for role in t.roles:
        rl = srt.roles[role]
        for name in sorted(set(rl.env) & set(SITE_ENV)):
            out.append(f"{role}: the recipe's {name}={rl.env[name]} is the site's: {SITE_ENV[name]} instead.")
        for name in sorted(set(rl.env) & set(VLLM_LAUNCH_ENV)):
            out.append(
                f"{role}: the recipe's {name}={rl.env[name]} is the launch's: {VLLM_LAUNCH_ENV[name]}."
            )
        ours = SGLANG_OURS if t.engine == "sglang" else VLLM_OURS
        for flag in sorted(set(rl.args) & set(ours)):
            out.append(f"{role}: the recipe's --{flag} is the launch's: {ours[flag]}.")
    server = server_args(t) if t.engine == "vllm" else {}
    for flag in sorted(set(server) & {*LMCACHE_SERVER_OURS, *LMCACHE_SERVER_SITE}):
        out.append(
            f"LMCache server: the recipe's --{flag} is the launch's (its ports, the runner's profile)."
        )
    if t.engine == "vllm":
        for name in sorted(set(srt.benchmark_env) - set(BENCHMARK_SETTINGS)):
            out.append(
                f"benchmark.env {name} is srt-slurm's benchmark stage's: this launch runs its own client."
            )
    return tuple(out)
