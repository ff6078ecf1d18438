"""The frozen Plan: everything a launch needs, decided and resolved, as plain data for the templates."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .words import Ref


@dataclass(frozen=True)
class Ports:
    """Every port of a job, in one place. Each node has its own address, so nodes reuse them."""

    vllm: int = 8000
    mooncake_bootstrap: int = 8998
    lmcache: int = 5555
    lmcache_http: int = 8080
    router: int = 30000
    router_metrics: int = 29000
    barrier: int = 29500


@dataclass(frozen=True)
class Timeouts:
    """Seconds. Real engines load ~557 GB of weights; simulated ones start at once."""

    barrier: int
    done: int  # non-leaders wait this long for rank 0 to finish the benchmark: the job's time limit
    lmcache_ready: int
    engine_ready: int
    router_ready: int
    poll_interval: int = 1


@dataclass(frozen=True)
class Service:
    """A long-running process on a node: started, waited healthy, watched until teardown."""

    name: str
    argv: tuple  # of Words
    ready_url: tuple | None  # a Word; None: nothing to wait for (a watcher), only kept alive
    ready_timeout: int
    ready_expect: tuple = ()  # KEY=VALUE checks on the health JSON


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


@dataclass(frozen=True)
class Role:
    """What every node of a role runs: services started in order, each healthy before the next."""

    name: str
    services: tuple  # of Service
    commands: tuple  # programs its services need on PATH (checked at preflight)
    pinned: tuple = ()  # of Pinned: components whose exact version preflight checks


@dataclass(frozen=True)
class Benchmark:
    concurrency: int
    result: str  # <config>_<variant>_<name>.json
    argv: tuple  # of Words
    max_error_rate: str  # a result with more failed requests fails the step
    min_duration: int  # seconds: a result that measured less is no measurement (half the requested)
    name: str = ""  # conc<C> in a sweep, soak<NNN> in a soak: its step, artifact and metrics folder


@dataclass(frozen=True)
class Slurm:
    job_name: str  # prefix; submit appends a unique run id
    partition: str
    account: str | None
    time_limit: str
    nodes: int


@dataclass(frozen=True)
class Container:
    runtime: str  # docker | pyxis | none
    image: str
    gpu_vendor: str  # amd | nvidia | none
    mounts: tuple  # absolute host paths mounted at the same place


@dataclass(frozen=True)
class Plan:
    config_key: str
    variant: str
    scenario: str
    model: str
    framework: str
    engine: str  # vllm | sglang: the node script is server_<engine>.sh
    mode: str  # sweep (one result per concurrency) | soak (varied phases while watching the engines)
    router_name: str | None  # None: a single-node job, requests go to its one server
    runner: str
    slurm: Slurm
    container: Container
    ports: Ports
    timeouts: Timeouts
    address_args: tuple  # sync.py addr options that find a node's data-plane address
    node_local_addr: Ref | str | None  # where node-private services (LMCache) bind; None: there are none
    env_exported: tuple  # (NAME, value): read by engines
    env_shell: tuple  # (NAME, value): knobs the node script expands
    nodes: tuple  # of Node, by rank
    roles: tuple  # of Role
    router: Service | None
    leader_commands: tuple  # what rank 0 needs on PATH besides its role's: router, benchmark client
    launch: tuple  # the srun argv (Words) that starts one node script per node
    benchmarks: tuple  # of Benchmark
    metrics: tuple  # NAME=URL Words: every engine's and the router's /metrics, saved after the benchmarks
    smoke: tuple  # argv: a request through the router, and proof its KV moved prefill -> decode
    l2_proof: tuple | None  # argv: LMCache served hits during the sweep (agentic runs with LMCache)
    gpus_per_node: int = 0
    components: tuple = ()  # (name, version) of what the run's numbers depend on, for the lock file
    config_sha256: str = ""  # of the validated config entry, for the lock file
    workarounds: tuple = ()  # known-issue workarounds the config records (they change performance)
    log_signatures: tuple = ()  # {issue, title, regex, fix} the node-side watcher fails the job on

    @property
    def script(self) -> str:
        return f"server_{self.engine}.sh"

    def to_json(self) -> dict:
        """plan.json: the typed hand-off to node-side tools; Refs appear as {"ref": VAR}."""
        return _jsonable(asdict(self))

    @property
    def prefill_ranks(self) -> tuple:
        return tuple(n.rank for n in self.nodes if n.role == "prefill")

    @property
    def decode_ranks(self) -> tuple:
        return tuple(n.rank for n in self.nodes if n.role == "decode")


def _jsonable(value):
    if isinstance(value, Ref):
        return {"ref": value.var}
    if isinstance(value, dict):
        if set(value) == {f.name for f in fields(Ref)}:
            return {"ref": value["var"]}
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
