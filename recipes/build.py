"""build_plan: a validated entry + runner -> the frozen Plan of one search-space variant."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from schemas import settings as reg
from schemas.config import MasterEntry, Worker
from schemas.images import engine_version
from schemas.rules import Point, l1_size_gb, parsed_settings, role_gpus
from schemas.runners import Hardware

from .models import model_recipe
from .plan import Benchmark, Container, Node, Pinned, Plan, Ports, Role, Service, Slurm, Timeouts
from .words import Ref, argv, json_word, word

NODE_ADDR, LOCAL_ADDR = Ref("NODE_ADDR"), Ref("LOCAL_ADDR")
SIM_TIMEOUTS = dict(barrier=60, lmcache_ready=120, engine_ready=120, router_ready=60)
REAL_TIMEOUTS = dict(barrier=600, lmcache_ready=300, engine_ready=3600, router_ready=300)
AMD_DEVICES = ("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video")
NODE_ENV = (
    "RUN_DIR",
    "RECIPE_DIR",
    "LEADER_ADDR",
    "NODE_NAMES",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
    "SLURM_JOB_ID",
)
# A lost KV transfer ends the simulated decode's wait in seconds, not in Mooncake's real 480 s.
SIM_KV_WAIT_S = 30
# A small simulated HBM prefix cache: on a short trace the host-DRAM L2 (LMCache) must serve reuse too.
SIM_HBM_CACHE_TOKENS = 16384
MAX_ERROR_RATE = "0.10"  # AIPerf's --failed-request-threshold, and the result gate's (scripts/results.py)
BENCH_SECONDS = {"none": 10, "real": 600}  # per concurrency: short on the simulator
MOONCAKE_ABORT_TIMEOUT_S = 480
SUPPORTED_FRAMEWORKS = ("vllm-disagg",)


class Unsupported(ValueError):
    """A valid config this renderer cannot launch (yet); the message says what and why."""


@dataclass(frozen=True)
class Target:
    """What one variant is built from."""

    key: str
    variant: str
    entry: MasterEntry
    point: Point
    scenario_params: dict  # isl/osl for fixed-seq-len; {} for agentic
    runner_label: str
    hardware: Hardware


def build_plan(t: Target, *, ports: Ports | None = None, timeouts: Timeouts | None = None) -> Plan:
    """timeouts: by default from the runner (simulated engines start at once, real ones load weights)."""
    _check_supported(t)
    ports = ports or Ports()
    sim = t.hardware.gpu_vendor == "none"
    time_limit = t.hardware.time_limit or "04:00:00"
    timeouts = timeouts or Timeouts(done=_seconds(time_limit), **(SIM_TIMEOUTS if sim else REAL_TIMEOUTS))
    nodes = _nodes(t)
    router = _router_service(t, nodes, ports, timeouts)
    container = Container(
        runtime=t.hardware.container_runtime,
        image=t.entry.image,
        gpu_vendor=t.hardware.gpu_vendor,
        mounts=(t.hardware.model_root,),
    )
    return Plan(
        config_key=t.key,
        variant=t.variant,
        scenario=t.point.scenario,
        model=t.entry.model,
        framework=t.entry.framework,
        router_name=_router(t).name,
        gpus_per_node=t.hardware.gpus_per_node,
        components=_components(t),
        config_sha256=hashlib.sha256(t.entry.model_dump_json(by_alias=True).encode()).hexdigest(),
        runner=t.runner_label,
        slurm=Slurm(
            job_name=f"{t.key}_{t.variant}",
            partition=t.hardware.partition,
            account=t.hardware.account,
            time_limit=time_limit,
            nodes=len(nodes),
        ),
        container=container,
        ports=ports,
        timeouts=timeouts,
        address_args=_address_args(t.hardware),
        node_local_addr=(NODE_ADDR if sim else "127.0.0.1") if _uses_lmcache(t) else None,
        env_exported=_engine_env(t, ports),
        env_shell=_lmcache_env(t, ports),
        nodes=nodes,
        roles=_roles(t, ports, timeouts),
        router=router,
        leader_commands=argv(_program(router.argv), "aiperf"),
        launch=_launch(container, len(nodes)),
        benchmarks=_benchmarks(t, ports, sim),
        metrics=_metrics_endpoints(t, nodes, ports),
        smoke=_smoke(t, nodes, ports),
        l2_proof=_l2_proof(t),
    )


def _address_args(hw: Hardware) -> tuple:
    """Simulated nodes share lo, each on its own 127.0.0.x that SLURM knows as its NodeAddr; real
    nodes advertise the address of their data-plane interface (never a loopback one)."""
    if hw.data_plane_interface == "lo":
        return argv("--slurm-nodeaddr", "--allow-loopback")
    return argv("--interface", hw.data_plane_interface)


def _program(args: tuple) -> str:
    """The program an argv runs, past an `env NAME=VALUE ...` prefix."""
    rest = list(args)
    if rest[0] == ("env",):
        rest = rest[1:]
        while "=" in "".join(p for p in rest[0] if isinstance(p, str)):
            rest = rest[1:]
    return "".join(rest[0])


def _components(t: Target) -> tuple:
    """What the numbers depend on besides the config: engine, KV transfer, L2 cache, router."""
    version = engine_version(t.entry.image)
    out = [
        ("vllm", ".".join(map(str, version)) if version else f"as in {t.entry.image}"),
        ("mooncake", f"as in {t.entry.image}"),
    ]
    if _uses_lmcache(t):
        out.append(("lmcache", t.point.space.kv_offload_backend.version))
    router = _router(t)
    out.append((router.name, router.version))
    return tuple(out)


def _check_supported(t: Target) -> None:
    if t.entry.framework not in SUPPORTED_FRAMEWORKS:
        raise Unsupported(
            f"framework {t.entry.framework!r} is not rendered yet (supported: "
            f"{', '.join(SUPPORTED_FRAMEWORKS)})"
        )
    if t.entry.kv_p2p_transfer != "mooncake":
        raise Unsupported(f"kv-p2p-transfer {t.entry.kv_p2p_transfer!r} is not rendered (mooncake only)")
    for role in reg.ROLES:
        w: Worker = getattr(t.point.space, role)
        if w.dp_attn or (w.ep or 1) > 1 or (w.pp or 1) > 1 or role_gpus(w) != t.hardware.gpus_per_node:
            raise Unsupported(
                f"{role}: only one tp={t.hardware.gpus_per_node} worker per node is rendered "
                "(no dp-attn, ep, pp or multi-worker nodes yet)"
            )
    for role in reg.ROLES:
        flags = reg.engine_flags(_settings(t, role))
        if flags:  # settings that stand for engine flags are SGLang's today: never drop them silently
            raise Unsupported(f"{role}: engine flags {', '.join(sorted(flags))} are not rendered for vLLM")
    if t.point.space.spec_decoding != "none":
        raise Unsupported("spec-decoding is not rendered yet")


def _router(t: Target):
    return t.point.space.router or t.entry.router


def _settings(t: Target, role: str) -> dict:
    return reg.resolve(role, parsed_settings(getattr(t.point.space, role)))


def _uses_lmcache(t: Target) -> bool:
    backend = t.point.space.kv_offload_backend
    return backend is not None and backend.name == "lmcache"


def _seconds(hms: str) -> int:
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s


def _nodes(t: Target) -> tuple:
    """Rank 0 = first prefill (+ router); then the other prefill nodes; then decode nodes."""
    out = []
    for role in reg.ROLES:
        for index in range(getattr(t.point.space, role).num_worker):
            out.append(Node(rank=len(out), role=role, index=index))
    return tuple(out)


def _roles(t: Target, ports: Ports, timeouts: Timeouts) -> tuple:
    out = []
    for role in reg.ROLES:
        services = [_lmcache_service(timeouts)] if role == "prefill" and _uses_lmcache(t) else []
        services.append(_vllm_service(t, role, ports, timeouts))
        pinned = (
            (Pinned("lmcache", "lmcache", t.point.space.kv_offload_backend.version),)
            if (role == "prefill" and _uses_lmcache(t))
            else ()
        )
        out.append(
            Role(role, tuple(services), commands=argv(*(_program(s.argv) for s in services)), pinned=pinned)
        )
    return tuple(out)


def _launch(c: Container, n: int) -> tuple:
    """srun, one task per node, the whole step killed when any task fails; wrapped per container runtime."""
    srun = ["srun", "--kill-on-bad-exit=1", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--label"]
    script = word(Ref("RECIPE_DIR"), "/server_vllm.sh")
    same = [word(Ref("RUN_DIR"), ":", Ref("RUN_DIR"))] + [f"{m}:{m}" for m in c.mounts]
    if c.runtime == "pyxis":
        mounts = word(*[p for i, w in enumerate(same) for p in (("," if i else ""), *w)])
        return argv(
            *srun,
            f"--container-image={c.image}",
            word("--container-mounts=", *mounts),
            "--no-container-mount-home",
            "bash",
            script,
        )
    if c.runtime == "docker":
        env = [x for name in NODE_ENV for x in ("-e", name)]
        volumes = [x for w in same for x in ("-v", w)]
        devices = AMD_DEVICES if c.gpu_vendor == "amd" else ("--gpus", "all")
        return argv(
            *srun,
            "docker",
            "run",
            "--rm",
            "--init",
            "--network",
            "host",
            "--ipc",
            "host",
            *devices,
            "--name",
            word("disagg-", Ref("SLURM_JOB_ID")),
            *env,
            *volumes,
            c.image,
            "bash",
            script,
        )
    return argv(*srun, "bash", script)


def _lmcache_service(timeouts: Timeouts) -> Service:
    s = {name: Ref(name) for name in _LMCACHE_FLAGS.values()}
    args = [
        "lmcache",
        "server",
        "--host",
        LOCAL_ADDR,
        "--port",
        s["LMCACHE_PORT"],
        "--http-host",
        LOCAL_ADDR,
        "--http-port",
        s["LMCACHE_HTTP_PORT"],
        "--l1-size-gb",
        s["LMCACHE_L1_SIZE_GB"],
        "--eviction-policy",
        s["LMCACHE_EVICTION_POLICY"],
        "--l1-init-size-gb",
        s["LMCACHE_L1_INIT_SIZE_GB"],
        "--chunk-size",
        s["LMCACHE_CHUNK_SIZE"],
    ]
    return Service(
        name="lmcache",
        argv=argv(*args),
        ready_url=word("http://", LOCAL_ADDR, ":", Ref("LMCACHE_HTTP_PORT"), "/healthcheck"),
        ready_timeout=timeouts.lmcache_ready,
    )


# lmcache server flag -> the env.sh variable that holds its value (optional ones only when set)
_LMCACHE_FLAGS = {
    "port": "LMCACHE_PORT",
    "http-port": "LMCACHE_HTTP_PORT",
    "l1-size-gb": "LMCACHE_L1_SIZE_GB",
    "eviction-policy": "LMCACHE_EVICTION_POLICY",
    "l1-init-size-gb": "LMCACHE_L1_INIT_SIZE_GB",
    "chunk-size": "LMCACHE_CHUNK_SIZE",
}
_LMCACHE_OPTIONAL = {
    "l1-read-ttl-seconds": "LMCACHE_L1_READ_TTL_SECONDS",
    "max-workers": "LMCACHE_MAX_WORKERS",
}


def _lmcache_env(t: Target, ports: Ports) -> tuple:
    if not _uses_lmcache(t):
        return ()
    s = _settings(t, "prefill")
    values = {
        "LMCACHE_PORT": ports.lmcache,
        "LMCACHE_HTTP_PORT": ports.lmcache_http,
        "LMCACHE_L1_SIZE_GB": l1_size_gb(t.hardware, t.point.dram_utilization),
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


def _vllm_service(t: Target, role: str, ports: Ports, timeouts: Timeouts) -> Service:
    w: Worker = getattr(t.point.space, role)
    s = _settings(t, role)
    recipe = model_recipe(t.entry.model)
    args = [
        "env",
        word("VLLM_HOST_IP=", NODE_ADDR),
        "vllm",
        "serve",
        f"{t.hardware.model_root}/{t.entry.model}",
        "--served-model-name",
        t.entry.model,
        "--host",
        NODE_ADDR,
        "--port",
        ports.vllm,
        "--tensor-parallel-size",
        w.tp,
        *recipe.vllm_args,
        "--gpu-memory-utilization",
        s["GPU_MEMORY_UTILIZATION"],
        "--enable-prefix-caching" if s["ENABLE_PREFIX_CACHING"] else "--no-enable-prefix-caching",
    ]
    for flag, name in (
        ("--max-model-len", "MAX_MODEL_LEN"),
        ("--max-num-batched-tokens", "MAX_NUM_BATCHED_TOKENS"),
        ("--max-num-seqs", "MAX_NUM_SEQS"),
    ):
        if s[name] is not None:
            args += [flag, s[name]]
    args += ["--kv-transfer-config", json_word(_kv_transfer_config(t, role, s))]
    return Service(
        name="vllm",
        argv=argv(*args),
        ready_url=word("http://", NODE_ADDR, f":{ports.vllm}/health"),
        ready_timeout=timeouts.engine_ready,
    )


def _kv_transfer_config(t: Target, role: str, s: dict) -> dict:
    """FACTS §1/§2: decode is a plain Mooncake consumer; prefill a Mooncake producer, joined by the
    LMCache MP connector under MultiConnector when LMCache is the offload backend."""
    mooncake_extra = {"mooncake_protocol": s["MC_PROTOCOL"], "num_workers": s["MC_NUM_WORKERS"]}
    if role == "decode":
        # "fail", not recompute: a lost transfer must surface, never turn into silent recompute.
        return {
            "kv_connector": "MooncakeConnector",
            "kv_role": "kv_consumer",
            "kv_load_failure_policy": "fail",
            "kv_connector_extra_config": mooncake_extra,
        }
    mooncake = {
        "kv_connector": "MooncakeConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": mooncake_extra,
    }
    if not _uses_lmcache(t):
        return mooncake
    lmcache = {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
        "kv_connector_extra_config": {
            "lmcache.mp.host": word("tcp://", LOCAL_ADDR),
            "lmcache.mp.port": Ref("LMCACHE_PORT"),
            "lmcache.mp.mq_timeout": Ref("LMCACHE_MP_MQ_TIMEOUT"),
        },
    }
    # recompute: only the top-level policy is read, and the L2 store is best-effort.
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_producer",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"connectors": [mooncake, lmcache]},
    }


def _engine_env(t: Target, ports: Ports) -> tuple:
    env = {
        "VLLM_MOONCAKE_BOOTSTRAP_PORT": ports.mooncake_bootstrap,
        "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT": MOONCAKE_ABORT_TIMEOUT_S,
    }
    env.update(dict(model_recipe(t.entry.model).env.get(t.hardware.gpu_vendor, ())))
    if t.hardware.gpu_vendor == "none":  # the simulated platform's own knobs (sim/README.md)
        env["SIM_KV_WAIT_S"] = SIM_KV_WAIT_S
        env["SIM_HBM_CACHE_TOKENS"] = SIM_HBM_CACHE_TOKENS
        if _uses_lmcache(t):
            env["SIM_L2_CHUNK_TOKENS"] = _settings(t, "prefill")["LMCACHE_CHUNK_SIZE"]
    return tuple(sorted((k, str(v)) for k, v in env.items()))


def _peer_url(rank: int, port: int):
    return word("http://", Ref(f"PEER_ADDR[{rank}]"), f":{port}")


def _router_service(t: Target, nodes: tuple, ports: Ports, timeouts: Timeouts) -> Service:
    router = _router(t)
    prefill = [n.rank for n in nodes if n.role == "prefill"]
    decode = [n.rank for n in nodes if n.role == "decode"]
    backends = []
    for r in prefill:
        backends += ["--prefill", _peer_url(r, ports.vllm), ports.mooncake_bootstrap]
    for r in decode:
        backends += ["--decode", _peer_url(r, ports.vllm)]
    url = word("http://", NODE_ADDR, f":{ports.router}/health")
    if router.name == "vllm-router":
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
            "--policy",
            "consistent_hash",
            "--prometheus-host",  # default 127.0.0.1: the end-of-run snapshot reads it on the node address
            NODE_ADDR,
            "--prometheus-port",
            ports.router_metrics,
            "--request-timeout-secs",
            1800,
            "--health-check-endpoint",
            "/health",
        ]
        return Service("router", argv(*args), url, timeouts.router_ready)
    # The proxy runs from the job's snapshot of this repository, not from an installed package.
    args = [
        "env",
        word("PYTHONPATH=", Ref("RECIPE_DIR")),
        "python3",
        "-m",
        "proxy",
        "--host",
        NODE_ADDR,
        "--port",
        ports.router,
        *backends,
    ]
    expect = (f"prefill.healthy={len(prefill)}", f"decode.healthy={len(decode)}")
    return Service("router", argv(*args), url, timeouts.router_ready, ready_expect=expect)


def _metrics_endpoints(t: Target, nodes: tuple, ports: Ports) -> tuple:
    """NAME=URL per engine (prefill0, decode0, ...) and the router, for the end-of-run snapshot."""
    engines = [word(f"{n.role}{n.index}=", *_peer_url(n.rank, ports.vllm), "/metrics") for n in nodes]
    router_port = ports.router_metrics if _router(t).name == "vllm-router" else ports.router
    return argv(*engines, word("router=http://", NODE_ADDR, f":{router_port}/metrics"))


def _smoke(t: Target, nodes: tuple, ports: Ports) -> tuple:
    decodes = [
        x
        for n in nodes
        if n.role == "decode"
        for x in ("--decode-metrics", word(*_peer_url(n.rank, ports.vllm), "/metrics"))
    ]
    router = word("http://", NODE_ADDR, f":{ports.router}")
    return argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/proof.py"),
        "smoke",
        "--router",
        router,
        "--model",
        t.entry.model,
        *decodes,
    )


def _l2_proof(t: Target) -> tuple | None:
    """Agentic traces reuse long prefixes: with LMCache on, zero L2 hits means it silently died."""
    if t.point.scenario != "agentic-coding" or not _uses_lmcache(t):
        return None
    last = concurrencies(t)[-1]  # counters are cumulative: the last snapshot covers the whole sweep
    return argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/proof.py"),
        "l2",
        "--metrics-dir",
        word(Ref("RESULTS_DIR"), f"/metrics/conc{last}"),
    )


def concurrencies(t: Target) -> tuple:
    sp = t.point.space
    if sp.conc_list is not None:
        return tuple(sp.conc_list)
    out, c = [], sp.conc_start
    while c <= sp.conc_end:  # InferenceX ranges double from start to end
        out.append(c)
        c *= 2
    return tuple(out)


def _benchmarks(t: Target, ports: Ports, sim: bool) -> tuple:
    out = []
    # Offline, AIPerf's "builtin" tokenizer still downloads; the simulator's word tokenizer ships with
    # the trace set (sim/traces/), and real runs use the model's own.
    tokenizer = (
        word(Ref("RECIPE_DIR"), "/traces/tokenizer") if sim else f"{t.hardware.model_root}/{t.entry.model}"
    )
    for c in concurrencies(t):
        args = [
            "aiperf",
            "profile",
            "--url",
            word("http://", NODE_ADDR, f":{ports.router}"),
            "--endpoint",
            "/v1/chat/completions",
            "--endpoint-type",
            "chat",
            "--streaming",
            "--model",
            t.entry.model,
            "--tokenizer",
            tokenizer,
            "--concurrency",
            c,
            "--benchmark-duration",
            BENCH_SECONDS["none" if sim else "real"],
            "--random-seed",
            42,
            "--failed-request-threshold",
            MAX_ERROR_RATE,
            "--use-server-token-count",
            # output lengths are sent as max_completion_tokens, a cap: without this, answers end early
            "--extra-inputs",
            "ignore_eos:true",
            "--output-artifact-dir",
            word(Ref("RESULTS_DIR"), f"/conc{c}"),
        ]
        args += _workload_args(t, sim)
        result = f"{t.key}_{t.variant}_conc{c}.json"
        seconds = BENCH_SECONDS["none" if sim else "real"]
        out.append(
            Benchmark(
                concurrency=c,
                result=result,
                argv=argv(*args),
                max_error_rate=MAX_ERROR_RATE,
                min_duration=seconds // 2,
            )
        )
    return tuple(out)


def _workload_args(t: Target, sim: bool) -> list:
    if t.point.scenario == "agentic-coding":
        session = ["--session-header", "X-Session-ID"]  # lets the router keep a session on one prefill
        if sim:  # nothing can be downloaded here: a small trace set shipped with the recipe
            return [
                *session,
                "--input-file",
                word(Ref("RECIPE_DIR"), "/traces/agentic-sim.jsonl"),
                "--custom-dataset-type",
                "multi_turn",
            ]
        trace_set = _settings(t, "prefill")["WEKA_LOADER_OVERRIDE"]
        if trace_set is None:
            raise Unsupported("agentic-coding on a real cluster needs WEKA_LOADER_OVERRIDE=<trace set>")
        return [*session, "--public-dataset", trace_set]
    isl, osl = t.scenario_params["isl"], t.scenario_params["osl"]
    return [
        "--synthetic-input-tokens-mean",
        isl,
        "--synthetic-input-tokens-stddev",
        0,
        "--output-tokens-mean",
        osl,
        "--output-tokens-stddev",
        0,
        # with the simulator's word tokenizer the default corpus decodes to one repeated unknown word
        *(["--prompt-corpus", "random"] if sim else []),
    ]
