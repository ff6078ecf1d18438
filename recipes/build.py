"""build_plan: a validated entry + runner -> the frozen Plan of one search-space variant.

Engine-specific services live in recipes/vllm.py and recipes/sglang.py; everything the node runtime
does the same for every engine (nodes, launch, barriers, benchmarks, proofs, watchers) is decided here.
"""

from __future__ import annotations

import hashlib

from schemas import known_issues as ki
from schemas.images import engine_version
from schemas.rules import role_gpus

from . import sglang, vllm
from .plan import Benchmark, Container, Node, Pinned, Plan, Ports, Role, Service, Slurm, Timeouts
from .target import NODE_ADDR, Target, Unsupported, peer_url, program
from .words import Ref, argv, word

__all__ = ["Target", "Unsupported", "build_plan", "concurrencies", "parse_duration"]

ENGINES = {"vllm": vllm, "sglang": sglang}
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
MAX_ERROR_RATE = "0.10"  # AIPerf's --failed-request-threshold, and the result gate's (scripts/results.py)
BENCH_SECONDS = {"none": 10, "real": 600}  # per concurrency (and per soak phase): short on the simulator
SOAK_LENGTHS = (4, 2, 1)  # soak phases cycle the prompt through isl/4, isl/2 and isl
TEARDOWN_MARGIN_S = 600  # what a soak leaves of the time limit for start-up, proofs and teardown


def build_plan(
    t: Target,
    *,
    ports: Ports | None = None,
    timeouts: Timeouts | None = None,
    soak_seconds: int | None = None,
) -> Plan:
    """timeouts: by default from the runner (simulated engines start at once, real ones load weights).
    soak_seconds: instead of the sweep, phases of varied concurrency and prompt length for that long."""
    _check_supported(t)
    engine = ENGINES[t.engine]
    ports = ports or Ports()
    time_limit = t.hardware.time_limit or "04:00:00"
    timeouts = timeouts or Timeouts(done=_seconds(time_limit), **(SIM_TIMEOUTS if t.sim else REAL_TIMEOUTS))
    if soak_seconds is not None:
        _check_soak_fits(soak_seconds, time_limit)
    nodes = _nodes(t)
    signatures = _log_signatures(t)
    router = _router_service(t, nodes, ports, timeouts) if t.disagg else None
    container = Container(
        runtime=t.hardware.container_runtime,
        image=t.entry.image,
        gpu_vendor=t.hardware.gpu_vendor,
        mounts=(t.hardware.model_root,),
    )
    variant = t.variant if soak_seconds is None else f"{t.variant}_soak"
    benchmarks = _benchmarks(t, ports) if soak_seconds is None else _soak(t, ports, soak_seconds)
    return Plan(
        config_key=t.key,
        variant=variant,
        scenario=t.point.scenario,
        model=t.entry.model,
        framework=t.entry.framework,
        engine=t.engine,
        mode="sweep" if soak_seconds is None else "soak",
        router_name=t.router.name if t.disagg else None,
        gpus_per_node=t.hardware.gpus_per_node,
        components=_components(t),
        config_sha256=hashlib.sha256(t.entry.model_dump_json(by_alias=True).encode()).hexdigest(),
        runner=t.runner_label,
        slurm=Slurm(
            job_name=f"{t.key}_{variant}",
            partition=t.hardware.partition,
            account=t.hardware.account,
            time_limit=time_limit,
            nodes=len(nodes),
        ),
        container=container,
        ports=ports,
        timeouts=timeouts,
        address_args=_address_args(t),
        node_local_addr=(NODE_ADDR if t.sim else "127.0.0.1") if t.uses_lmcache else None,
        env_exported=tuple(sorted((k, str(v)) for k, v in engine.engine_env(t, ports).items())),
        env_shell=vllm.lmcache_env(t, ports),
        nodes=nodes,
        roles=_roles(t, engine, ports, timeouts, signatures),
        router=router,
        leader_commands=_commands(*([router.argv] if router else []), ("aiperf",)),
        launch=_launch(container, len(nodes), t.engine),
        benchmarks=benchmarks,
        metrics=_metrics_endpoints(t, engine, nodes, ports),
        smoke=_smoke(t, nodes, ports),
        l2_proof=_l2_proof(t, benchmarks),
        workarounds=ki.recorded_workarounds(t.entry, t.issues),
        log_signatures=signatures,
    )


def _check_supported(t: Target) -> None:
    engine = ENGINES[t.engine]  # Target.engine raises Unsupported for engines not rendered
    if t.disagg != t.entry.disagg:
        raise Unsupported("multinode entries are rendered disaggregated only (prefill and decode nodes)")
    engine.check(t)
    for role in t.roles:
        w = t.worker(role)
        if w.dp_attn or (w.ep or 1) > 1 or (w.pp or 1) > 1:
            raise Unsupported(f"{role}: dp-attn, ep and pp are not rendered yet")
        if t.disagg and role_gpus(w) != t.hardware.gpus_per_node:
            raise Unsupported(
                f"{role}: only one tp={t.hardware.gpus_per_node} worker per node is rendered "
                "(no multi-worker nodes yet)"
            )
    if t.point.space.spec_decoding != "none":
        raise Unsupported("spec-decoding is not rendered yet")


def _address_args(t: Target) -> tuple:
    """Simulated nodes share lo, each on its own 127.0.0.x that SLURM knows as its NodeAddr; real
    nodes advertise the address of their data-plane interface (never a loopback one)."""
    if t.hardware.data_plane_interface == "lo":
        return argv("--slurm-nodeaddr", "--allow-loopback")
    return argv("--interface", t.hardware.data_plane_interface)


def _components(t: Target) -> tuple:
    """What the numbers depend on besides the config: engine, KV transfer, L2 cache, router."""
    version = engine_version(t.entry.image)
    out = [(t.engine, ".".join(map(str, version)) if version else f"as in {t.entry.image}")]
    if t.disagg:
        out.append(("mooncake", f"as in {t.entry.image}"))
    if t.uses_lmcache:
        out.append(("lmcache", t.point.space.kv_offload_backend.version))
    if t.disagg:
        out.append((t.router.name, t.router.version))
    return tuple(out)


def _seconds(hms: str) -> int:
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s


def parse_duration(text: str) -> int:
    """Seconds of '90m', '2h', '600s', '600' or 'HH:MM:SS' (the soak option); ValueError otherwise."""
    text = text.strip()
    if text.count(":") == 2 and all(p.isdigit() for p in text.split(":")):
        seconds = _seconds(text)
    else:
        scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], 1)
        number = text[:-1] if text[-1:] in "smh" else text
        if not number.isdigit():
            raise ValueError(f"{text!r} is not a duration (e.g. 90m, 2h, 600s, 01:30:00)")
        seconds = int(number) * scale
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds


def _check_soak_fits(seconds: int, time_limit: str) -> None:
    room = _seconds(time_limit) - TEARDOWN_MARGIN_S
    if seconds > room:
        raise Unsupported(
            f"a soak of {seconds} s does not fit the runner's time-limit {time_limit} (at most "
            f"{max(room, 0)} s leaves {TEARDOWN_MARGIN_S} s for start-up, proofs and teardown)"
        )


def _nodes(t: Target) -> tuple:
    """Rank 0 = first prefill (+ router); then the other prefill nodes; then decode nodes."""
    out = []
    for role in t.roles:
        for index in range(t.worker(role).num_worker):
            out.append(Node(rank=len(out), role=role, index=index))
    return tuple(out)


def _roles(t: Target, engine, ports: Ports, timeouts: Timeouts, signatures: tuple) -> tuple:
    out = []
    for role in t.roles:
        services = engine.services(t, role, ports, timeouts)
        if signatures:  # started before the engine, so that start-up is watched too
            services.insert(-1, _log_watch(services[-1]))
        pinned = (
            (Pinned("lmcache", "lmcache", t.point.space.kv_offload_backend.version),)
            if (role == "prefill" and t.uses_lmcache)
            else ()
        )
        commands = _commands(*(s.argv for s in services))
        out.append(Role(role, tuple(services), commands=commands, pinned=pinned))
    return tuple(out)


def _commands(*argvs) -> tuple:
    """Programs these argvs run, once each; python3 is every node's anyway (the node tools need it)."""
    return argv(*dict.fromkeys(p for p in map(program, argvs) if p != "python3"))


def _log_signatures(t: Target) -> tuple:
    """Known issues of this engine whose log signature fails the job when it appears (any image: a fix
    that regressed, or a registry that is wrong, must not cost hours either)."""
    return tuple(
        {"issue": issue.id, "title": issue.title, "regex": issue.log_signature, "fix": ki.fix_hint(issue)}
        for issue in t.issues
        if issue.engine == t.engine
    )


def _log_watch(engine_service: Service) -> Service:
    log = word(Ref("LOG_DIR"), f"/{engine_service.name}.log")
    args = argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/logwatch.py"),
        "--plan",
        word(Ref("RECIPE_DIR"), "/plan.json"),
        "--log",
        log,
    )
    return Service(name="known-issues", argv=args, ready_url=None, ready_timeout=0)


def _launch(c: Container, n: int, engine: str) -> tuple:
    """srun, one task per node, the whole step killed when any task fails; wrapped per container runtime."""
    srun = ["srun", "--kill-on-bad-exit=1", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--label"]
    script = word(Ref("RECIPE_DIR"), f"/server_{engine}.sh")
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


def _router_service(t: Target, nodes: tuple, ports: Ports, timeouts: Timeouts) -> Service:
    backends, counts = [], {}
    for n in nodes:
        counts[n.role] = counts.get(n.role, 0) + 1
        backends += [f"--{n.role}", peer_url(n.rank, ports.vllm)]
        if n.role == "prefill":
            backends.append(ports.mooncake_bootstrap)
    return ENGINES[t.engine].router_service(t, backends, ports, timeouts, counts)


def _entry_url(t: Target, ports: Ports):
    """Where requests go: the router of a PD job, the one server of a single-node job."""
    return word("http://", NODE_ADDR, f":{ports.router if t.disagg else ports.vllm}")


def _metrics_endpoints(t: Target, engine, nodes: tuple, ports: Ports) -> tuple:
    """NAME=URL per engine (prefill0, decode0, server0) and the router, for the end-of-run snapshot."""
    engines = [word(f"{n.role}{n.index}=", *peer_url(n.rank, ports.vllm), "/metrics") for n in nodes]
    if not t.disagg:
        return argv(*engines)
    port = engine.router_metrics_port(t, ports)
    return argv(*engines, word("router=http://", NODE_ADDR, f":{port}/metrics"))


def _smoke(t: Target, nodes: tuple, ports: Ports) -> tuple:
    # SGLang has no decode-side counter of KV received: its proof reads the prefill's prompt tokens too.
    roles = ("prefill", "decode") if t.engine == "sglang" else ("decode",)
    metrics = [
        x
        for role in roles
        for n in nodes
        if n.role == role
        for x in (f"--{role}-metrics", word(*peer_url(n.rank, ports.vllm), "/metrics"))
    ]
    return argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/proof.py"),
        "smoke",
        "--engine",
        t.engine,
        "--router",
        _entry_url(t, ports),
        "--model",
        t.entry.model,
        *metrics,
    )


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


def concurrencies(t: Target) -> tuple:
    sp = t.point.space
    if sp.conc_list is not None:
        return tuple(sp.conc_list)
    out, c = [], sp.conc_start
    while c <= sp.conc_end:  # InferenceX ranges double from start to end
        out.append(c)
        c *= 2
    return tuple(out)


def _benchmarks(t: Target, ports: Ports) -> tuple:
    seconds = BENCH_SECONDS["none" if t.sim else "real"]
    return tuple(
        _benchmark(t, ports, f"conc{c}", c, seconds, _workload_args(t, t.scenario_params.get("isl")))
        for c in concurrencies(t)
    )


def _soak(t: Target, ports: Ports, total: int) -> tuple:
    """Phases of one benchmark duration each, cycling concurrency and (fixed-seq-len) prompt length so
    the engine keeps changing batch shapes: late-onset bugs (CUDA-graph replay, buffer reuse) need that."""
    seconds = BENCH_SECONDS["none" if t.sim else "real"]
    concs = concurrencies(t)
    isl = t.scenario_params.get("isl")
    lengths = tuple(max(1, isl // d) for d in SOAK_LENGTHS) if isl else (None,)
    out = []
    for i in range(max(1, total // seconds)):
        c, length = concs[i % len(concs)], lengths[(i // len(concs) + i) % len(lengths)]
        name = f"soak{i + 1:03d}"
        out.append(_benchmark(t, ports, name, c, seconds, _workload_args(t, length)))
    return tuple(out)


def _benchmark(t: Target, ports: Ports, name: str, c: int, seconds: int, workload: list) -> Benchmark:
    # Offline, AIPerf's "builtin" tokenizer still downloads; the simulator's word tokenizer ships with
    # the trace set (sim/traces/), and real runs use the model's own.
    tokenizer = (
        word(Ref("RECIPE_DIR"), "/traces/tokenizer") if t.sim else f"{t.hardware.model_root}/{t.entry.model}"
    )
    args = [
        "aiperf",
        "profile",
        "--url",
        _entry_url(t, ports),
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
        seconds,
        "--random-seed",
        42,
        "--failed-request-threshold",
        MAX_ERROR_RATE,
        "--use-server-token-count",
        # output lengths are sent as max_completion_tokens, a cap: without this, answers end early
        "--extra-inputs",
        "ignore_eos:true",
        "--output-artifact-dir",
        word(Ref("RESULTS_DIR"), f"/{name}"),
        *workload,
    ]
    return Benchmark(
        concurrency=c,
        result=f"{t.key}_{t.variant}_{name}.json",
        argv=argv(*args),
        max_error_rate=MAX_ERROR_RATE,
        min_duration=seconds // 2,
        name=name,
    )


def _workload_args(t: Target, isl: int | None) -> list:
    if t.point.scenario == "agentic-coding":
        session = ["--session-header", "X-Session-ID"]  # lets the router keep a session on one prefill
        if t.sim:  # nothing can be downloaded here: a small trace set shipped with the recipe
            return [
                *session,
                "--input-file",
                word(Ref("RECIPE_DIR"), "/traces/agentic-sim.jsonl"),
                "--custom-dataset-type",
                "multi_turn",
            ]
        trace_set = t.settings(t.roles[0])["WEKA_LOADER_OVERRIDE"]
        if trace_set is None:
            raise Unsupported("agentic-coding on a real cluster needs WEKA_LOADER_OVERRIDE=<trace set>")
        return [*session, "--public-dataset", trace_set]
    osl = t.scenario_params["osl"]
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
        *(["--prompt-corpus", "random"] if t.sim else []),
    ]
