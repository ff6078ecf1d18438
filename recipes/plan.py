"""The frozen Plan: everything a launch needs, decided and resolved, as plain data for the templates."""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any

from .words import Argv, Ref, Word, shown

if TYPE_CHECKING:
    # The three below are dataclasses.field with a plan.json view in its metadata; a type checker reads them
    # as field itself, so it knows which fields have defaults.
    from dataclasses import field as _argv
    from dataclasses import field as _pairs
    from dataclasses import field as _word

    from schemas.dram import DramBudget
else:

    def _argv(**kw):
        """A field holding an argv (a tuple of Words): plan.json shows it as a list of strings."""
        return field(metadata={"json": "argv"}, **kw)

    def _word(**kw):
        """A field holding one Word (or None): plan.json shows it as one string."""
        return field(metadata={"json": "word"}, **kw)

    def _pairs(**kw):
        """A field holding (NAME, value) pairs: plan.json shows them as an object."""
        return field(metadata={"json": "pairs"}, **kw)


@dataclass(frozen=True)
class Ports:
    """Every port of a job, in one place, from the runner's launch profile (its ports and
    mooncake-bootstrap). Each node has its own address, so nodes reuse them."""

    engine: int  # every engine's HTTP API (vLLM, SGLang or ATOM)
    mooncake_bootstrap: int
    lmcache: int
    lmcache_http: int
    router: int
    router_metrics: int
    barrier: int


@dataclass(frozen=True)
class Timeouts:
    """Seconds, from the runner's launch profile (schemas/launch.py says what each one bounds)."""

    barrier: int
    done: int  # non-leaders wait this long for rank 0 to finish the benchmark: the job's time limit
    lmcache_ready: int
    engine_ready: int
    router_ready: int
    stall: int  # a starting service with no log growth and no CPU time this long fails its node
    stopped: int  # a service stopped (state T) this long fails its node
    serving_stall: int  # requests in flight and no token this long, while a benchmark runs: failed
    cache_flush: int  # each engine emptying its caches before an agentic SGLang concurrency
    poll_interval: int  # the node's watcher checks its services this often


@dataclass(frozen=True)
class Teardown:
    """Seconds a node's teardown gives its processes, from the runner's launch profile."""

    grace: int  # TERM to SIGKILL after a clean run
    fail_grace: int  # the same when failing
    container_stop: int  # docker stop --time of a node's container (container-runtime docker)


@dataclass(frozen=True)
class FailureReport:
    """How many log lines a failure report shows, from the runner's launch profile."""

    log_lines: int  # of the failed service's log
    router_warning_lines: int  # of the router's warnings, after a result fails its check


@dataclass(frozen=True)
class Service:
    """A long-running process on a node: started, waited healthy, watched until teardown."""

    name: str
    argv: Argv = _argv()
    ready_url: Word | None = _word()  # None: nothing to wait for (a watcher), only kept alive
    ready_timeout: int
    ready_expect: tuple[str, ...] = ()  # KEY=VALUE checks on the health JSON


@dataclass(frozen=True)
class Node:
    rank: int
    role: str  # prefill | decode | server (the one engine of a single-node job)
    index: int  # position among the nodes of its role


@dataclass(frozen=True)
class Pinned:
    """A component the image may lack or carry in another build: its command, package and version."""

    command: str
    dist: str
    version: str
    imports: tuple[str, ...] = ()  # modules its command's Python must import (a compiled part that loads)
    source: str = ""  # where it comes from (the dry run and the recipe page say it)


@dataclass(frozen=True)
class SetupSet:
    """What nodes install from the run's wheelhouse (recipes/nodesetup): the run holds its hashed
    requirements as recipe/setup/<name>.txt."""

    name: str  # bench (a pyproject.toml extra) | lmcache (a site wheel)
    where: str  # leader | prefill: the nodes that install it
    layer: bool  # False: an environment of its own (a tool); True: on the image's Python path (a library)
    commands: tuple[str, ...]  # what it puts on PATH
    requirements_sha256: str  # of recipe/setup/<name>.txt
    lock: str | None = None  # a tool set's lock in recipes/nodesetup/locks/
    source: str | None = None  # a site wheel: the path or URL make submit takes it from
    version: str = ""  # a site wheel's
    sha256: str = ""  # a site wheel's


@dataclass(frozen=True)
class NodeSetup:
    python: str  # MAJOR.MINOR of the image's python3, checked before anything installs
    platform: str  # the wheels' manylinux platform
    root: str | None  # where nodes keep environments by lock hash; None: the run folder
    sets: tuple[SetupSet, ...]


@dataclass(frozen=True)
class Role:
    """What every node of a role runs: services started in order, each healthy before the next."""

    name: str
    services: tuple[Service, ...]
    commands: Argv = _argv()  # programs its services need on PATH (checked at preflight)
    listens: Argv = _argv()  # SERVICE=ADDR:PORT its services will listen on (free before anything starts)
    pinned: tuple[Pinned, ...] = ()  # components whose exact version preflight checks


@dataclass(frozen=True)
class Benchmark:
    concurrency: int
    result: str  # <config>_<variant>_<name>.json
    argv: Argv = _argv()
    max_error_rate: str  # a result with more failed requests fails the step
    min_duration: int  # seconds: a result that measured less is no measurement (half the requested)
    name: str = ""  # conc<C> in a sweep, soak<NNN> in a soak: its step, artifact and metrics folder
    # run first, in the same step: the engines' caches emptied (agentic SGLang)
    before: Argv = _argv(default=())
    # results.py check's words besides the thresholds: the client's scenario lock and its expected verdict
    gate: Argv = _argv(default=())


@dataclass(frozen=True)
class Staged:
    """An input the job reads that is not rendered, staged by `make submit` (recipes/staging.py), hashed into
    lock.json and checked against it on rank 0 at preflight: nothing is fetched on a compute node."""

    name: str  # its key in lock.json's inputs
    # shipped: path under the run's recipe folder | hf-dataset: AIPerf's public dataset `source` | eval-set:
    # the graded eval's questions (`source`: the public set, or made-up), written under the recipe folder
    kind: str
    path: str  # shipped: relative path; hf-dataset: the site's Hugging Face cache it is staged into
    source: str = ""  # hf-dataset: the --public-dataset name the client reads it by


@dataclass(frozen=True)
class Accuracy:
    """The job's graded eval (recipes/accuracy.py): through the router after the sweep, against the model's
    threshold."""

    eval: str  # gsm8k
    threshold: float  # the lowest passing score (configs/models.yaml)
    concurrency: int  # lm-eval's concurrent requests: the point's highest concurrency
    limit: int | None  # questions asked; None: the whole test split
    eval_set: str  # published | made-up (the local runners: the score means nothing)
    seconds: int  # its bound
    argv: Argv


@dataclass(frozen=True)
class ClientScenario:
    """The benchmark client's scenario lock, as the job expects its outcome (scripts/results.py checks each
    result against it; make check-engines runs the client's own resolution against it)."""

    name: str  # AIPerf --scenario
    corpus: str  # pinned | made-up (a local stand-in under the pinned name: never a submission)
    dataset: str  # the --public-dataset it replays
    submission: bool  # whether the run can be stamped a valid submission (full duration, no override)
    allowed_violations: tuple[str, ...] = ()  # lock violations --unsafe-override downgrades, knowingly


@dataclass(frozen=True)
class Slurm:
    job_name: str  # prefix; submit appends a unique run id
    partition: str
    account: str | None
    time_limit: str
    nodes: int
    extras: tuple[tuple[str, str], ...] = ()  # (sbatch option, value): the site's gres, qos, ...


@dataclass(frozen=True)
class Container:
    runtime: str  # docker | pyxis | none
    image: str
    gpu_vendor: str  # amd | nvidia | none
    mounts: tuple[str, ...]  # absolute host paths mounted at the same place
    env_mounts: tuple[str, ...] = ()  # names of host variables holding folders mounted read-only there
    read_only: tuple[str, ...] = ()  # absolute host paths mounted read-only at the same place (trace cache)
    # docker run words of the runner's container block (limits, capabilities, devices)
    options: tuple[str, ...] = ()
    # scripts/container.sh's own words, decided on the node's host: user and groups, RDMA devices, host files
    host_args: tuple[str, ...] = ()
    # the host check's words for the image: how a node lacking it gets it (docker); () no check
    staging: tuple[str, ...] = ()
    image_archive: str | None = None  # the shared folder make submit saves the image into (image-staging)
    root_reason: str | None = None  # containers run as root here (the runner's declared fallback): why


@dataclass(frozen=True)
class Plan:
    config_key: str
    variant: str
    scenario: str
    model: str
    image: str  # the config's image: the engine build it names (a local runner may run its own container)
    framework: str
    engine: str  # vllm | sglang: the node script is server_<engine>.sh
    engine_build: str  # image | simulator: which engines run (the runner's launch profile)
    mode: str  # sweep (one result per concurrency) | soak (varied phases while watching the engines)
    router_name: str | None  # None: a single-node job, requests go to its one server
    runner: str
    slurm: Slurm
    container: Container
    ports: Ports
    timeouts: Timeouts
    teardown: Teardown
    failure_report: FailureReport
    address_args: Argv = _argv()  # sync.py addr options that find a node's data-plane address
    node_local_addr: Word | None = _word()  # where node-private services (LMCache) bind; None: none
    env_exported: tuple[tuple[str, str], ...] = _pairs()  # (NAME, value): read by engines
    env_shell: tuple[tuple[str, object], ...] = _pairs()  # (NAME, value): knobs the node script expands
    shell_notes: tuple[str, ...]  # env.sh's comment lines above them: how the derived ones are derived
    # folders the image's Python imports from first (its engine build's); () none
    python_path_first: tuple[str, ...]
    # folders the image's shared libraries load from first (its build's); () none
    library_path_first: tuple[str, ...]
    dram_budget: DramBudget | None  # what the host-DRAM KV tier is sized from (LMCache's L1, HiCache)
    nodes: tuple[Node, ...]  # by rank
    roles: tuple[Role, ...]
    router: Service | None
    leader_listens: Argv = _argv()  # SERVICE=ADDR:PORT of the router (rank 0)
    leader_commands: Argv = _argv()  # what rank 0 needs on PATH besides its role's: router, benchmark
    leader_pinned: tuple[Pinned, ...]  # rank 0's components whose exact version preflight checks
    node_setup: NodeSetup | None  # tools the image lacks, installed from the run's wheelhouse
    # AMD: the most of any GPU's VRAM in use at preflight, and seconds to wait for it; None: not checked
    gpu_drain: tuple[float, int] | None
    host_check: Argv = _argv()  # srun before it, on every node's host: no leftovers, its NICs
    launch: Argv = _argv()  # srun, one node script per node
    cleanup: Argv = _argv()  # srun after it, on every node (docker: the containers a killed client left)
    benchmarks: tuple[Benchmark, ...]
    metrics: Argv = _argv()  # NAME=URL: every engine's and the router's /metrics, saved after each run
    smoke: Argv = _argv()  # a request through the router, and proof its KV moved prefill -> decode
    # greedy answers through the router equal a prefill engine's served whole (vLLM PD runs)
    same_answers: Argv | None = _argv()
    l2_proof: Argv | None = _argv()  # LMCache served hits during the sweep (agentic runs with LMCache)
    # no engine served a cache hit before the point (agentic vLLM runs): it starts cold
    cold_proof: Argv | None = _argv()
    accuracy: Accuracy | None  # the graded eval, after the sweep (where the selection picks this job)
    # (name, repository folder): copied into the run's recipe/<name>/
    shipped: tuple[tuple[str, str], ...] = _pairs()
    gpus_per_node: int = 0
    # what the run's numbers depend on, for the lock file
    components: tuple[tuple[str, str], ...] = _pairs(default=())
    config_sha256: str = ""  # of the validated config entry, for the lock file
    # known-issue workarounds the config records (they change performance)
    workarounds: tuple[dict[str, Any], ...] = ()
    # why these numbers compare only with runs that share them (simulated MTP acceptance)
    caveats: tuple[str, ...] = ()
    # why these numbers do not compare with InferenceX's for the same entry (its fixed-seq-len client sends
    # another request shape); None: the client is InferenceX's own (agentic: AIPerf under the scenario lock)
    not_comparable_with_inferencex: str | None = None
    # {issue, title, regex, fix} the node-side watcher fails the job on
    log_signatures: tuple[dict[str, str], ...] = ()
    nic_check: bool = False  # the host check includes the runner's NICs (its nic-check)
    # inputs make submit stages and hashes into lock.json (the corpus, a shipped tokenizer)
    staged: tuple[Staged, ...] = ()
    # the client's scenario lock and what its outcome must be (agentic runs); None: no scenario
    client_scenario: ClientScenario | None = None
    # argv each: rank 0's preflight of the staged inputs and the client's tokenizer
    input_checks: tuple[Argv, ...] = ()
    # sync.py rdma-register's words: Mooncake registers GPU memory over RDMA on every node; None: no probe
    rdma_probe: Argv | None = _argv(default=None)

    @property
    def script(self) -> str:
        return f"server_{self.engine}.sh"

    def to_json(self) -> dict[str, Any]:
        """plan.json: the whole Plan as data for reviewers and node-side tools. Command lines are lists of
        strings; `${NAME}` in them is a bash variable known only on the node (its address, a peer's), `$$`
        a literal `$`."""
        return {"format": PLAN_FORMAT, **_data(self)}

    @property
    def prefill_ranks(self) -> tuple[int, ...]:
        return tuple(n.rank for n in self.nodes if n.role == "prefill")

    @property
    def decode_ranks(self) -> tuple[int, ...]:
        return tuple(n.rank for n in self.nodes if n.role == "decode")


PLAN_FORMAT = "plan.json v2: argv as strings; ${NAME} = a node's bash variable, $$ = a literal $"


def _data(value: object) -> Any:
    """`value` as JSON data: dataclasses as objects, Refs as ${NAME}, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _field_data(f, getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Ref):
        return shown((value,))
    if isinstance(value, (list, tuple)):
        return [_data(v) for v in value]
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items()}
    return value


def _field_data(f: Field[Any], value: Any) -> Any:
    kind = f.metadata.get("json")
    if value is None or kind is None:
        return _data(value)
    if kind == "argv":
        return [shown(w) for w in value]
    if kind == "word":
        return shown(value)
    return {name: _data(v) for name, v in value}  # pairs
