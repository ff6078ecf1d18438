"""vLLM engines (docs/upstream-facts.md): `vllm serve` per role, KV-transfer config, the LMCache MP server on
prefill nodes, and the two PD routers that front vLLM (our proxy, vllm-router)."""

from __future__ import annotations

from schemas import settings as reg
from schemas.entries import dram_budget, splits_experts
from schemas.kv_path import LMCACHE_MP, kv_connectors
from schemas.launch import Role

from . import nodesetup, srt
from .benchmark import concurrencies
from .outside.srt_recipe import cli
from .plan import Ports, Service, Timeouts
from .target import LOCAL_ADDR, NODE_ADDR, Target, Unsupported
from .words import Ref, argv, json_word, word

MOONCAKE_ABORT_TIMEOUT_S = 480


# Errors a service logs and then waits instead of exiting; the node's log watcher ends the job at the line.
# Seen on this machine kind (docs/upstream-facts.md#gpu-less-engines): a CPU engine's LMCacheMPConnector
# registers an engine-driven context; a server that does not serve that mode logs this within a millisecond,
# and the prefill then blocks in register_kv_caches for 2 x lmcache.mp.mq_timeout before it fails.
LMCACHE_HANG_SIGNATURES = (
    {
        "issue": "lmcache-transfer-mode",
        "title": "the LMCache server has no handler for the engine's transfer mode: the prefill waits at "
        "start for 2 x lmcache.mp.mq_timeout, then fails",
        "regex": r"No handler registered for operation \S*engine_driven",
        "fix": "serve the engine's mode: the runner's lmcache.transfer-mode in configs/launch.yaml (auto), "
        "or an LMCache server and connector of one release",
        "source": "recipes/vllm.py LMCACHE_HANG_SIGNATURES",
    },
    # Seen on this machine kind: a server that reaps an engine it thinks silent answers its next store
    # "context not registered (or reaped)", and that engine's worker waits for the answer forever while its
    # /health stays 200.
    {
        "issue": "lmcache-reaped-engine",
        "title": "the LMCache server reaped an engine it thought silent: that prefill's next store waits "
        "forever while its /health answers 200",
        "regex": r"Reaped non-GPU instance",
        "fix": "raise the runner's lmcache.worker-reap-timeout in configs/launch.yaml above the engine's "
        "longest busy spell (or 0: never reap)",
        "source": "recipes/vllm.py LMCACHE_HANG_SIGNATURES",
    },
)


def check(t: Target) -> None:
    if t.disagg and t.kv_transfer != "mooncake":
        raise Unsupported(
            f"kv-p2p-transfer {t.kv_transfer!r} is not rendered (mooncake only)",
            at=(t.key, "kv-p2p-transfer"),
        )
    rdma = [role for role, protocol in protocols(t).items() if protocol == "rdma"]
    if rdma and not t.launch.nic_devices:
        # Mooncake's device_name is the runner's nic-devices: without them render would pass none and leave
        # the choice to Mooncake on the node, where a wrong guess shows only at the first transfer.
        raise Unsupported(
            f"MC_PROTOCOL=rdma on runner {t.runner_label}, whose launch profile lists no nic-devices: "
            "Mooncake would be given no RDMA device to move KV over. List the runner's RDMA devices (as "
            f"`ibv_devices` or `rdma link` shows them) in configs/launch.yaml profiles.{t.runner_label}."
            "nic-devices, or set MC_PROTOCOL=tcp",
            at=_setting_at(t, rdma[0], "MC_PROTOCOL"),
        )
    if rdma and t.launch.gpu_vendor == "amd" and t.launch.mooncake_registration is None:
        raise Unsupported(
            "MC_PROTOCOL=rdma on an AMD runner whose launch profile states no mooncake-registration (dmabuf "
            "or ibv-reg-mr, configs/launch.yaml): how Mooncake registers GPU memory is the site's fact "
            "(docs/upstream-facts.md#mi355x-clusters), never a guess",
            at=(*t.role_path("prefill"), "additional-settings"),
        )
    if t.point.space.spec_decoding == "mtp":
        raise Unsupported(
            "spec-decoding mtp is not rendered for vLLM yet", at=(*t.point.path, "spec-decoding")
        )
    for role in t.roles:
        if t.worker(role).dp_attn:
            raise Unsupported(
                f"{role}: dp-attn is not rendered for vLLM yet", at=(*t.role_path(role), "dp-attn")
            )
    for role in t.roles:
        _check_heads_split(t, role)
    if t.srt is not None:
        _check_recipe(t)


def _check_recipe(t: Target) -> None:
    """A vLLM recipe's PD wiring and LMCache pool are the launch's: its kv-transfer-config must be the one
    the launch writes from the settings the recipe states (as srt-slurm runs it: LMCache dialled at the
    server on the worker's node), its LMCache L1 size the one the runner's DRAM gives."""
    said, at = f"the recipe {t.srt.pointer}", t.srt_at  # type: ignore[union-attr]
    for role in t.roles:
        ours = srt_kv_transfer_config(t, role)
        theirs = srt.kv_config(t, role)
        if theirs != ours:
            raise Unsupported(
                f"{role}: {said}'s kv-transfer-config {json_word(theirs)} is not the launch's for the "
                f"settings it states: {json_word(ours)}",
                at,
            )
    budget = l1_budget(t)
    size = srt.server_args(t).get(srt.LMCACHE_SERVER_BUDGET)
    if budget is not None and size is not None and size != str(budget.l1_gib):
        raise Unsupported(
            f"{said} sizes LMCache's L1 at {size} GB; the runner's DRAM at dram-utilization "
            f"{t.dram_utilization} gives {budget.l1_gib}",
            at,
        )


def srt_kv_transfer_config(t: Target, role: str) -> dict:
    """The kv-transfer-config the launch writes for `role`, as an srt-slurm recipe states it: plain values,
    LMCache's connector dialling srt-slurm's server on the worker's node."""
    return _kv_transfer_config(t, role, t.settings(role), lmcache_dial=srt.SRT_LMCACHE_DIAL)


def _setting_at(t: Target, role: str, name: str) -> tuple:
    """Where `role`'s setting NAME is written: its additional-settings item, else (a model's default) the
    list."""
    items = t.worker(role).additional_settings
    found = next((i for i, item in enumerate(items) if str(item).partition("=")[0] == name), None)
    return (*t.role_path(role), "additional-settings", *(() if found is None else (found,)))


def _tp_splits_heads(arch, tp: int) -> bool:
    """vLLM's rules: attention heads divide evenly over tp (ModelConfig.verify_with_parallel_config), and KV
    heads too, or are replicated evenly when tp is the larger (QKVParallelLinear); MLA keeps one latent KV
    per token, so only the first holds there."""
    kv = arch.kv_heads
    kv_fits = arch.mla is not None or (kv % tp == 0 if tp <= kv else tp % kv == 0)
    return arch.heads % tp == 0 and kv_fits


def _check_heads_split(t: Target, role: str) -> None:
    """A tp that splits the model's heads unevenly fails at engine start, minutes into the allocation."""
    arch, tp = t.model.architecture, t.worker(role).tp
    if _tp_splits_heads(arch, tp):
        return
    if arch.heads % tp:
        why = f"the model's {arch.heads} attention heads (configs/models.yaml heads) are not divisible by it"
    else:
        why = (
            f"the model's {arch.kv_heads} KV heads (configs/models.yaml kv-heads) are not divisible by it, "
            "nor is it by them"
        )
    node = t.hardware.gpus_per_node
    works = [str(n) for n in range(1, node + 1) if _tp_splits_heads(arch, n)]
    fits = f"tp {', '.join(works[:-1])} or {works[-1]}" if len(works) > 1 else f"tp {''.join(works)}"
    raise Unsupported(
        f"{role}: tp {tp} on model {t.entry.model}: {why}, and vLLM splits heads over tp evenly (heads "
        f"divisible by tp; KV heads divisible by tp, or tp by KV heads when it is larger). {fits} works on "
        f"a node of {node} GPUs",
        at=(*t.role_path(role), "tp"),
    )


def protocols(t: Target) -> dict:
    """The Mooncake transport of each PD role ({} for a single server)."""
    return {role: t.settings(role)["MC_PROTOCOL"] for role in ("prefill", "decode")} if t.disagg else {}


def uses_rdma(t: Target) -> bool:
    return "rdma" in protocols(t).values()


def transport(t: Target) -> tuple:
    """What lock.json records of how KV moves: Mooncake's protocol and, for rdma, how it registers GPU
    memory (the runner's mooncake-registration)."""
    by_role = protocols(t)
    if not by_role:
        return ()
    kinds = set(by_role.values())
    said = kinds.pop() if len(kinds) == 1 else ", ".join(f"{r} {p}" for r, p in by_role.items())
    out = [("mooncake-protocol", said)]
    if "rdma" in by_role.values():
        registration = {
            "dmabuf": "dmabuf (Mooncake's default)",
            "ibv-reg-mr": "ibv-reg-mr (MOONCAKE_DISABLE_HIP_DMABUF=1)",
            None: "not stated by the runner (Mooncake's default)",
        }[t.launch.mooncake_registration]
        out.append(("mooncake-registration", registration))
    return tuple(out)


def services(t: Target, role: Role, ports: Ports, timeouts: Timeouts) -> list[Service]:
    """What a node of `role` starts, in order: LMCache first where it is the prefill's L2."""
    lmcache = [_lmcache_service(t, ports, timeouts)] if role == "prefill" and t.uses_lmcache else []
    return [*lmcache, _vllm_service(t, role, ports, timeouts)]


def _lmcache_service(t: Target, ports: Ports, timeouts: Timeouts) -> Service:
    s = {name: Ref(name) for name in _LMCACHE_FLAGS.values()}
    args = [
        "lmcache",
        "server",
        "--host",
        LOCAL_ADDR,
        "--port",
        ports.lmcache,
        "--http-host",
        LOCAL_ADDR,
        "--http-port",
        ports.lmcache_http,
        "--l1-size-gb",
        s["LMCACHE_L1_SIZE_GB"],
        "--eviction-policy",
        s["LMCACHE_EVICTION_POLICY"],
        "--l1-init-size-gb",
        s["LMCACHE_L1_INIT_SIZE_GB"],
        "--chunk-size",
        s["LMCACHE_CHUNK_SIZE"],
        *_lmcache_optional_args(t),
        *_lmcache_runner_args(t),
    ]
    return Service(
        name="lmcache",
        argv=argv(*args),
        ready_url=word("http://", LOCAL_ADDR, f":{ports.lmcache_http}/healthcheck"),
        ready_timeout=timeouts.lmcache_ready,
    )


def _lmcache_optional_args(t: Target) -> list:
    """The server flags of the optional settings the config sets (lmcache's own defaults otherwise)."""
    s = t.settings("prefill")
    return [
        x for flag, name in _LMCACHE_OPTIONAL.items() if s[name] is not None for x in (f"--{flag}", Ref(name))
    ]


def _lmcache_runner_args(t: Target) -> list:
    """What the runner's engines need of the server (launch profile lmcache): a CPU engine registers an
    engine-driven context, and a busy one must not be reaped."""
    lmc = t.launch.lmcache
    args: list[str | int] = []
    if lmc.transfer_mode is not None:
        args += ["--supported-transfer-mode", lmc.transfer_mode]
    if lmc.worker_reap_timeout is not None:
        args += ["--worker-reap-timeout-seconds", lmc.worker_reap_timeout]
    return args


# lmcache server flag -> the env.sh variable that holds its value (optional ones only when set)
_LMCACHE_FLAGS = {
    "l1-size-gb": "LMCACHE_L1_SIZE_GB",
    "eviction-policy": "LMCACHE_EVICTION_POLICY",
    "l1-init-size-gb": "LMCACHE_L1_INIT_SIZE_GB",
    "chunk-size": "LMCACHE_CHUNK_SIZE",
}
_LMCACHE_OPTIONAL = {
    "l1-read-ttl-seconds": "LMCACHE_L1_READ_TTL_SECONDS",
    "max-workers": "LMCACHE_MAX_WORKERS",
}
# every server flag that is a setting (a recipe's value of one is the point's setting: recipes/srt.py)
LMCACHE_SETTINGS = {**_LMCACHE_FLAGS, **_LMCACHE_OPTIONAL}


# Mooncake's transfer engine asked for rdma that finds no RDMA device moves KV over TCP and says so only in
# a warning of its topology discovery (seen here with mooncake-transfer-engine 0.3.13.post1: initialize,
# register_memory and transfers all succeed; tests/engines/test_mooncake_fallback.py): a run over TCP must
# never pass for an rdma one.
MOONCAKE_TCP_FALLBACK = {
    "issue": "mooncake-rdma-fell-back-to-tcp",
    "title": "Mooncake was asked for rdma, found no RDMA device and moves the KV over TCP instead",
    "regex": r"No RDMA devices found|Found 0 HCAs",
    "fix": "make the node's RDMA devices (the runner's nic-devices) visible to the engine, in the container "
    "too; or render MC_PROTOCOL=tcp and say so in the changelog",
    "source": "recipes/vllm.py MOONCAKE_TCP_FALLBACK",
}


# A Mooncake TCP transfer that stalls is failed by the transfer engine after its timeouts (30 s each), and
# the request with it (kv_load_failure_policy fail); but the prefill then holds that request's KV blocks
# until VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT (480 s), and on the local CPU runner (seen in CI, 127.0.0.x
# peers, mooncake-transfer-engine-non-cuda 0.3.13.post1) its next request waited deferred until the
# serving-stall watchdog failed the job 5 minutes later, naming the wedge instead of the transfer. Any
# protocol: an rdma engine that fell back to TCP transfers over TCP too.
MOONCAKE_TRANSFER_STALLED = {
    "issue": "mooncake-tcp-transfer-stalled",
    "title": "a Mooncake TCP transfer made no progress within its timeout: the request failed, and the "
    "engine keeps its KV blocks until the Mooncake abort timeout",
    "regex": r"ClientSession: no (?:status frame|transfer progress) within",
    "fix": "the engine log's lines before it say which peer; check that peer's engine and the data-plane "
    "path between them (MC_TCP_PROGRESS_TIMEOUT_SEC and MC_TCP_STATUS_TIMEOUT_SEC set the timeouts)",
    "source": "recipes/vllm.py MOONCAKE_TRANSFER_STALLED",
}


def watch_signatures(t: Target) -> tuple:
    """Log lines of the engine's own components that fail the job (scripts/logwatch.py): LMCache's hangs
    (it logs its error and waits instead of exiting), Mooncake's silent fall back from rdma to TCP, and a
    stalled Mooncake transfer (which wedges the prefill)."""
    out: tuple[dict[str, str], ...] = LMCACHE_HANG_SIGNATURES if t.uses_lmcache else ()
    if uses_rdma(t):
        out += (MOONCAKE_TCP_FALLBACK,)
    if protocols(t):
        out += (MOONCAKE_TRANSFER_STALLED,)
    return out


def l1_budget(t: Target):
    """The prefill server's KV-offload DRAM budget (schemas/dram.py), which sizes LMCache's L1 pool; None
    when the variant runs no LMCache."""
    if not t.uses_lmcache:
        return None
    budget = dram_budget(t.hardware, t.dram_utilization, t.worker("prefill"))
    if budget is None:  # lint's _dram_budget_tiles_node refuses such a config first
        raise Unsupported(
            "the prefill worker does not tile a node, or its runner states no DRAM: its DRAM budget is "
            "undefined",
            at=t.role_path("prefill"),
        )
    return budget


def caveats(t: Target) -> tuple:
    """Nothing of a vLLM launch makes its numbers special."""
    return ()


def shell_notes(t: Target) -> tuple:
    """What env.sh says above the LMCache values: where L1's size comes from; from a recipe, which, and
    what of it the launch decides instead."""
    b = l1_budget(t)
    if b is None:
        return srt.notes(t)
    return (
        *srt.notes(t),
        "LMCache MP server on prefill nodes (one L1 pool per node).",
        "L1 is the prefill server's KV-offload DRAM budget as InferenceX states it: per server, proportional",
        f"to the GPUs its engine uses, in GB, at most {b.cap_gb} GB a server; lmcache --l1-size-gb counts "
        "GiB.",
        f"  min({b.available_mib} MiB available, {b.cap_mib} MiB cap) x 2^20 B x dram-utilization "
        f"{b.utilization}",
        f"  x {b.gpus_used}/{b.gpus_per_node} GPUs = {b.budget_gb} GB = {b.l1_gib} GiB",
    )


def shell_env(t: Target) -> tuple:
    """env.sh's LMCache values, which the node script expands into the server's flags and the connector
    config (L1 = the prefill server's DRAM budget in whole GiB, one pool per node)."""
    budget = l1_budget(t)
    if budget is None:
        return ()
    s = t.settings("prefill")
    values = {
        "LMCACHE_L1_SIZE_GB": budget.l1_gib,
        "LMCACHE_MP_MQ_TIMEOUT": s["LMCACHE_MP_MQ_TIMEOUT"],
    }
    for name in (
        "LMCACHE_EVICTION_POLICY",
        "LMCACHE_L1_INIT_SIZE_GB",
        "LMCACHE_CHUNK_SIZE",
        *_LMCACHE_OPTIONAL.values(),
    ):
        if s[name] is not None:
            values[name] = s[name]
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def _vllm_service(t: Target, role: Role, ports: Ports, timeouts: Timeouts) -> Service:
    w = t.worker(role)
    s = t.settings(role)
    recipe_env = [word(f"{k}={v}") for k, v in srt.role_env(t, role).items()] if t.srt is not None else []
    args = [
        "env",
        word("VLLM_HOST_IP=", NODE_ADDR),
        *_connector_module_path(t),
        *recipe_env,
        "vllm",
        "serve",
        t.model_path,
        "--served-model-name",
        t.entry.model,
        "--host",
        NODE_ADDR,
        "--port",
        ports.engine,
        "--tensor-parallel-size",
        w.tp,
        # EP over the TP group (vLLM: EP size = TP x DP; lint refuses any other ep)
        *(["--enable-expert-parallel"] if splits_experts(w) else []),
        *(["--trust-remote-code"] if t.model.remote_code else []),
        *(t.model_args(role) if t.srt is None else srt.vllm_engine_args(t, role)),
        "--gpu-memory-utilization",
        s["GPU_MEMORY_UTILIZATION"],
        "--enable-prefix-caching" if s["ENABLE_PREFIX_CACHING"] else "--no-enable-prefix-caching",
    ]
    for flag, name in (
        ("--max-model-len", "MAX_MODEL_LEN"),
        ("--max-num-batched-tokens", "MAX_NUM_BATCHED_TOKENS"),
    ):
        if s[name] is not None:
            args += [flag, s[name]]
    derived = t.srt is None and t.recipe.max_seqs_from_concurrency  # a recipe states its own, or none
    seqs = s["MAX_NUM_SEQS"] or (max(concurrencies(t)) if derived else None)
    if seqs is not None:
        args += ["--max-num-seqs", seqs]
    if role in reg.ROLES:
        args += ["--kv-transfer-config", json_word(_kv_transfer_config(t, role, s, ports))]
    args += t.launch.engine_args.get(role, [])  # what this runner's hardware needs, after the recipe's
    return Service(
        name="vllm",
        argv=argv(*args),
        ready_url=word("http://", NODE_ADDR, f":{ports.engine}/health"),
        ready_timeout=timeouts.engine_ready,
    )


# The module vLLM loads LMCache's connector from (its kv_connector_module_path): the prefill preflight imports
# it with the engine's Python, so an LMCache whose compiled part does not load fails there, named.
LMCACHE_CONNECTOR_MODULE = "lmcache.integration.vllm.lmcache_mp_connector"


def _connector_module_path(t: Target) -> list:
    """A local runner's own connector module (launch profile kv-connector-module): its shipped folder goes
    on the engine's PYTHONPATH."""
    shim = t.launch.kv_connector_module
    return [word("PYTHONPATH=", Ref("RECIPE_DIR"), f"/{shim.shipped}")] if shim else []


def _mooncake(t: Target, role: str, extra: dict) -> dict:
    """One MooncakeConnector: vLLM's own, or loaded from the runner's connector module."""
    out = {"kv_connector": "MooncakeConnector", "kv_role": role, "kv_connector_extra_config": extra}
    if t.launch.kv_connector_module is not None:
        out["kv_connector_module_path"] = t.launch.kv_connector_module.module
    return out


def _kv_transfer_config(t: Target, role: str, s: dict, ports: Ports | None = None, lmcache_dial=None) -> dict:
    """Decode is a plain Mooncake consumer; prefill a Mooncake producer, joined by the
    LMCache MP connector under MultiConnector when LMCache is the offload backend (schemas/kv_path.py
    decides which, for lint's known issues too)."""
    mooncake_extra = {"mooncake_protocol": s["MC_PROTOCOL"], "num_workers": s["MC_NUM_WORKERS"]}
    if s["MC_PROTOCOL"] == "rdma" and t.launch.nic_devices:
        # vLLM >= 0.33 hands it to Mooncake's transfer engine: the runner's RDMA devices, not any it finds
        mooncake_extra["device_name"] = ",".join(t.launch.nic_devices)
    if role == "decode":
        # "fail", not recompute: a lost transfer must surface, never turn into silent recompute.
        return {**_mooncake(t, "kv_consumer", mooncake_extra), "kv_load_failure_policy": "fail"}
    mooncake = _mooncake(t, "kv_producer", mooncake_extra)
    if LMCACHE_MP not in kv_connectors(t.entry, role, t.point):
        return mooncake
    lmcache = {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_module_path": LMCACHE_CONNECTOR_MODULE,
        "kv_connector_extra_config": _lmcache_dial(s, ports, lmcache_dial),
    }
    # recompute: only the top-level policy is read, and the L2 store is best-effort.
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_producer",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"connectors": [mooncake, lmcache]},
    }


def _lmcache_dial(s: dict, ports: Ports | None, srt_dial: dict | None) -> dict:
    """Where LMCache's connector dials the node's server: our launch's (env.sh's values), or srt-slurm's
    (SRT_DIAL, a recipe's plain values)."""
    if srt_dial is not None:
        return {**srt_dial, "lmcache.mp.mq_timeout": s["LMCACHE_MP_MQ_TIMEOUT"]}
    assert ports is not None, "our launch's dial needs its ports"
    return {
        "lmcache.mp.host": word("tcp://", LOCAL_ADDR),
        "lmcache.mp.port": ports.lmcache,
        "lmcache.mp.mq_timeout": Ref("LMCACHE_MP_MQ_TIMEOUT"),
    }


def engine_env(t: Target, ports: Ports) -> dict:
    """What vLLM reads from its environment: Mooncake's bootstrap port and abort timeout, the model's."""
    env: dict[str, str | int] = {}
    if t.disagg:
        env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = ports.mooncake_bootstrap
        env["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] = MOONCAKE_ABORT_TIMEOUT_S
    if t.srt is None:  # a recipe's environment is on each engine line, role by role
        env.update(t.recipe.env)
    return env


def router_service(t: Target, backends: list, ports: Ports, timeouts: Timeouts, counts: dict) -> Service:
    """Our proxy or vllm-router in front of vLLM prefill/decode engines (docs/upstream-facts.md#routers)."""
    url = word("http://", NODE_ADDR, f":{ports.router}/health")
    if t.router.name == "vllm-router":
        args = [
            "vllm-router",
            "--vllm-pd-disaggregation",
            "--kv-connector",
            "mooncake",
            *backends,
            "--host",
            NODE_ADDR,
            "--port",
            ports.router,
            *(["--policy", "consistent_hash"] if t.srt is None else cli(t.srt.frontend_args)),
            "--prometheus-host",  # default 127.0.0.1: the end-of-run snapshot reads it on the node address
            NODE_ADDR,
            "--prometheus-port",
            ports.router_metrics,
            *(["--request-timeout-secs", 1800] if t.srt is None else []),
            "--health-check-endpoint",
            "/health",
            *t.launch.router_args.get("vllm-router", []),
        ]
        return Service("router", argv(*args), url, timeouts.router_ready)
    # The proxy runs from the job's snapshot of this repository, not from an installed package, on the
    # server stack it is tested with (the node setup's proxy set) where the runner has a node setup.
    args = [
        "env",
        word("PYTHONPATH=", Ref("RECIPE_DIR")),
        nodesetup.PROXY_PYTHON if t.launch.node_setup else "python3",
        "-m",
        "proxy",
        "--host",
        NODE_ADDR,
        "--port",
        ports.router,
        *backends,
        *t.launch.router_args.get("pd-proxy", []),
    ]
    expect = tuple(f"{role}.healthy={n}" for role, n in counts.items())
    return Service("router", argv(*args), url, timeouts.router_ready, ready_expect=expect)


def router_metrics_port(t: Target, ports: Ports) -> int:
    return ports.router_metrics if t.router.name == "vllm-router" else ports.router


def served_model(t: Target) -> str:
    """The model's id (--served-model-name)."""
    return t.entry.model


def has_metrics(t: Target) -> bool:
    return True


def proof_roles(t: Target) -> tuple:
    """The decode's KV received (external_kv_transfer prompt tokens)."""
    return ("decode",)


def flushes_caches(t: Target) -> bool:
    """The known-working launch runs its concurrencies back to back over the same caches."""
    return False
