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

from typing import Any

from schemas import settings as reg
from schemas.entries import role_nodes

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
    if t.engine != "sglang":
        raise Unsupported(f"{said}: points are rendered from srt-slurm recipes on SGLang only so far", at)
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
    if owned := sorted(set(srt.frontend_args) & set(ROUTER_OURS)):
        raise Unsupported(f"{said}'s frontend sets {owned}, which the launch decides", at)
    router = t.router
    if srt.frontend is not None and router is not None and srt.frontend != router.name:
        raise Unsupported(f"{said} fronts its workers with {srt.frontend}, the entry with {router.name}", at)
    speculates = any(k.startswith("speculative-") for r in srt.roles.values() for k in r.args)
    if speculates != (t.point.space.spec_decoding == "mtp"):
        raise Unsupported(
            f"{said} {'runs' if speculates else 'runs no'} speculative decoding; the point says "
            f"spec-decoding {t.point.space.spec_decoding}",
            at=(*t.point.path, "spec-decoding"),
        )
    if t.point.space.kv_offloading == "dram":
        raise Unsupported(f"{said}: a KV offload tier is not rendered from a recipe yet", at)


def _check_role(t: Target, role: str, at: tuple, said: str) -> None:
    rl, w = t.srt.roles[role], t.worker(role)  # type: ignore[union-attr]
    args = rl.args
    pairs = [
        ("workers", rl.workers, w.num_worker),
        ("nodes", rl.nodes, role_nodes(w, t.hardware.gpus_per_node)),
        ("tp-size", args.get("tp-size", args.get("tp", w.tp)), w.tp),
        ("ep-size", args.get("ep-size", 1), w.ep or 1),
        ("enable-dp-attention", bool(args.get("enable-dp-attention", False)), bool(w.dp_attn)),
        ("disaggregation-transfer-backend", args.get("disaggregation-transfer-backend", t.kv_transfer),
         t.kv_transfer),
        ("served-model-name", args.get("served-model-name", t.entry.model), t.entry.model),
    ]  # fmt: skip
    if w.dp_attn:
        pairs.append(("dp-size", args.get("dp-size", w.tp), w.tp))
    if rl.gpus is not None:
        pairs.append(("gpus", rl.gpus, w.tp))
    for what, theirs, ours in pairs:
        if theirs != ours:
            raise Unsupported(f"{role}: {said} says {what} {theirs}, the entry {ours}", at)


def engine_args(t: Target, role: str) -> list[Any]:
    """The recipe's flags for `role` as srt-slurm writes them, less the ones the launch writes itself: the
    compared ones (the same by check()) and the site's; a draft model's path is the runner's staged copy."""
    rl = t.srt.roles[role]  # type: ignore[union-attr]
    kept = {k: v for k, v in rl.args.items() if k not in SGLANG_OURS and k not in COMPARED}
    if DRAFT_PATH in kept:
        kept[DRAFT_PATH] = f"{t.launch.model_root}/{kept[DRAFT_PATH]}"
    return cli(kept)


def role_env(t: Target, role: str) -> dict[str, str]:
    """The recipe's environment for `role`, less the site's (the runner sets that)."""
    env = t.srt.roles[role].env  # type: ignore[union-attr]
    return {k: v for k, v in sorted(env.items()) if k not in SITE_ENV}


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
        for flag in sorted(set(rl.args) & set(SGLANG_OURS)):
            out.append(f"{role}: the recipe's --{flag} is the launch's: {SGLANG_OURS[flag]}.")
    return tuple(out)
