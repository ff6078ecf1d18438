"""ATOM engines (AMD's ROCm/ATOM): `python3 -m atom.entrypoints.openai_server` per role, PD over ATOM's
Mooncake connector, atomesh (ATOM's own router, shipped in its images) in front, as InferenceX's
known-working MI355X launch runs them (docs/atom.md)."""

from __future__ import annotations

from schemas import settings as reg
from schemas.entries import splits_experts

from .benchmark import concurrencies
from .plan import Ports, Service, Timeouts
from .target import NODE_ADDR, Target, Unsupported
from .words import argv, json_word, word

# ATOM's Mooncake side channel: the base port of its ZMQ handshake (one port a rank above it).
HANDSHAKE_PORT = 6301
# What the known-working launch captures CUDA graphs for on decode: 1, 2, 4, then every 8 up to 256.
DECODE_GRAPH_SIZES = [1, 2, 4, *range(8, 257, 8)]
# ATOM checks num_speculative_tokens (its config): 1 to 4.
MTP_STEPS = (1, 4)


def check(t: Target) -> None:
    if t.disagg and t.kv_transfer != "mooncake":
        raise Unsupported(
            f"kv-p2p-transfer {t.kv_transfer!r} is not rendered for ATOM (mooncake, its PD connector, is)",
            at=(t.key, "kv-p2p-transfer"),
        )
    if t.point.space.kv_offload_backend is not None:
        raise Unsupported(
            "kv-offload-backend is not rendered for ATOM", at=(*t.point.path, "kv-offload-backend")
        )
    for role in t.roles:
        if t.worker(role).tp > t.hardware.gpus_per_node:
            raise Unsupported(
                f"{role}: a worker wider than a node is not rendered for ATOM (the known-working launch runs "
                "none: it passes no multi-node flags)",
                at=(*t.role_path(role), "tp"),
            )
    devices = list(t.launch.nic_devices)
    wanted = [f"rdma{i}" for i in range(len(devices))]
    if uses_rdma(t) and devices != wanted:
        raise Unsupported(
            f"ATOM's Mooncake takes RDMA device rdma<GPU index> for each GPU, and runner {t.runner_label} "
            f"names its devices {devices}: this launch would not find them",
            at=(t.key, "kv-p2p-transfer"),
        )
    if t.point.space.spec_decoding == "mtp":
        low, high = MTP_STEPS
        if not t.recipe.mtp_args:
            raise Unsupported(
                f"spec-decoding mtp on model {t.entry.model}, whose atom recipe in configs/models.yaml has "
                "no mtp-args (the draft method a known-working MTP launch used)",
                at=(*t.point.path, "spec-decoding"),
            )
        if not low <= t.mtp_steps <= high:
            raise Unsupported(
                f"spec-decoding mtp needs DECODE_MTP_SIZE={low}..{high} (ATOM's num-speculative-tokens), "
                f"got {t.mtp_steps}",
                at=(*t.role_path("decode"), "additional-settings"),
            )


def services(t: Target, role: str, ports: Ports, timeouts: Timeouts) -> list[Service]:
    return [_atom_service(t, role, ports, timeouts)]


def _parallel_args(t: Target, role: str) -> list:
    """TP; DP attention (ATOM then runs one engine a GPU: -tp N with it is N DP ranks of TP 1); experts split
    over the worker's GPUs."""
    w = t.worker(role)
    return [
        *("-tp", w.tp),
        *(["--enable-expert-parallel"] if splits_experts(w) else []),
        *(["--enable-dp-attention"] if w.dp_attn else []),
    ]


def _role_env(t: Target, role: str) -> list:
    """A DP-attention worker's own environment (the model's dp-attention env), on its engine line."""
    env = t.dp_env(role)
    return ["env", *(word(f"{k}={v}") for k, v in env.items())] if env else []


def _atom_service(t: Target, role: str, ports: Ports, timeouts: Timeouts) -> Service:
    s = t.settings(role)
    args = [
        *_role_env(t, role),
        "python3",
        "-m",
        "atom.entrypoints.openai_server",
        "--model",
        t.model_path,
        "--host",
        NODE_ADDR,
        "--server-port",
        ports.engine,
        *(["--trust-remote-code"] if t.model.remote_code else []),
        *_parallel_args(t, role),
        *t.model_args(role),
        *(["--num-speculative-tokens", t.mtp_steps] if t.mtp_steps else []),
    ]
    # a decode admits the sweep's largest concurrency unless the config says otherwise
    seqs = s["MAX_NUM_SEQS"] or (max(concurrencies(t)) if role == "decode" else None)
    for flag, value in (
        ("--gpu-memory-utilization", s["GPU_MEMORY_UTILIZATION"]),
        ("--max-num-seqs", seqs),
        ("--max-model-len", s["MAX_MODEL_LEN"] or _fixed_seq_context(t)),
    ):
        if value is not None:
            args += [flag, value]
    if role == "decode":  # CUDA graphs up to 256 sequences, as the known-working launch captures them
        args += ["--cudagraph-capture-sizes", json_word(DECODE_GRAPH_SIZES)]
    if role in reg.ROLES:
        args += ["--kv-transfer-config", json_word(_kv_transfer_config(role))]
    return Service(
        name="atom",
        argv=argv(*args),
        ready_url=word("http://", NODE_ADDR, f":{ports.engine}/health"),
        ready_timeout=timeouts.engine_ready,
    )


def _kv_transfer_config(role: str) -> dict:
    """ATOM's Mooncake connector: producer on prefill, consumer on decode, its side channel on the node's
    data-plane address (the known-working launch names the node's own address as proxy_ip)."""
    kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
    return {
        "kv_role": kv_role,
        "kv_connector": "mooncake",
        "proxy_ip": word(NODE_ADDR),
        "handshake_port": HANDSHAKE_PORT,
    }


def engine_env(t: Target, ports: Ports) -> dict:
    """The model's environment (its DP-attention workers' own goes on their engine lines)."""
    return dict(t.recipe.env)


def uses_rdma(t: Target) -> bool:
    """ATOM's Mooncake moves KV over RDMA (its protocol default) where the runner names devices."""
    return t.disagg and bool(t.launch.nic_devices)


def transport(t: Target) -> tuple:
    return (("mooncake-protocol", "rdma" if uses_rdma(t) else "tcp"),) if t.disagg else ()


def watch_signatures(t: Target) -> tuple:
    return ()


def l1_budget(t: Target) -> None:
    """No host-DRAM KV tier is rendered for ATOM (check() refuses a kv-offload-backend)."""
    return None


def shell_env(t: Target) -> tuple:
    return ()


def shell_notes(t: Target) -> tuple:
    return ()


# InferenceX's matrix generator gives every fixed-seq-len row max-model-len = isl + osl + 256, which its
# workflow exports as MAX_MODEL_LEN and server_atom.sh passes as --max-model-len.
FIXED_SEQ_CONTEXT_MARGIN = 256


def _fixed_seq_context(t: Target) -> int | None:
    lengths = t.scenario_params
    if lengths.get("isl") is None or lengths.get("osl") is None:
        return None
    return int(lengths["isl"]) + int(lengths["osl"]) + FIXED_SEQ_CONTEXT_MARGIN


def caveats(t: Target) -> tuple:
    return ()


def served_model(t: Target) -> str:
    """ATOM serves its model under the path it loaded (it has no --served-model-name)."""
    return t.model_path


def has_metrics(t: Target) -> bool:
    """ATOM's server has no /metrics (its endpoints at the recorded commit): no engine counters are read."""
    return False


def proof_roles(t: Target) -> tuple:
    """Nothing to read: the smoke proof is the answer through atomesh, which sends a request to decode only
    with the kv_transfer_params its prefill returned (502 without)."""
    return ()


def router_service(t: Target, backends: list, ports: Ports, timeouts: Timeouts, counts: dict) -> Service:
    # atomesh learns each prefill's TP and DP from its /kv_transfer_info: no bootstrap port follows --prefill
    urls = [w for w in backends if w != ports.mooncake_bootstrap]
    args = [
        "atomesh",
        "launch",
        "--host",
        NODE_ADDR,
        "--port",
        ports.router,
        "--pd-disaggregation",
        *urls,
        *("--policy", "random", "--backend", "atom"),
        "--disable-health-check",
        "--disable-circuit-breaker",
        "--prometheus-host",
        NODE_ADDR,
        "--prometheus-port",
        ports.router_metrics,
        "--request-timeout-secs",
        1800,
    ]
    # /v1/models goes to the first prefill: it answers once the router serves and that prefill does, as the
    # known-working launch waits for it
    url = word("http://", NODE_ADDR, f":{ports.router}/v1/models")
    return Service("router", argv(*args), url, timeouts.router_ready)


def router_metrics_port(t: Target, ports: Ports) -> int:
    return ports.router_metrics


def flushes_caches(t: Target) -> bool:
    """The known-working launch runs its concurrencies back to back over the same caches."""
    return False
