"""configs/launch.yaml: how a job launches on each runner label. Real and local clusters differ only in
this data (SLURM, container, devices, addresses, timeouts, benchmark length, engine environment,
tokenizer and trace source, which engine build runs, the knobs a CPU engine needs, the one local-only
connector module); the defaults here are a real GPU cluster's.

InferenceX's own tools read configs/runners.yaml, never this file: its validator refuses keys it does not
know, so the launch facts of a site live here, keyed by the same runner labels.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from .base import (
    MAX_WAIT_S,
    AbsPath,
    EnvInt,
    EnvName,
    EnvValue,
    Ident,
    Label,
    Model,
    RelPath,
    WaitSeconds,
    WheelSource,
    bounded,
    shape,
)
from .images import REFERENCE, REFERENCE_WORDS

Engine = Literal["vllm", "sglang", "atom"]
Role = Literal["prefill", "decode", "server"]
Router = Literal["pd-proxy", "vllm-router", "sglang-router", "atomesh"]
# One word of a command line the runner adds (a flag or its value): no space, quote, '$' or glob.
Arg = Annotated[
    str,
    shape(
        r"[A-Za-z0-9-][A-Za-z0-9._/:=,+@%-]*",
        "a command-line word",
        max_length=256,
        allowed="ASCII letters, digits and '._/:=,+@%-', as in --health-timeout or 10",
    ),
]
PythonModule = Annotated[
    str,
    shape(
        r"[A-Za-z_][A-Za-z0-9_]*",
        "a top-level Python module name",
        max_length=64,
        allowed="as in local_cpu_mooncake",
    ),
]
ToolName = Annotated[
    str,
    shape(
        r"[a-z][a-z0-9-]*",
        "a tool name",
        max_length=64,
        allowed="a pyproject.toml extra and its .venv-<name>, as in vllm-cpu",
    ),
]
Port = Annotated[int, bounded(1024, 65535)]
HMS = Annotated[
    str,
    shape(
        r"[0-9]{1,3}:[0-5][0-9]:[0-5][0-9]", "a time limit", max_length=9, allowed="H:MM:SS, as in 04:00:00"
    ),
]
SettingName = Annotated[
    str, shape(r"[A-Z][A-Z0-9_]*", "a setting name", max_length=128, allowed="UPPER_SNAKE_CASE ASCII")
]
ShipName = Annotated[
    str,
    shape(
        r"[a-z][a-z0-9-]*", "a folder name", max_length=64, allowed="lowercase ASCII letters, digits and '-'"
    ),
]
_WAIT = f"Seconds, 1 to {MAX_WAIT_S} (a day: a wait longer than that is a hang)."


class Timeouts(Model):
    """Seconds each wait of the job may take before it fails naming what it waited for."""

    barrier: WaitSeconds = Field(600, description=f"Every node at the start barrier. {_WAIT}")
    lmcache_ready: WaitSeconds = Field(300, description=f"LMCache server /healthcheck 200. {_WAIT}")
    engine_ready: WaitSeconds = Field(
        3600, description=f"Engine /health 200 (real engines load ~557 GB of weights). {_WAIT}"
    )
    router_ready: WaitSeconds = Field(
        300, description=f"Router healthy with every prefill and decode registered. {_WAIT}"
    )
    stall: WaitSeconds = Field(
        600,
        description="A starting service whose log does not grow and whose processes use no CPU time this "
        "long fails its node (a silent hang), before its readiness timeout. Loading weights or compiling "
        f"moves one or the other. {_WAIT}",
    )
    stopped: WaitSeconds = Field(
        10,
        description="A service of a node found stopped (process state T: SIGSTOP, a debugger) this long "
        f"fails the node at once, instead of at its readiness timeout or never. {_WAIT}",
    )
    serving_stall: WaitSeconds = Field(
        300,
        description="While a benchmark runs, requests in flight and no prompt or generated token on any "
        "engine this long fails the job (scripts/tokenwatch.py): a KV transfer that never completes "
        f"(Mooncake waits 480 s), a wedged engine whose /health stays 200. {_WAIT}",
    )
    cache_flush: WaitSeconds = Field(
        120,
        description="Each engine emptying its caches before a concurrency of an agentic SGLang sweep (it "
        f"waits for the requests still in flight; InferenceX's drain timeout). {_WAIT}",
    )
    poll_interval: Annotated[int, bounded(1, 60)] = Field(
        1,
        description="How often a node's watcher checks its services (an exit, a stopped process): a "
        "service that dies fails the node within this many seconds.",
    )


class Teardown(Model):
    """Seconds a node's teardown gives its processes: the graces bound how long a job outlives its end or
    its first failure, so they stay well below SLURM's KillWait (usually 30 s), after which slurmstepd
    SIGKILLs the node's processes and a docker client dies without stopping its container."""

    grace: Annotated[int, bounded(1, 120)] = Field(
        15,
        description="After a clean run, from TERM to SIGKILL of every service of the node: engines and "
        "LMCache get time to exit on their own.",
    )
    fail_grace: Annotated[int, bounded(1, 120)] = Field(
        2,
        description="The same when the node is failing (or a foreground command left processes behind): "
        "a graceful exit buys nothing then, and every second of it delays the job's verdict.",
    )
    container_stop: Annotated[int, bounded(1, 120)] = Field(
        20,
        description="container-runtime docker: `docker stop --time` of a node's container when its step is "
        "signalled. The node's own teardown runs inside meanwhile; below SLURM's KillWait, so the container "
        "is stopped by name before its client is SIGKILLed.",
    )

    @model_validator(mode="after")
    def _graces_fit(self) -> Self:
        if self.fail_grace > self.grace:
            raise ValueError(
                f"fail-grace {self.fail_grace} is above grace {self.grace}: failing is never slower"
            )
        if self.fail_grace >= self.container_stop:
            raise ValueError(
                f"container-stop {self.container_stop} leaves a failing node's teardown (fail-grace "
                f"{self.fail_grace}) no time inside its container"
            )
        return self


class FailureReport(Model):
    """How much of a log a failure report shows: enough to see the error, short enough to read in the job's
    output (the whole log stays in the run folder)."""

    log_lines: Annotated[int, bounded(1, 1000)] = Field(
        20, description="The last lines of the failed service's log, under its headline."
    )
    router_warning_lines: Annotated[int, bounded(1, 1000)] = Field(
        5,
        description="The router's last WARNING or ERROR lines after a benchmark result fails its check: "
        "which engine answered what (the benchmark's error summary has the status, never the engine).",
    )


class Ports(Model):
    """The ports of a job's services. Each node has its own address, so nodes reuse them; runners whose
    nodes share one host's addresses give ports no other job of the host uses. Mooncake's bootstrap port
    is mooncake-bootstrap.port."""

    engine: Port = Field(8000, description="Every engine's HTTP API (vLLM's default 8000).")
    lmcache: Port = Field(5555, description="The LMCache server's ZMQ port the engines connect to.")
    lmcache_http: Port = Field(8080, description="The LMCache server's HTTP port (/healthcheck).")
    router: Port = Field(30000, description="The router the benchmark sends its requests to, on rank 0.")
    router_metrics: Port = Field(29000, description="The router's Prometheus /metrics, where it has its own.")
    barrier: Port = Field(29500, description="The barriers' leader, on rank 0 (scripts/barrier.py).")


class AccuracyRun(Model):
    """How a job runs its model's graded eval here (configs/models.yaml accuracy: the eval and its threshold;
    recipes/accuracy.py: which jobs run it)."""

    run: Literal["selected", "off"] = Field(
        "selected",
        description="selected: the jobs InferenceX's selection picks run the eval (the highest concurrency "
        "of each search-space point: one eval per deployment); off: none here (a local runner that cannot "
        "install the eval's client; a runner of real engines may not).",
    )
    eval_set: Literal["published", "made-up"] = Field(
        "published",
        description="published: the eval's public question set, downloaded where you submit (the datasets "
        "library in .venv-eval), hashed into lock.json and shipped with the run; made-up: a small set in the "
        "same format made at submission (the local runners: the score then means nothing, the pipeline is "
        "real).",
    )
    limit: Annotated[int, bounded(1, 2**20)] | None = Field(
        None, description="The questions asked (lm-eval --limit); none: every one of the test split."
    )
    max_tokens: Annotated[int, bounded(1, 2**20)] | None = Field(
        None,
        description="The answer's token budget; none: InferenceX's, from the engines' context (its length "
        "less 4096, or half of it when shorter; at most 16384).",
    )
    seconds: WaitSeconds = Field(
        3600,
        description="The whole eval's bound (in the job's time budget); past it the job fails, unjudged.",
    )


class AgenticReplay(Model):
    """AIPerf's agentic replay as InferenceX's published agentic runs use it (its benchmark library's replay
    command, PR #1924's head): the scenario lock, the cache warm-up before profiling, where each trajectory
    starts, how many traces load. Results compare with InferenceX's only with these values. The pinned
    AIPerf's scenario lock forbids a per-trajectory idle-gap cap (--trace-idle-gap-cap-seconds): it has none
    here."""

    scenario: Literal["inferencex-agentx-mvp"] = Field(
        "inferencex-agentx-mvp",
        description="AIPerf --scenario: locks the benchmark's invariants (a pinned public corpus, cache "
        "bust, no timeline compression, streaming, ignore_eos; at least 900 s, else the run is marked no "
        "valid submission).",
    )
    seconds: WaitSeconds = Field(
        3600,
        description="AIPerf --benchmark-duration of an agentic point (InferenceX's matrix: 3600). Below 900 "
        "the scenario lock refuses it without --unsafe-override, which marks the run no valid submission.",
    )
    warmup_seconds: WaitSeconds = Field(
        600,
        description="AIPerf --agentic-cache-warmup-duration: the trajectories' one-token warm-up that fills "
        "the caches before profiling starts.",
    )
    warmup_grace_seconds: WaitSeconds = Field(
        1800,
        description="AIPerf --warmup-grace-period: how long long-context warm-up requests may take to drain "
        "before profiling starts (a maximum, not a wait).",
    )
    configure_seconds: WaitSeconds = Field(
        1800,
        description="AIPERF_DATASET_CONFIGURATION_TIMEOUT and AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT: how "
        "long AIPerf may take to load and reconstruct the corpus before it sends anything (its defaults, 300 "
        "and 600 s, are shorter than the Weka corpus takes on a busy node; InferenceX sets both to 1800).",
    )
    trajectory_start: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        [0.25, 0.75],
        min_length=2,
        max_length=2,
        description="AIPerf --trajectory-start-min-ratio and -max-ratio: each trajectory's warm-up start, "
        "drawn from this share of its turns.",
    )
    dataset_entries: Annotated[int, bounded(1, 1_000_000)] = Field(
        393,
        description="AIPerf --num-dataset-entries: traces loaded (a ceiling; the with-subagents sets hold "
        "393).",
    )

    @model_validator(mode="after")
    def _start_range_ordered(self) -> Self:
        low, high = self.trajectory_start
        if low > high:
            raise ValueError(f"trajectory-start: {low} is above {high} (give [min, max])")
        return self


class TraceSetChoice(Model):
    """The trace set a config naming none (WEKA_LOADER_OVERRIDE) replays, by its model's context length."""

    min_context: Annotated[int, bounded(0, 2**24)] = Field(
        description="The model's context (max-positions) reaches this."
    )
    set: Ident = Field(description="AIPerf's --public-dataset name of the set (one its scenario accepts).")


class Benchmark(Model):
    """How the benchmark client runs here."""

    seconds: WaitSeconds = Field(
        600,
        description="AIPerf --benchmark-duration per fixed-seq-len concurrency and per soak phase (an "
        f"agentic point's is agentic-replay.seconds). {_WAIT}",
    )
    tokenizer: RelPath | None = Field(
        None,
        description="Tokenizer folder under the run's recipe folder (shipped, see ship); none: the model's "
        "own "
        "folder (AIPerf's builtin tokenizer downloads even offline).",
    )
    prompt_corpus: Literal["random"] | None = Field(
        None, description="AIPerf --prompt-corpus for fixed-seq-len prompts (random: for word tokenizers)."
    )
    hf_cache: AbsPath | None = Field(
        None,
        description="agentic scenarios: the site's Hugging Face cache (as HF_HOME) on a file system the "
        "submit host and the nodes share. The corpus is AIPerf's pinned --public-dataset (the set the config "
        "names in WEKA_LOADER_OVERRIDE, or default-trace-sets'); `make submit` stages it here once, with the "
        "datasets library AIPerf itself loads it with, checks that it loads offline, and hashes it into "
        "lock.json; the containers mount this folder read-only, the client reads it offline, and the first "
        "node checks every file against the lock at preflight. Nothing is fetched on a compute node.",
    )
    corpus: Literal["pinned", "made-up"] = Field(
        "pinned",
        description="What hf-cache holds under the pinned set's name: the published corpus (staged from the "
        "Hub where you submit), or a small corpus made on this machine in the same layout (`python -m "
        "sim.corpus`, the local runners): its runs are labelled 'made-up corpus, not a submission' whatever "
        "the scenario stamps, and nothing is downloaded for it.",
    )
    default_trace_sets: list[TraceSetChoice] = Field(
        default_factory=list,
        description="agentic scenarios: the set a config naming none replays, the first whose min-context "
        "the model's context reaches (InferenceX picks the full corpus for 1M-token models, a 256k-capped "
        "one otherwise); empty: a config must name its set.",
    )
    agentic_replay: AgenticReplay = Field(
        default_factory=AgenticReplay,
        description="agentic scenarios: AIPerf's agentic replay with InferenceX's scenario, warm-up and "
        "trajectory settings (results then compare with InferenceX's). Every runner replays under the same "
        "scenario lock; a runner with a shorter warm-up or duration (the local ones) gets --unsafe-override "
        "for the duration alone, and its results are marked no valid submission.",
    )
    accuracy: AccuracyRun = Field(
        default_factory=AccuracyRun, description="The graded eval's run here (its set, size and bound)."
    )
    grace_seconds: WaitSeconds | None = Field(
        None,
        description="AIPerf --benchmark-grace-period: how long answers still in flight when the duration "
        "ends may take and count (AIPerf's default 30 s; a CPU engine's long prompts take minutes).",
    )


class ConnectorModule(Model):
    """A local runner's own KV-connector module (docs/upstream-facts.md#gpu-less-engines): every
    MooncakeConnector of the job is loaded from it (kv_connector_module_path), and the shipped folder that
    holds it is put on the engines' PYTHONPATH. It may only make the upstream connector run on this runner's
    engines; lint refuses it on any runner that is not a local one."""

    module: PythonModule = Field(description="The module MooncakeConnector is loaded from.")
    shipped: Ident = Field(description="The ship folder (see ship) that holds it.")


class GpuDrain(Model):
    """The GPU drain gate of AMD runners: before any engine starts, every node's GPUs must be free."""

    max_vram_used: float = Field(
        0.10,
        gt=0,
        lt=1,
        description="Fail when any GPU has more than this fraction of its VRAM in use (InferenceX's gate: "
        "about 10 %), or when a process of the node holds a GPU device.",
    )
    wait: Annotated[int, bounded(0, 3600)] = Field(
        900,
        description="Seconds a node waits for its GPUs to drain before it fails: the previous job's "
        "processes may still be releasing VRAM when this one starts (InferenceX waits up to 15 minutes). "
        "Re-checked every 10 s, each check said; 0: one check.",
    )


class NicCheck(Model):
    """The host preflight of a runner's data-plane NICs (scripts/nics.py): before any container starts,
    srun runs it on every node. The data-plane interface and each RDMA device must exist and be up; with
    `nicctl`, every AMD NIC's QoS and DCQCN must be what RDMA needs (InferenceX's rdma_check.sh gates: a
    misconfigured NIC does not fail a transfer, it quietly slows it)."""

    nicctl: list[Arg] = Field(
        default_factory=list,
        max_length=8,
        description="The command that runs AMD's nicctl on the host, as words (e.g. [sudo, -n, nicctl]); "
        "empty: no QoS/DCQCN check (NICs without nicctl). Once set, a nicctl that is missing, refused or "
        "sees no NIC fails the job: the check is never skipped quietly.",
    )
    no_drop_priorities: list[Annotated[int, bounded(0, 7)]] = Field(
        default_factory=list,
        max_length=8,
        description="nicctl: the PFC no-drop priorities the site's RoCE traffic uses; every NIC must list "
        "exactly these (empty: any, as long as PFC covers each one listed).",
    )
    cnp_dscp: Annotated[int, bounded(0, 63)] | None = Field(
        None,
        description="nicctl: the DSCP value of congestion notification packets the site sets; every RoCE "
        "device must use it (unset: one value on all of them).",
    )
    timeout: Annotated[int, bounded(1, 120)] = Field(20, description="Seconds one nicctl command may take.")
    rdma_sysfs: AbsPath | None = Field(
        None,
        description="Where the host lists its RDMA devices, one folder each with ports/<n>/state as the "
        "kernel writes them; absent: the kernel's /sys/class/infiniband. Only a runner whose devices are "
        "simulated (the local cluster) states it.",
    )


class RdmaTrafficClass(Model):
    """The class the site's RoCE fabric carries RDMA on without drops: the DSCP its NICs map to a PFC no-drop
    priority (`nicctl show qos`: "DSCP : 24 ==> priority : 3" with 3 among "PFC no-drop priorities"). MoRI
    marks its packets with it (MORI_RDMA_TC/MORI_IO_TC, the IP traffic-class byte: DSCP in its upper six
    bits, so 4 x DSCP; MORI_RDMA_SL/MORI_IO_SL, the priority), and so does Mooncake over rdma (MC_IB_TC,
    MC_IB_SL); unmarked, they travel at priority 0, which
    PFC does not protect, and a congested fabric drops them. With nic-check.nicctl, every node's host
    checks that each NIC maps this DSCP to this priority and that PFC holds it no-drop, before any container
    starts."""

    dscp: Annotated[int, bounded(0, 63)] = Field(description="The DSCP RDMA packets are marked with.")
    priority: Annotated[int, bounded(0, 7)] = Field(
        description="The PFC no-drop priority the NICs map that DSCP to."
    )

    @property
    def traffic_class(self) -> int:
        """The IP header's traffic-class byte for this DSCP (ECN bits zero)."""
        return self.dscp << 2


class Lmcache(Model):
    """LMCache server flags this runner's engines need (lmcache server's own defaults when absent)."""

    transfer_mode: Literal["lmcache_driven", "engine_driven", "auto"] | None = Field(
        None,
        description="--supported-transfer-mode. A CPU engine's LMCacheMPConnector registers an engine-driven "
        "context, which the default (lmcache_driven) has no handler for: the engine then waits 2 x "
        "lmcache.mp.mq_timeout at start.",
    )
    worker_reap_timeout: Annotated[int, bounded(0, MAX_WAIT_S)] | None = Field(
        None,
        description="--worker-reap-timeout-seconds (LMCache's default 120; 0: never). A reaped engine's next "
        "store waits forever while its /health stays 200: a busy CPU engine misses heartbeats for minutes.",
    )


class MooncakeBootstrap(Model):
    """Where prefill engines serve Mooncake's bootstrap /query (VLLM_MOONCAKE_BOOTSTRAP_PORT)."""

    port: Port = Field(
        8998,
        description="The port (vLLM's default 8998). Mooncake's bootstrap server binds 0.0.0.0: runners "
        "whose nodes share one host's addresses give it a port no other job of the host uses.",
    )


PythonVersion = Annotated[
    str, shape(r"3\.[0-9]{1,2}", "a Python version", max_length=5, allowed="MAJOR.MINOR, as in 3.12")
]
WheelPlatform = Annotated[
    str,
    shape(
        r"manylinux_2_[0-9]{1,2}_(x86_64|aarch64)",
        "a wheel platform",
        max_length=32,
        allowed="manylinux_2_<glibc minor>_<arch>, as in manylinux_2_28_x86_64",
    ),
]


Sha256 = Annotated[
    str, shape(r"[0-9a-f]{64}", "a SHA-256", max_length=64, allowed="64 lowercase hexadecimal digits")
]


class SiteWheel(Model):
    """A build the site makes and no index has (LMCache for ROCm): a wheel file and its SHA-256."""

    source: WheelSource = Field(
        description="Where `make submit` takes the wheel from: a path on the submitting host, or https URL."
    )
    sha256: Sha256 = Field(
        description="The wheel's SHA-256: checked at submission and again by pip on the node."
    )


class NodeSetup(Model):
    """The tools a job needs that the image lacks (AIPerf) or carries at other versions than the tested
    ones (our proxy's server stack), installed on the nodes from pinned wheels with their SHA-256 that
    `make submit` puts in the run folder (no network on the nodes)."""

    python: PythonVersion = Field(
        description="The image's python3 (MAJOR.MINOR): the wheels are fetched for it, and the node checks "
        "it before installing anything."
    )
    platform: WheelPlatform = Field(description="The newest manylinux platform the image's C library runs.")
    root: AbsPath | None = Field(
        None,
        description="Where nodes keep the installed environments, one per lock hash, reused by later jobs "
        "(a node-local or shared folder); absent: inside the run folder, installed again by every job.",
    )
    site_wheels: dict[Literal["lmcache"], SiteWheel] = Field(
        default_factory=dict,
        description="Libraries the engines import that the image lacks and no index has (lmcache: the "
        "site's ROCm build). Installed on the nodes that use them (prefill, for LMCache) with --no-deps onto "
        "the image's Python path, so nothing of the image is replaced; the wheel's version must be the one "
        "the config pins. Absent: the image must carry it (preflight checks the version).",
    )


DockerWord = Annotated[
    str,
    shape(
        r"[A-Za-z0-9/-][A-Za-z0-9._/:=,+@%-]*",
        "a docker run word",
        max_length=256,
        allowed="ASCII letters, digits and '._/:=,+@%-', as in --ulimit or memlock=-1",
    ),
]
Ulimit = Annotated[
    str,
    shape(
        r"-1|[0-9]{1,19}(:[0-9]{1,19})?", "a ulimit", max_length=40, allowed="-1 (unlimited), N, or SOFT:HARD"
    ),
]


class HostLibrary(Model):
    """One host file or folder the containers get read-only (container.rdma-userspace)."""

    host: Annotated[
        str,
        shape(
            r"/[A-Za-z0-9._/*+-]*",
            "a host path",
            max_length=256,
            allowed="an absolute path; * matches "
            "within one name, as in /usr/lib/x86_64-linux-gnu/libionic*.so",
        ),
    ] = Field(description="Absolute host path; may hold * (every match is mounted; none is a failure).")
    at: (
        Annotated[
            str,
            shape(
                r"(/[A-Za-z0-9_+-][A-Za-z0-9._+-]*)+/?",
                "a container path",
                max_length=256,
                allowed="an absolute path, ending in / for a folder",
            ),
        ]
        | None
    ) = Field(
        None,
        description="Where the container sees it: absent, the same path; ending in '/', that folder with "
        "the match's own name; else that exact path (the host path must then match one file).",
    )


class ImageStaging(Model):
    """How the nodes get the config's image without fetching anything (container-runtime docker): every
    node's host check makes sure its runtime holds the image lock.json names, by id, before any container
    starts; `docker run --pull never` then never pulls."""

    archive: AbsPath | None = Field(
        None,
        description="A folder on a file system the submit host and the nodes share: `make submit` saves the "
        "image there once (docker pull and docker save on the submit host, which has the network), and a "
        "node whose runtime lacks it loads it from there (docker load) at its host check.",
    )
    preloaded: bool = Field(
        False,
        description="The site puts the image on every node itself (its own pre-pull or mirror): a node "
        "that lacks it fails its host check at once, named, instead of pulling.",
    )
    load_timeout: Annotated[int, bounded(60, 7200)] = Field(
        1800, description="Seconds a node's docker load of the archive may take (tens of GB from NFS)."
    )

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        if (self.archive is None) == (not self.preloaded):
            raise ValueError("image-staging: give archive (a shared folder) or preloaded: true, one of them")
        return self


class SlurmExtras(Model):
    """sbatch options a site needs besides partition, account and time (each rendered as #SBATCH)."""

    gres: (
        Annotated[str, shape(r"[A-Za-z0-9_:,.-]+", "a gres", max_length=128, allowed="as in gpu:8")] | None
    ) = Field(None, description="--gres, as in gpu:8 (sites whose GPUs are a generic resource).")
    qos: Ident | None = Field(None, description="--qos.")
    reservation: Ident | None = Field(None, description="--reservation.")
    constraint: (
        Annotated[
            str,
            shape(
                r"[A-Za-z0-9_&|\[\]*:.-]+",
                "a constraint",
                max_length=128,
                allowed="node features, as in mi355x&ib",
            ),
        ]
        | None
    ) = Field(None, description="--constraint: node features the job's nodes must have.")


class Container(Model):
    """What `docker run` gives each node's container besides the GPUs (container-runtime docker). The
    defaults are the known-working MI355X launch's (InferenceX's job.slurm): RDMA needs locked memory and
    the verbs devices, ROCm's debugger hooks SYS_PTRACE and an unconfined seccomp. (No --shm-size: the
    container shares the host's IPC namespace and its /dev/shm; podman refuses the pair.)"""

    ulimits: dict[Ident, Ulimit] = Field(
        default_factory=lambda: {"memlock": "-1", "stack": "67108864", "nofile": "1048576:1048576"},
        description="--ulimit NAME=VALUE each (memlock -1: RDMA registers GPU and host memory).",
    )
    cap_add: list[
        Annotated[str, shape(r"[A-Z_]{2,32}", "a capability", max_length=32, allowed="as in SYS_PTRACE")]
    ] = Field(default_factory=lambda: ["SYS_PTRACE"], description="--cap-add each.")
    security_opt: list[DockerWord] = Field(
        default_factory=lambda: ["seccomp=unconfined"], description="--security-opt each."
    )
    privileged: bool = Field(
        False,
        description="--privileged: every host device and capability. Off: the named devices, limits and "
        "capabilities above are what ROCm and RDMA need; a site that needs more says so here.",
    )
    host_mounts: list[AbsPath] = Field(
        default_factory=lambda: ["/sys"],
        description="Host folders mounted at the same path, read-write (/sys: RDMA and GPU topology).",
    )
    user: Literal["submitter", "root"] = Field(
        "submitter",
        description="Who the container's processes are: the submitting user with their groups and the "
        "groups owning the GPU and RDMA device files on the host (numeric, so the image's group names do "
        "not matter), HOME a folder of the run; the run folder and everything in it stay the user's, and "
        "NFS root_squash does not refuse its writes. root: the runtime's default, only where RDMA or the "
        "runtime needs it (say why in root-reason); the run folder must then be on a file system that "
        "lets root write it, and each node hands its files back to the submitting user when it ends.",
    )
    root_reason: (
        Annotated[
            str,
            shape(
                r"[ -~]{10,300}", "a reason", max_length=300, allowed="printable ASCII, 10 to 300 characters"
            ),
        ]
        | None
    ) = Field(
        None,
        description="user root: why this runner's containers cannot run as the submitting user (said on "
        "every recipe page of the runner and in the job's output).",
    )
    rdma_userspace: list[HostLibrary] = Field(
        default_factory=list,
        description="Host files mounted read-only into the containers of a variant whose Mooncake moves KV "
        "over rdma: the host's verbs library, its NIC providers and /etc/libibverbs.d, because the image's "
        "may not match the host's driver (an Ubuntu 24.04 image on a 22.04 host). Each must exist on every "
        "node: a missing one fails the node before its container starts, named.",
    )
    extra: list[DockerWord] = Field(
        default_factory=list,
        description="The site's own docker run words, after everything above (e.g. [--ulimit, core=0] or "
        "[-v, /opt/rocm-libs:/opt/rocm-libs:ro]).",
    )


# A runner of no GPU vendor (the local container runner) takes none of the GPU launch's container defaults.
NO_CONTAINER_OPTIONS = Container.model_validate(
    {"ulimits": {}, "cap-add": [], "security-opt": [], "host-mounts": []}
)


# Engine environment every launch derives (recipes/build.py): a runner or model setting it contradicts it.
DERIVED_ENV = {
    "VLLM_ENGINE_READY_TIMEOUT_S": "set timeouts.engine-ready instead (vLLM's own wait is the job's)",
    "DO_NOT_TRACK": "every launch turns usage telemetry off already",
    "VLLM_NO_USAGE_STATS": "every launch turns usage telemetry off already",
    "MC_IB_TC": "state rdma-traffic-class instead (Mooncake's RDMA is marked with it)",
    "MC_IB_SL": "state rdma-traffic-class instead (Mooncake's RDMA is marked with it)",
}


class LaunchProfile(Model):
    """One runner label's launch facts."""

    aliases: list[Label] = Field(
        [],
        description="Other runner labels that name this same cluster in master configs (InferenceX names its "
        "MI355X cluster mi355x, mi355x-disagg and cluster:mi355x-amds): an entry on an alias runs with this "
        "profile and this label's hardware in runners.yaml.",
    )
    gpu_vendor: Literal["amd", "nvidia", "none"] = Field(
        description="Device mapping of the container: amd -> /dev/kfd, /dev/dri; nvidia -> --gpus all; none."
    )
    engine_build: Literal["image", "simulator", "cpu"] = Field(
        "image",
        description="Which engines run: the image's own (a real cluster), this repository's simulator "
        "(sim/bin, the local cluster), or the engine's CPU build from the tool virtualenv engine-venv (the "
        "local CPU cluster: real engines on this host's processors).",
    )
    engine_venv: ToolName | None = Field(
        None,
        description="engine-build cpu: the pyproject.toml extra whose pins are the engines (its first pin) "
        "and their KV connectors, installed by `make tools` as .venv-<name>; preflight checks the engine's "
        "pinned version and lock.json names every pin.",
    )
    kv_connector_module: ConnectorModule | None = Field(
        None, description="The local runner's own MooncakeConnector module (local runners only)."
    )
    partition: Ident = Field(description="SLURM partition.")
    account: Ident | None = Field(None, description="SLURM account, if the cluster needs one.")
    time_limit: HMS = Field("04:00:00", description="sbatch --time, H:MM:SS.")
    sbatch: SlurmExtras = Field(
        default_factory=SlurmExtras, description="Other sbatch options the site needs (gres, qos, ...)."
    )
    container_runtime: Literal["docker", "pyxis", "none"] = Field(
        description="docker (host network), pyxis/enroot (srun --container-image), none (processes on the "
        "host)."
    )
    model_root: AbsPath = Field(
        description="Absolute path where model weights live (mounted into containers)."
    )
    container_image: (
        Annotated[str, shape(REFERENCE, "an image reference", max_length=256, allowed=REFERENCE_WORDS)] | None
    ) = Field(
        None,
        description="docker, engines not the image's (engine-build simulator or cpu): the image the nodes "
        "run instead of the config's, which is then only recorded (the local container runner: an image "
        "made on this machine holding the node's system tools).",
    )
    image_staging: ImageStaging | None = Field(
        None,
        description="docker: how the config's image reaches the nodes without a pull (required where the "
        "engines are the image's: a compute node has no internet, and a pull there costs tens of GB each).",
    )
    container: Container | None = Field(
        None,
        description="docker: devices, limits and capabilities of each node's container; absent: the "
        "known-working MI355X launch's for a GPU runner, nothing extra for a runner of no GPU vendor.",
    )
    container_mounts_from_env: list[EnvName] = Field(
        default_factory=list,
        description="docker: environment variables of the submitting shell, each an absolute host folder "
        "mounted read-only at the same path: software the image expects on the host's file system (the "
        "local container runner: this checkout's tools and its Python). A variable unset or not an "
        "absolute path fails the job before any node starts.",
    )
    node_address: Literal["interface", "slurm-nodeaddr"] = Field(
        "interface",
        description="How a node finds the address it advertises to peers (VLLM_HOST_IP): the IPv4 of "
        "data-plane-interface, or the NodeAddr SLURM knows it by (local cluster: 127.0.0.x per node).",
    )
    data_plane_interface: Ident | None = Field(
        None,
        description="The data-plane network interface: up at host preflight (nic-check), and its IPv4 is "
        "what a node advertises to peers when node-address is interface.",
    )
    loopback: bool = Field(
        False,
        description="Nodes may advertise loopback addresses (all nodes on one host: the local cluster).",
    )
    private_bind: Literal["loopback", "node-address"] = Field(
        "loopback",
        description="Where node-private services (LMCache) listen: 127.0.0.1, or the node's own address "
        "when several nodes share one host's loopback.",
    )
    nic_devices: list[Ident] = Field(
        default_factory=list,
        description="RDMA devices for Mooncake rdma (and SGLang's --disaggregation-ib-device); each must "
        "exist with an active port at host preflight (nic-check).",
    )
    mooncake_registration: Literal["dmabuf", "ibv-reg-mr"] | None = Field(
        None,
        description="How Mooncake registers GPU memory for rdma here, a fact of the site (on AMD, "
        "plain ibv_reg_mr of HIP memory fails with EINVAL on ionic NICs; the dma-buf path crashes in "
        "libhsa-runtime64 on some MI355X/ROCm 7.2 clusters). dmabuf: Mooncake's default; ibv-reg-mr: "
        "MOONCAKE_DISABLE_HIP_DMABUF=1 in the engines' environment. Recorded in lock.json; an AMD runner "
        "must state it before a recipe renders MC_PROTOCOL=rdma for it.",
    )
    rdma_registration_probe: bool = Field(
        True,
        description="A GPU runner whose Mooncake moves KV over rdma: every engine node registers a GPU "
        "buffer through Mooncake, the way mooncake-registration says, before any engine loads its weights "
        "(scripts/rdmaprobe.py). A registration that fails or crashes fails the node in seconds, naming "
        "the other registration to try.",
    )
    rdma_traffic_class: RdmaTrafficClass | None = Field(
        None,
        description="The DSCP and PFC no-drop priority RDMA travels on here (MoRI and Mooncake mark their "
        "packets with them; SGLang over MoRI refuses to render without them). Checked with nic-check.nicctl.",
    )
    nic_check: NicCheck | None = Field(
        None,
        description="Check the data-plane NICs on every node's host before any container starts: the "
        "interface and RDMA devices above up, and with nicctl the NICs' QoS and DCQCN. Unset: no check.",
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)
    teardown: Teardown = Field(default_factory=Teardown)
    failure_report: FailureReport = Field(default_factory=FailureReport)
    ports: Ports = Field(default_factory=Ports)
    benchmark: Benchmark = Field(default_factory=Benchmark)
    ship: dict[ShipName, RelPath] = Field(
        default_factory=dict,
        description="Repository folders copied into the run's recipe folder under these names "
        "(e.g. traces: sim/traces), for what the benchmark reads.",
    )
    engine_env: dict[Engine, dict[EnvName, EnvValue | EnvInt]] = Field(
        default_factory=dict,
        description="Environment exported to every engine of this engine kind here: 64-bit integers, or "
        "printable ASCII without quotes, backslash, '$' or '`'.",
    )
    engine_env_from_settings: dict[Engine, dict[EnvName, SettingName]] = Field(
        default_factory=dict,
        description="Environment exported to the engines from a setting's resolved value (NAME: SETTING).",
    )
    engine_args: dict[Role, list[Arg | EnvInt]] = Field(
        default_factory=dict,
        description="Flags added to the engine command line of a role here, after the recipe's own: what "
        "this hardware needs (a CPU engine's KV-cache size), never what a config setting renders.",
    )
    router_args: dict[Router, list[Arg | EnvInt]] = Field(
        default_factory=dict,
        description="Flags added to a router's command line here (slower engines need longer health "
        "timeouts).",
    )
    lmcache: Lmcache = Field(default_factory=Lmcache)
    gpu_drain: GpuDrain = Field(
        default_factory=GpuDrain,
        description="gpu-vendor amd: the check every node runs at preflight (sysfs, no SMI tool needed).",
    )
    node_setup: NodeSetup | None = Field(
        None,
        description="Install the benchmark client (AIPerf, in no engine image) and, when the router is "
        "pd-proxy, the proxy's pinned server stack (uvicorn, httptools, ...) on rank 0 from the run's "
        "wheelhouse; needed where the image's engines run (engine-build image).",
    )
    mooncake_bootstrap: MooncakeBootstrap = Field(default_factory=MooncakeBootstrap)

    @property
    def container_options(self) -> Container:
        """The container block as it applies: stated, or the default of this runner's GPU vendor."""
        if self.container is not None:
            return self.container
        return NO_CONTAINER_OPTIONS if self.gpu_vendor == "none" else Container()

    @model_validator(mode="after")
    def _ports_distinct(self) -> Self:
        taken: dict[int, str] = {}
        ports = {**self.ports.model_dump(by_alias=True), "mooncake-bootstrap": self.mooncake_bootstrap.port}
        for name, port in ports.items():
            if port in taken:
                raise ValueError(f"ports: {taken[port]} and {name} are both {port}")
            taken[port] = name
        return self

    @model_validator(mode="after")
    def _interface_when_read(self) -> Self:
        if self.node_address == "interface" and self.data_plane_interface is None:
            raise ValueError("node-address: interface needs data-plane-interface")
        return self

    @model_validator(mode="after")
    def _registration_is_stated_once(self) -> Self:
        for engine, env in self.engine_env.items():
            for name, instead in DERIVED_ENV.items():
                if name in env:
                    raise ValueError(f"engine-env.{engine}.{name}: {instead}")
            if "MOONCAKE_DISABLE_HIP_DMABUF" in env:
                raise ValueError(
                    f"engine-env.{engine}.MOONCAKE_DISABLE_HIP_DMABUF: state mooncake-registration instead "
                    "(ibv-reg-mr renders it, and lock.json records it)"
                )
        return self

    @model_validator(mode="after")
    def _nic_check_checks_something(self) -> Self:
        c = self.nic_check
        if c is None:
            return self
        if not (c.nicctl or self.data_plane_interface or self.nic_devices):
            raise ValueError(
                "nic-check has nothing to check: set data-plane-interface, nic-devices or nicctl"
            )
        if not c.nicctl and (c.no_drop_priorities or c.cnp_dscp is not None):
            raise ValueError(
                "nic-check: no-drop-priorities and cnp-dscp are read with nicctl, which is unset"
            )
        tc = self.rdma_traffic_class
        if tc is not None and c.no_drop_priorities and tc.priority not in c.no_drop_priorities:
            raise ValueError(
                f"rdma-traffic-class.priority {tc.priority} is not one of nic-check.no-drop-priorities "
                f"{c.no_drop_priorities}: RDMA must travel on a no-drop priority"
            )
        return self

    @model_validator(mode="after")
    def _engine_args_are_no_settings(self) -> Self:
        """A flag a setting stands for is the config's to set, where lint and the known-issue registry see
        it; parallelism is the config's, addresses the plan's (settings.flag_owner)."""
        from .settings import flag_owner

        for role, args in self.engine_args.items():
            for arg in args:
                owner = flag_owner(str(arg))
                if owner is not None:
                    raise ValueError(f"engine-args.{role}: {arg} comes from {owner}, not the runner")
        return self

    @model_validator(mode="after")
    def _own_image_only_without_image_engines(self) -> Self:
        if self.container_image is not None and (
            self.engine_build == "image" or self.container_runtime != "docker"
        ):
            raise ValueError(
                "container-image replaces the config's image: only with container-runtime docker and engines "
                "that are not the image's (engine-build simulator or cpu); a real cluster runs the config's "
                "image"
            )
        return self

    @model_validator(mode="after")
    def _image_engines_get_their_tools(self) -> Self:
        if self.engine_build == "image" and self.node_setup is None:
            raise ValueError(
                "engine-build image needs node-setup: the benchmark client (AIPerf) is in no engine image, "
                "and nothing may be fetched on the nodes"
            )
        return self

    @model_validator(mode="after")
    def _images_are_staged(self) -> Self:
        """A compute node fetches nothing: docker's default pull policy would pull the image on every node
        (impossible without internet, tens of GB a node with it)."""
        if self.image_staging is not None and self.container_runtime != "docker":
            raise ValueError("image-staging is for container-runtime docker")
        if self.container_runtime == "docker" and self.image_staging is None:
            raise ValueError(
                "container-runtime docker needs image-staging: archive (a folder the submit host and the "
                "nodes share: make submit saves the image there, a node loads it) or preloaded: true (the "
                "site puts it on every node); the containers run with --pull never"
            )
        return self

    @model_validator(mode="after")
    def _root_is_declared(self) -> Self:
        o = self.container
        if o is None:
            return self
        if o.user == "root" and o.root_reason is None:
            raise ValueError(
                "container.user root needs container.root-reason: why this runner's containers cannot run as "
                "the submitting user (it is said on its recipe pages and in every job's output)"
            )
        if o.user != "root" and o.root_reason is not None:
            raise ValueError("container.root-reason is for container.user root")
        return self

    @model_validator(mode="after")
    def _env_mounts_need_docker(self) -> Self:
        if self.container_mounts_from_env and self.container_runtime != "docker":
            raise ValueError("container-mounts-from-env needs container-runtime docker")
        return self

    @model_validator(mode="after")
    def _cpu_engines_name_their_venv(self) -> Self:
        if (self.engine_build == "cpu") != (self.engine_venv is not None):
            raise ValueError(
                "engine-build cpu and engine-venv go together: the venv is where its engines are"
            )
        return self

    @model_validator(mode="after")
    def _connector_module_only_on_local_runners(self) -> Self:
        """The connector shim makes upstream code run on this host's CPU engines; on a runner whose engines
        are an image's, or whose nodes are separate machines, it would only hide a broken image."""
        shim = self.kv_connector_module
        if shim is None:
            return self
        if self.engine_build != "cpu" or not self.loopback or self.container_runtime != "none":
            raise ValueError(
                "kv-connector-module is a local runner's shim (MooncakeConnector on CPU): only with "
                "engine-build cpu, container-runtime none and loopback true; a real cluster runs the "
                "image's own connectors"
            )
        if shim.shipped not in self.ship:
            raise ValueError(f"kv-connector-module.shipped {shim.shipped!r} is not a ship folder")
        return self

    @model_validator(mode="after")
    def _cpu_lmcache_serves_engine_driven(self) -> Self:
        """The mismatch hangs start-up (docs/upstream-facts.md#gpu-less-engines): refused before anything
        starts."""
        if self.engine_build == "cpu" and self.lmcache.transfer_mode in (None, "lmcache_driven"):
            raise ValueError(
                "engine-build cpu: lmcache.transfer-mode must serve engine-driven transfers (auto or "
                "engine_driven); the server's default, lmcache_driven, answers a CPU engine's registration "
                "'No handler registered' and the prefill hangs at start"
            )
        return self

    @model_validator(mode="after")
    def _benchmark_files_are_shipped(self) -> Self:
        path = self.benchmark.tokenizer
        if path is not None and path.split("/")[0] not in self.ship:
            raise ValueError(
                f"benchmark.tokenizer {path!r} is not under a shipped folder "
                f"(ship: {', '.join(self.ship) or 'nothing'})"
            )
        return self

    @model_validator(mode="after")
    def _made_up_corpus_only_locally(self) -> Self:
        """A made-up corpus is a local runner's stand-in: on a cluster whose engines are an image's, results
        must come from the pinned corpus."""
        if self.benchmark.corpus == "made-up" and self.engine_build == "image":
            raise ValueError(
                "benchmark.corpus made-up is a local runner's stand-in (engine-build simulator or cpu); a "
                "runner of real engines replays the pinned corpus (corpus: pinned)"
            )
        return self

    @model_validator(mode="after")
    def _graded_eval_on_real_engines(self) -> Self:
        """Real engines' answers are graded: a made-up question set or no eval is a local runner's alone."""
        run = self.benchmark.accuracy
        if self.engine_build == "image" and (run.run == "off" or run.eval_set == "made-up"):
            raise ValueError(
                "benchmark.accuracy: a runner of real engines grades their answers on the published "
                "question set (run: selected, eval-set: published); off and made-up are a local runner's "
                "(engine-build simulator or cpu)"
            )
        return self


class LaunchProfiles(Model):
    profiles: dict[Label, LaunchProfile] = Field(
        description="Runner label (as in runners.yaml, same shape) -> launch facts."
    )

    @model_validator(mode="after")
    def _aliases_name_one_profile(self) -> Self:
        owner: dict[str, str] = {}
        for label, profile in self.profiles.items():
            for alias in profile.aliases:
                if alias in self.profiles:
                    raise ValueError(f"alias {alias!r} of {label!r} is a profile of its own")
                if alias in owner:
                    raise ValueError(f"alias {alias!r} is claimed by {owner[alias]!r} and {label!r}")
                owner[alias] = label
        return self

    def label_of(self, runner: str) -> str:
        """The profile label a config's runner names: itself, or the profile it is an alias of."""
        if runner in self.profiles:
            return runner
        return next((label for label, p in self.profiles.items() if runner in p.aliases), runner)
