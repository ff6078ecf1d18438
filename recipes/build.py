"""build_plan: a validated entry + runner -> the frozen Plan of one search-space variant.

Engine-specific services live in recipes/vllm.py and recipes/sglang.py; everything the node runtime
does the same for every engine (nodes, launch, barriers, benchmarks, proofs, watchers) is decided here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import textwrap

from schemas import known_issues as ki
from schemas import settings as reg
from schemas.entries import role_gpus
from schemas.images import engine_version, spelled_for
from schemas.pins import pinned_version, requirements
from schemas.routers import PD_PROXY

from . import accuracy, atom, budget, nodesetup, sglang, srt, vllm
from .benchmark import (
    check_soak_fits,
    client_scenario,
    concurrencies,
    entry_url,
    input_checks,
    parse_duration,
    seconds_of,
    soak,
    staged_inputs,
    sweep,
)
from .engine import Engine
from .plan import (
    Container,
    FailureReport,
    Node,
    NodeSetup,
    Pinned,
    Plan,
    Ports,
    Role,
    Service,
    SetupSet,
    Slurm,
    Teardown,
    Timeouts,
)
from .target import NODE_ADDR, Target, Unsupported, peer_url, program
from .words import Ref, Word, argv, word

__all__ = ["Target", "Unsupported", "build_plan", "concurrencies", "parse_duration"]

ENGINES: dict[str, Engine] = {"vllm": vllm, "sglang": sglang, "atom": atom}
# `docker run` flags that give a container the node's GPUs, by the runner's gpu-vendor.
GPU_FLAGS = {
    "amd": ("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"),
    "nvidia": ("--gpus", "all"),
    "none": (),
}
NODE_ENV = (
    "RUN_DIR",
    "RECIPE_DIR",
    "LEADER_ADDR",
    "NODE_NAMES",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",  # a failing node scancels its step's other nodes at once (where the image has scancel)
    "SLURM_CONF",  # where the submitting shell set one (the local cluster): scontrol inside finds it
)


def build_plan(t: Target, *, timeouts: Timeouts | None = None, soak_seconds: int | None = None) -> Plan:
    """timeouts: by default the runner's launch profile's (timeouts_of). soak_seconds: instead of the sweep,
    phases of varied concurrency and prompt length for that long."""
    _check_supported(t)
    engine = ENGINES[t.engine]
    profile = t.launch
    ports = ports_of(profile)
    timeouts = timeouts or timeouts_of(profile)
    if soak_seconds is not None:
        check_soak_fits(soak_seconds, profile.time_limit)
    nodes = _nodes(t)
    signatures = _log_signatures(t)
    router = _router_service(t, nodes, ports, timeouts) if t.disagg else None
    container = Container(
        runtime=profile.container_runtime,
        image=profile.container_image or t.entry.image,
        gpu_vendor=profile.gpu_vendor,
        mounts=(profile.model_root,),
        env_mounts=tuple(profile.container_mounts_from_env),
        read_only=_site_inputs(t),
        options=_container_options(t),
        host_args=_container_host_args(t),
        staging=_image_staging(profile),
        image_archive=profile.image_staging.archive if profile.image_staging else None,
        root_reason=profile.container_options.root_reason if profile.container_runtime == "docker" else None,
    )
    variant = t.variant if soak_seconds is None else f"{t.variant}_soak"
    served = engine.served_model(t)
    benchmarks = sweep(t, ports, served) if soak_seconds is None else soak(t, ports, soak_seconds, served)
    flushes = engine.flushes_caches(t)
    if flushes:  # each concurrency measured cold, as the known-working launch measures it
        flush = _cache_flush(nodes, ports, timeouts)
        benchmarks = tuple(dataclasses.replace(b, before=flush) for b in benchmarks)
    phases = len(benchmarks) if soak_seconds is not None else 0
    graded = accuracy.step(t, engine, ports, soak=soak_seconds is not None)
    items = budget.worst_case(t, timeouts, points=len(benchmarks), flushes=flushes, soak_phases=phases)
    budget.check(t, items, soak=soak_seconds is not None)
    return Plan(
        config_key=t.key,
        variant=variant,
        scenario=t.point.scenario,
        model=t.entry.model,
        image=t.entry.image,
        framework=t.entry.framework,
        engine=t.engine,
        engine_build=profile.engine_build,
        mode="sweep" if soak_seconds is None else "soak",
        router_name=t.router.name if t.disagg else None,
        gpus_per_node=t.hardware.gpus_per_node,
        components=_components(t),
        config_sha256=hashlib.sha256(t.entry.model_dump_json(by_alias=True).encode()).hexdigest(),
        runner=t.runner_label,
        slurm=Slurm(
            job_name=f"{t.key}_{variant}",
            partition=profile.partition,
            account=profile.account,
            time_limit=profile.time_limit,
            nodes=len(nodes),
            extras=tuple(
                (k, v) for k, v in profile.sbatch.model_dump(by_alias=True).items() if v is not None
            ),
        ),
        container=container,
        ports=ports,
        timeouts=timeouts,
        teardown=Teardown(**profile.teardown.model_dump(by_alias=False)),
        failure_report=FailureReport(**profile.failure_report.model_dump(by_alias=False)),
        address_args=_address_args(t),
        node_local_addr=_private_addr(t) if t.uses_lmcache else None,
        env_exported=tuple(sorted((k, str(v)) for k, v in _engine_env(t, engine, ports, timeouts).items())),
        env_shell=engine.shell_env(t),
        shell_notes=engine.shell_notes(t) + _served_elsewhere(t),
        python_path_first=t.python_path_first,
        library_path_first=t.library_path_first,
        dram_budget=engine.l1_budget(t),
        nodes=nodes,
        roles=_roles(t, engine, ports, timeouts, signatures),
        router=router,
        leader_listens=_listens(router) if router else argv(),
        leader_commands=_commands(
            *([router.argv] if router else []), ("aiperf",), *([("lm-eval",)] if graded else [])
        ),
        leader_pinned=(Pinned("aiperf", "aiperf", pinned_version("bench", "aiperf")),),
        node_setup=_node_setup(t, profile.node_setup, graded is not None),
        gpu_drain=_gpu_drain(profile),
        host_check=_host_check(profile, len(nodes), container),
        nic_check=profile.nic_check is not None,
        staged=tuple(s for s in staged_inputs(t) if graded or s.kind != "eval-set"),
        client_scenario=client_scenario(t),
        input_checks=input_checks(t),
        rdma_probe=_rdma_probe(t),
        launch=_launch(container, len(nodes), t.engine),
        cleanup=_cleanup(container, len(nodes)),
        benchmarks=benchmarks,
        metrics=_metrics_endpoints(t, engine, nodes, ports),
        smoke=_smoke(t, engine, nodes, ports),
        same_answers=_same_answers(t, engine, nodes, ports),
        l2_proof=_l2_proof(t, benchmarks),
        cold_proof=_cold_proof(t),
        accuracy=graded,
        shipped=_shipped(t),
        workarounds=ki.recorded_workarounds(t.entry, t.issues),
        caveats=engine.caveats(t),
        not_comparable_with_inferencex=_inferencex_client(t),
        log_signatures=signatures,
    )


# InferenceX's fixed-seq-len client (utils/bench_serving/benchmark_serving.py at 843c6254), which AIPerf
# cannot reproduce: its prompts are random token ids, not text.
INFERENCEX_FIXED_SEQ_CLIENT = (
    "not comparable with InferenceX: its fixed-seq-len client sends random token ids with input and output "
    "lengths drawn uniformly from [0.8, 1] of the target, 10 x concurrency prompts after a warm-up; this "
    "run sends AIPerf's synthetic text at the exact lengths over a timed steady state (the request shape "
    "and, with MTP, the acceptance, which depends on the text, differ)"
)


def _inferencex_client(t: Target) -> str | None:
    return INFERENCEX_FIXED_SEQ_CLIENT if t.point.scenario == "fixed-seq-len" else None


def ports_of(profile) -> Ports:
    """The job's ports, as the runner's launch profile (schemas/launch.py) decides them."""
    return Ports(
        **profile.ports.model_dump(by_alias=False), mooncake_bootstrap=profile.mooncake_bootstrap.port
    )


def timeouts_of(profile) -> Timeouts:
    """The job's timeouts, as the runner's launch profile decides them; non-leaders wait for the benchmark
    as long as the job may run."""
    return Timeouts(done=seconds_of(profile.time_limit), **profile.timeouts.model_dump(by_alias=False))


def _check_supported(t: Target) -> None:
    engine = ENGINES[t.engine]  # Target.engine raises Unsupported for engines not rendered
    at = t.point.path
    # Valid InferenceX shapes this renderer cannot launch: said as such, never a schema error.
    if t.disagg and t.worker("decode").num_worker == 0:
        raise Unsupported(
            "decode num-worker 0 (InferenceX's aggregated multinode run: the prefill workers serve both) "
            "is not supported by this renderer, which launches disaggregated prefill and decode nodes only",
            at=(*at, "decode", "num-worker"),
        )
    if t.disagg != t.entry.disagg:
        raise Unsupported(
            "multinode entries are rendered disaggregated only (prefill and decode nodes)",
            at=(t.key, "disagg"),
        )
    t.recipe  # noqa: B018 -- the model has a recipe for this engine and GPU vendor (Unsupported if not)
    if t.srt is not None:
        srt.check(t)
    engine.check(t)
    for role in t.roles:
        _check_parallelism(t, role)
    _check_spec_decoding(t)
    for role in t.roles:
        for name, value in t.given(role).items():
            unread = reg.REGISTRY[name].unread
            if unread and value not in reg.REGISTRY[name].inert:
                raise Unsupported(
                    f"{role}: {name}={value} would reach no process: {unread}",
                    at=(*t.role_path(role), "additional-settings"),
                )


def _served_elsewhere(t: Target) -> tuple:
    """env.sh's word on each setting of InferenceX's whose job something else of this launch does."""
    out = []
    for role in t.roles:
        for name, value in t.given(role).items():
            served_by = reg.REGISTRY[name].served_by
            if served_by:
                out += textwrap.wrap(f"{name}={value} ({role}): not used; {served_by}.", 104)
    return tuple(out)


def _check_spec_decoding(t: Target) -> None:
    """MTP is asked for twice in InferenceX's format (spec-decoding, DECODE_MTP_SIZE): both must agree, or
    one would be silently dropped (its launch runs no MTP when the size is 0, whatever spec-decoding says)."""
    spec = t.point.space.spec_decoding
    if spec == "none" and t.mtp_steps:
        raise Unsupported(
            f"decode: DECODE_MTP_SIZE={t.mtp_steps} with spec-decoding none: say spec-decoding mtp, or set 0",
            at=(*t.role_path("decode"), "additional-settings"),
        )
    if spec == "draft_model":
        raise Unsupported(
            "spec-decoding draft_model is not rendered yet", at=(*t.point.path, "spec-decoding")
        )


def _check_parallelism(t: Target, role: str) -> None:
    """The parallelism a worker states is rendered as stated, or refused: never smuggled in by flags."""
    w, at = t.worker(role), t.role_path(role)
    if (w.pp or 1) > 1:
        raise Unsupported(f"{role}: pp is not rendered yet", at=(*at, "pp"))
    ep = w.ep or 1
    if ep > 1 and t.model.architecture.experts is None:
        raise Unsupported(f"{role}: ep {ep} on model {t.entry.model}, which has no experts", at=(*at, "ep"))
    if ep not in (1, w.tp):
        raise Unsupported(
            f"{role}: ep {ep} with tp {w.tp}: experts are rendered split over the worker's GPUs (ep = tp) or "
            "not split (ep 1)",
            at=(*at, "ep"),
        )
    for key, value in (("dcp-size", w.dcp_size), ("pcp-size", w.pcp_size)):
        if (value or 1) > 1:
            raise Unsupported(
                f"{role}: {key} (context parallelism) is not supported by this renderer yet", at=(*at, key)
            )
    if t.disagg and role_gpus(w) > t.hardware.gpus_per_node:
        raise Unsupported(
            f"{role}: a worker of {role_gpus(w)} GPUs spans nodes, not rendered yet (one worker per node, "
            f"at most {t.hardware.gpus_per_node} GPUs; a smaller one leaves the rest of its node idle)",
            at=(*at, "tp"),
        )


def _address_args(t: Target) -> tuple:
    """How a node finds the address it advertises: its data-plane interface's (never a loopback one on a
    real cluster), or the NodeAddr SLURM knows it by (local nodes: each its own 127.0.0.x)."""
    p = t.launch
    args = (
        ["--slurm-nodeaddr"]
        if p.node_address == "slurm-nodeaddr"
        else ["--interface", p.data_plane_interface]
    )
    return argv(*args, *(["--allow-loopback"] if p.loopback else []))


def _private_addr(t: Target) -> tuple:
    """Where node-private services (LMCache) listen: loopback, or the node's own address when several
    nodes share one host's loopback."""
    return word(NODE_ADDR) if t.launch.private_bind == "node-address" else word("127.0.0.1")


# Every process of a node: nothing is fetched from the Hub on a compute node (the model, its tokenizer and
# the trace set are staged), and a library that would try fails at once instead of after its retries.
HUB_OFFLINE = {"HF_HUB_OFFLINE": 1, "HF_DATASETS_OFFLINE": 1, "TRANSFORMERS_OFFLINE": 1}


# Every engine on every runner: no usage report leaves a node. vLLM 0.33 reads both (stats.vllm.ai); LMCache
# (its server and the connector in the engine: stats.lmcache.ai) stops on DO_NOT_TRACK=1; SGLang sends none.
NO_TELEMETRY = {"DO_NOT_TRACK": 1, "VLLM_NO_USAGE_STATS": 1}


def _engine_env(t: Target, engine, ports: Ports, timeouts: Timeouts) -> dict:
    """What the engines read: the engine's own (Mooncake, model) and the runner's platform knobs; the Hub's
    offline switches, which every process of the node reads; telemetry off; how long vLLM itself waits for
    its engine core, from the job's own wait (vLLM's default is 600 s; where the engine core starts apart from
    the API server, as with several API servers or data parallel, that wait covers loading the weights, and a
    large model outlasts it while the job would wait engine-ready); Mooncake's RDMA marked with the runner's
    traffic class."""
    env = {**HUB_OFFLINE, **NO_TELEMETRY, **engine.engine_env(t, ports)}
    if t.engine == "vllm":
        env["VLLM_ENGINE_READY_TIMEOUT_S"] = timeouts.engine_ready
    if t.disagg and t.launch.mooncake_registration == "ibv-reg-mr":
        env["MOONCAKE_DISABLE_HIP_DMABUF"] = 1  # the site's dma-buf path crashes (Mooncake #2752)
    tc = t.launch.rdma_traffic_class
    if tc is not None and _mooncake_rdma(t):
        # Mooncake's transfer engine sets its queue pairs' IP traffic class (DSCP << 2) and service level
        # from these; unset, KV travels at priority 0, which PFC does not protect.
        env.update(MC_IB_TC=tc.traffic_class, MC_IB_SL=tc.priority)
    env.update(t.launch.engine_env.get(t.engine, {}))
    for name, setting in t.launch.engine_env_from_settings.get(t.engine, {}).items():
        value = next(
            (t.settings(r)[setting] for r in t.roles if t.settings(r).get(setting) is not None), None
        )
        if value is not None:
            env[name] = value
    return env


def _lmcache_pinned(t: Target) -> tuple:
    """The prefill nodes' LMCache, pinned on both of its sides: the `lmcache server` command, and (real vLLM
    engines) the engine's own Python, which must import the connector module vLLM will load (LMCache's
    compiled part with it). An image comes with it only where configs/engine-builds.yaml says so, with its
    source; otherwise a site wheel built for the image, or render refuses."""
    want = t.lmcache_version
    source = _lmcache_source(t, want)
    server = Pinned("lmcache", "lmcache", want, (), source)
    if t.launch.engine_build == "simulator" or t.engine != "vllm":
        return (server,)
    return (server, Pinned("vllm", "lmcache", want, (vllm.LMCACHE_CONNECTOR_MODULE,), source))


def _lmcache_source(t: Target, want: str) -> str:
    """Where the prefill nodes' LMCache comes from, said for the dry run and the recipe page."""
    image = t.entry.image
    if t.launch.engine_build != "image":
        return f"the runner's {t.launch.engine_build} environment"
    wheel = t.launch.node_setup.site_wheels.get("lmcache") if t.launch.node_setup else None
    if wheel is not None:
        return f"site wheel {wheel.source} sha256:{wheel.sha256}"
    carried = t.build.component("lmcache", image) if t.build else None
    at = (*t.point.path, "kv-offload-backend")
    fix = (
        f"or give runner {t.runner_label} an LMCache wheel built for this image (configs/launch.yaml "
        "node-setup.site-wheels.lmcache: source, sha256)"
    )
    if carried is None:
        raise Unsupported(
            f"lmcache {want}: image {image} carries no LMCache that configs/engine-builds.yaml knows of; "
            f"record it there with its source if it does, {fix}",
            at=at,
        )
    if carried.version is not None and carried.version != want:
        raise Unsupported(
            f"lmcache {want}: image {image} carries lmcache {carried.version} ({carried.how}); pin "
            f"kv-offload-backend.version {carried.version}, {fix}",
            at=at,
        )
    return f"in the image: {carried.how} ({carried.source[0]})"


def _node_setup(t: Target, setup, graded: bool) -> NodeSetup | None:
    """The runner's node-setup (configs/launch.yaml): each tool set with its lock for the image's Python and
    platform, installed on rank 0; a site wheel of a library this job's engines import, on its nodes."""
    if setup is None:
        return None
    sets = []
    for name, commands in nodesetup.SETS.items():
        if (name == "proxy" and not _runs_our_proxy(t)) or (name == "eval" and not graded):
            continue
        lock = nodesetup.lock_path(name, setup.python, setup.platform)
        if not lock.is_file():
            raise Unsupported(
                f"node-setup: no lock {lock.relative_to(nodesetup.ROOT)} for Python {setup.python} on "
                f"{setup.platform}: run `make lock-setup`",
                at=(t.key, "runner"),
            )
        sets.append(SetupSet(name, "leader", False, tuple(commands), _lock_digest(lock), lock=lock.name))
    wheel = setup.site_wheels.get("lmcache")
    if wheel is not None and t.uses_lmcache:
        want = t.lmcache_version
        name, version = nodesetup.wheel_name_version(wheel.source)
        if (name, version) != ("lmcache", want):
            raise Unsupported(
                f"node-setup.site-wheels.lmcache is {name} {version} ({wheel.source}); the config pins "
                f"lmcache {want}",
                at=(t.key, "runner"),
            )
        text = nodesetup.requirement(name, version, wheel.sha256)
        sets.append(
            SetupSet(
                "lmcache",
                "prefill",
                True,
                ("lmcache",),
                hashlib.sha256(text.encode()).hexdigest(),
                source=wheel.source,
                version=version,
                sha256=wheel.sha256,
            )
        )
    return NodeSetup(setup.python, setup.platform, setup.root, tuple(sets))


def _lock_digest(lock) -> str:
    """The lock file's SHA-256, read once per version of the file: lint builds a Plan for every variant of
    every entry, and a lock (~350 kB) read and hashed each time was a tenth of linting 1,000 entries."""
    stat = lock.stat()
    return _digest(lock, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _digest(path, mtime_ns: int, size: int) -> str:  # mtime and size: a rewritten lock is read again
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _runs_our_proxy(t: Target) -> bool:
    return t.disagg and t.router.name == PD_PROXY


def _shipped(t: Target) -> tuple:
    """Repository folders the job reads, copied into its run folder: the node tools, our proxy when it is
    the router, and what the runner's launch profile ships (a trace set)."""
    proxy = (("proxy", "proxy"),) if _runs_our_proxy(t) else ()
    return (("scripts", "scripts"), *proxy, *sorted(t.launch.ship.items()))


def _components(t: Target) -> tuple:
    """What the numbers depend on besides the config: engine, KV transfer, L2 cache, router. A runner whose
    engines come from a tool venv (engine-build cpu) names that venv's pins, not the image's."""
    version = engine_version(t.entry.image)
    out: list[tuple[str, str]] = [
        (t.engine, ".".join(map(str, version)) if version else f"as in {t.entry.image}")
    ]
    venv = t.launch.engine_venv
    if venv is not None:
        pin = requirements(venv)[0]  # lint: the image's release
        out = [(t.engine, f"{pin.partition('==')[2]} ({pin} in .venv-{venv})")]
    if t.disagg:
        mooncake = requirements(venv, only="mooncake-transfer-engine-non-cuda") if venv else ()
        out.append(("mooncake", mooncake[0] if mooncake else f"as in {t.entry.image}"))
        out += ENGINES[t.engine].transport(t)
    if t.uses_lmcache:
        out.append(("lmcache", t.lmcache_version))
    if t.disagg:
        out.append((t.router.name, t.router.version))
    return tuple(out)


def _nodes(t: Target) -> tuple:
    """Rank 0 = first prefill (+ router); then the other prefill nodes; then decode nodes."""
    out: list[Node] = []
    for role in t.roles:
        for index in range(t.worker(role).num_worker):
            out.append(Node(rank=len(out), role=role, index=index))
    return tuple(out)


def _roles(t: Target, engine, ports: Ports, timeouts: Timeouts, signatures: tuple) -> tuple:
    out = []
    for role in t.roles:
        services = engine.services(t, role, ports, timeouts)
        if signatures:  # started before the engine, so that start-up is watched too
            services.insert(-1, _log_watch(services, timeouts.poll_interval))
        pinned = _lmcache_pinned(t) if (role == "prefill" and t.uses_lmcache) else ()
        commands = _commands(*(s.argv for s in services))
        out.append(Role(role, tuple(services), commands=commands, pinned=pinned, listens=_listens(*services)))
    return tuple(out)


# How a service's command line says where it listens: (address flag, port flag); no address flag given
# means every address. Read off the rendered argv, so what is checked free is what will be bound.
LISTEN_FLAGS = (
    ("--host", "--port"),
    ("--host", "--server-port"),  # ATOM's (its --port is an internal one)
    ("--http-host", "--http-port"),
    ("--prometheus-host", "--prometheus-port"),
)


def _listens(*services: Service) -> tuple:
    """SERVICE=ADDR:PORT words of every address and port these services will listen on."""
    out = []
    for svc in services:
        values = {w[0]: svc.argv[i + 1] for i, w in enumerate(svc.argv[:-1]) if w and isinstance(w[0], str)}
        for host_flag, port_flag in LISTEN_FLAGS:
            if port_flag in values:
                out.append(
                    word(f"{svc.name}=", *values.get(host_flag, ("0.0.0.0",)), ":", *values[port_flag])
                )
    return argv(*out)


def _commands(*argvs) -> tuple:
    """Programs these argvs run, once each; python3 is every node's anyway (the node tools need it)."""
    return argv(*dict.fromkeys(p for p in map(program, argvs) if p != "python3"))


def _log_signatures(t: Target) -> tuple:
    """Known issues of this engine whose log signature fails the job when it appears (any image: a fix
    that regressed, or a registry that is wrong, must not cost hours either), then the engine's own
    watch signatures (a service that logs its error and waits; Mooncake's silent fall back to TCP)."""
    known = tuple(
        {"issue": issue.id, "title": issue.title, "regex": issue.log_signature, "fix": ki.fix_hint(issue)}
        for issue in t.issues
        if issue.engine == t.engine
    )
    return known + ENGINES[t.engine].watch_signatures(t)


def _log_watch(services: list, interval: int) -> Service:
    """Follows the log of every service of the node (the engine's last): a signature may be in any."""
    logs = [
        arg
        for s in (services[-1], *services[:-1])
        for arg in ("--log", word(Ref("LOG_DIR"), f"/{s.name}.log"))
    ]
    args = argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/logwatch.py"),
        "--plan",
        word(Ref("RECIPE_DIR"), "/plan.json"),
        *logs,
        "--interval",
        interval,
    )
    return Service(name="known-issues", argv=args, ready_url=None, ready_timeout=0)


def _srun(n: int, *options: str) -> list:
    """srun, one task on each of the N nodes, output labelled by rank."""
    return ["srun", *options, f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--label"]


def _image_staging(p) -> tuple:
    """The runner's image-staging as the host check's words: how a node that lacks the image gets it."""
    s = p.image_staging
    if p.container_runtime != "docker" or s is None:
        return ()
    how = "archive" if s.archive else "preloaded"
    return ("--image-staging", how, "--image-load-timeout", str(s.load_timeout))


def _host_check(p, n: int, container: Container) -> tuple:
    """srun on every node's host before any container starts (scripts/hostcheck.sh): containers earlier
    jobs left removed (docker), no process of an earlier job left, the image lock.json names held by the
    node's runtime (docker: loaded from the runner's archive when absent), and with the runner's nic-check
    its data-plane NICs up (nicctl: QoS, the RDMA traffic class and DCQCN)."""
    args = ["--sweep-containers"] if p.container_runtime == "docker" else []
    staging = container.staging
    args += ["--image", spelled_for(container.image, "docker"), *staging] if staging else []
    c = p.nic_check
    if c is not None:
        args += ["--interface", p.data_plane_interface] if p.data_plane_interface else []
        args += [x for d in p.nic_devices for x in ("--rdma-device", d)]
        args += ["--rdma", c.rdma_sysfs] if c.rdma_sysfs and p.nic_devices else []
        args += [x for prio in c.no_drop_priorities for x in ("--priority", str(prio))]
        args += ["--cnp-dscp", str(c.cnp_dscp)] if c.cnp_dscp is not None else []
        tc = p.rdma_traffic_class
        args += ["--rdma-dscp", str(tc.dscp), "--rdma-priority", str(tc.priority)] if tc and c.nicctl else []
        args += ["--timeout", str(c.timeout)]
        args += ["--nicctl", *c.nicctl] if c.nicctl else []  # last: its words run to the end
    srun = _srun(n, "--kill-on-bad-exit=1")
    return argv(*srun, "bash", word(Ref("RECIPE_DIR"), "/scripts/hostcheck.sh"), *args)


def _site_inputs(t: Target) -> tuple:
    """The site's Hugging Face cache, when the corpus is staged there: mounted read-only into the containers
    (the client reads it through the run's own datasets-cache folder, which the run folder's mount holds)."""
    return tuple(dict.fromkeys(s.path for s in staged_inputs(t) if s.kind == "hf-dataset"))


def _container_options(t: Target) -> tuple:
    """`docker run` words of the runner's container block: limits, capabilities, host folders, the RDMA
    devices when this variant moves KV over RDMA (the engine's uses_rdma), and the site's own words last;
    none without a container."""
    if t.launch.container_runtime == "none":  # no container: no `docker run` to take them
        return ()
    o = t.launch.container_options
    words = [x for name, value in o.ulimits.items() for x in ("--ulimit", f"{name}={value}")]
    words += [x for cap in o.cap_add for x in ("--cap-add", cap)]
    words += [x for opt in o.security_opt for x in ("--security-opt", opt)]
    words += ["--privileged"] if o.privileged else []
    words += [x for path in o.host_mounts for x in ("-v", f"{path}:{path}")]
    return (*words, *o.extra)


def _container_host_args(t: Target) -> tuple:
    """What scripts/container.sh decides on the node's host before `docker run`, from the runner's data: the
    submitting user and the groups owning the node's device files (numbers the render cannot know), the verbs
    devices of the runner's RDMA NICs and the host's RDMA userspace (a variant that uses RDMA)."""
    p = t.launch
    if p.container_runtime != "docker":
        return ()
    o = p.container_options
    words: list[str] = ["--as-submitter"] if o.user == "submitter" else ["--as-root"]
    if ENGINES[t.engine].uses_rdma(t):
        sysfs = p.nic_check.rdma_sysfs if p.nic_check and p.nic_check.rdma_sysfs else None
        words += ["--rdma-sysfs", sysfs] if sysfs else []
        words += [x for device in p.nic_devices for x in ("--rdma-device", device)]
        if _mooncake_rdma(t):  # Mooncake's verbs stack, as InferenceX mounts it for its Mooncake launch
            words += [x for lib in o.rdma_userspace for x in ("--host-file", f"{lib.host}={lib.at or ''}")]
    return tuple(words)


def _mooncake_rdma(t: Target) -> bool:
    """This variant's KV moves through Mooncake over RDMA (not MoRI, not tcp)."""
    return t.kv_transfer == "mooncake" and ENGINES[t.engine].uses_rdma(t)


def _rdma_probe(t: Target) -> tuple | None:
    """Every engine node's Mooncake registering GPU memory over the runner's RDMA devices, with the engines'
    environment (mooncake-registration), before any weights load: GPU runners whose Mooncake uses rdma."""
    p = t.launch
    if not (t.disagg and p.rdma_registration_probe and p.gpu_vendor != "none" and p.nic_devices):
        return None
    if t.engine not in ("vllm", "atom") or not ENGINES[t.engine].uses_rdma(t):
        return None  # SGLang moves KV with MoRI or its own Mooncake backend: its engine says at start
    python = ["--engine-command", "vllm"] if t.engine == "vllm" else ["--python", "python3"]
    return argv("--host", NODE_ADDR, "--devices", ",".join(p.nic_devices), *python)


def _gpu_drain(profile) -> tuple[float, int] | None:
    """AMD: the most of any GPU's VRAM in use, and how long a node waits for it to drain; None: no check."""
    if profile.gpu_vendor != "amd":
        return None
    return (profile.gpu_drain.max_vram_used, profile.gpu_drain.wait)


def _launch(c: Container, n: int, engine: str) -> tuple:
    """srun, one task per node, the whole step killed when any task fails; wrapped per container runtime."""
    srun = _srun(n, "--kill-on-bad-exit=1")
    script = word(Ref("RECIPE_DIR"), f"/server_{engine}.sh")
    same = [word(Ref("RUN_DIR"), ":", Ref("RUN_DIR"))] + [f"{m}:{m}" for m in c.mounts]
    if c.runtime == "pyxis":
        mounts = word(*[p for i, w in enumerate(same) for p in (("," if i else ""), *w)])
        return argv(
            *srun,
            f"--container-image={spelled_for(c.image, 'pyxis')}",
            word("--container-mounts=", *mounts),
            "--no-container-mount-home",
            "bash",
            script,
        )
    if c.runtime == "docker":
        # scripts/container.sh adds the name (disagg-<job>-<node>), the label and --rm, and removes what
        # earlier jobs left on the node first: a killed client does not stop its container (podman, docker).
        env = [x for name in NODE_ENV for x in ("-e", name)]
        read_only: list[Word | str] = [word(Ref(name), ":", Ref(name), ":ro") for name in c.env_mounts]
        read_only += [f"{path}:{path}:ro" for path in c.read_only]
        volumes = [x for w in same + read_only for x in ("-v", w)]
        devices = GPU_FLAGS[c.gpu_vendor]
        return argv(
            *srun,
            "bash",
            word(Ref("RECIPE_DIR"), "/scripts/container.sh"),
            "run",
            *c.host_args,
            "--",
            # the host check made sure the node holds the image lock.json names: never a pull on a node
            "--pull",
            "never",
            "--init",
            "--entrypoint",
            "",  # the image's own (vLLM's: `vllm serve`) would take the node script for its arguments
            "--network",
            "host",
            "--ipc",
            "host",
            *devices,
            *c.options,
            *env,
            *volumes,
            spelled_for(c.image, "docker"),
            "bash",
            script,
        )
    return argv(*srun, "bash", script)


def _cleanup(c: Container, n: int) -> tuple:
    """After the step, on every node: what a SIGKILLed docker client left running (empty: nothing to do)."""
    if c.runtime != "docker":
        return argv()
    return argv(*_srun(n), "bash", word(Ref("RECIPE_DIR"), "/scripts/container.sh"), "sweep")


def _router_service(t: Target, nodes: tuple, ports: Ports, timeouts: Timeouts) -> Service:
    backends: list[str | int | Word] = []  # argv items: flags, bootstrap ports, URLs
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.role] = counts.get(n.role, 0) + 1
        backends += [f"--{n.role}", peer_url(n.rank, ports.engine)]
        if n.role == "prefill":
            backends.append(ports.mooncake_bootstrap)
    return ENGINES[t.engine].router_service(t, backends, ports, timeouts, counts)


def _metrics_endpoints(t: Target, engine, nodes: tuple, ports: Ports) -> tuple:
    """NAME=URL per engine (prefill0, decode0, server0) that serves metrics, and the router, for the
    end-of-run snapshot."""
    served = nodes if engine.has_metrics(t) else ()
    engines = [word(f"{n.role}{n.index}=", *peer_url(n.rank, ports.engine), "/metrics") for n in served]
    if not t.disagg:
        return argv(*engines)
    port = engine.router_metrics_port(t, ports)
    return argv(*engines, word("router=http://", NODE_ADDR, f":{port}/metrics"))


def _cache_flush(nodes: tuple, ports: Ports, timeouts: Timeouts) -> tuple:
    """Every engine's caches emptied (sync.py flush-caches), each given the runner's cache-flush time."""
    urls = [x for n in nodes for x in ("--url", peer_url(n.rank, ports.engine))]
    timeout = ("--timeout", timeouts.cache_flush)
    return argv("python3", word(Ref("SCRIPTS_DIR"), "/sync.py"), "flush-caches", *urls, *timeout)


def _smoke(t: Target, engine, nodes: tuple, ports: Ports) -> tuple:
    roles = engine.proof_roles(t)
    metrics = [
        x
        for role in roles
        for n in nodes
        if n.role == role
        for x in (f"--{role}-metrics", word(*peer_url(n.rank, ports.engine), "/metrics"))
    ]
    return argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/proof.py"),
        "smoke",
        "--engine",
        t.engine,
        "--router",
        entry_url(t, ports),
        "--model",
        engine.served_model(t),
        *metrics,
    )


def _same_answers(t: Target, engine, nodes: tuple, ports: Ports) -> tuple | None:
    """The answers are right, not only fast (scripts/proof.py same-answers): greedy answers through the
    router against the first prefill engine serving the same prompts whole (where one can:
    Target.answers_checked)."""
    if not t.answers_checked:
        return None
    prefill = next(n for n in nodes if n.role == "prefill")
    return argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/proof.py"),
        "same-answers",
        "--router",
        entry_url(t, ports),
        "--direct",
        peer_url(prefill.rank, ports.engine),
        "--model",
        engine.served_model(t),
    )


def _cold_proof(t: Target) -> tuple | None:
    """An agentic point is measured on empty caches (its own allocation): the counters at its start show that
    no engine served a hit yet. vLLM's counters; an SGLang agentic run empties its caches itself (flush)."""
    if t.point.scenario != "agentic-coding" or t.engine != "vllm":
        return None
    folder = word(Ref("RESULTS_DIR"), "/metrics/start")
    return argv("python3", word(Ref("SCRIPTS_DIR"), "/proof.py"), "cold", "--metrics-dir", folder)


def _l2_proof(t: Target, benchmarks: tuple) -> tuple | None:
    """Agentic traces reuse long prefixes: with LMCache on, zero L2 hits means it silently died."""
    if t.point.scenario != "agentic-coding" or not t.uses_lmcache:
        return None
    last = benchmarks[-1].name  # counters are cumulative: the last snapshot covers the whole run
    return argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/proof.py"),
        "l2",
        "--metrics-dir",
        word(Ref("RESULTS_DIR"), f"/metrics/{last}"),
    )
