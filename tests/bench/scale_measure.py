"""What `make bench-scale` reads from one job's run folder: the nodes' marks (state/<node>/marks, written by
scripts/lib/node.sh: `<epoch> <what>` per step entered, barrier released, service ready), the engines' pid
files (their mtime: when start_service started them), the benchmark client's request records and the
nodes' outcome files. Pure functions of files: no cluster needed to test them."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scripts import statefiles

ENGINE = "vllm"  # the service name of the engine on every prefill and decode node
START, READY, FINISH = "start", "ready", "finish"  # the node script's barriers
LEADER = "sim1"  # rank 0: router and benchmark
CLOCK_TICKS = 100  # /proc's CPU times are in 1/100 s (USER_HZ) on Linux
_REQUEST_START = re.compile(rb'"request_start_ns"\s*:\s*(\d+)')
_REQUEST_END = re.compile(rb'"request_end_ns"\s*:\s*(\d+)')


def read_marks(text: str) -> list[tuple[float, str]]:
    """`<epoch> <cpu ticks> <what>` lines as (epoch, what) in order; a torn or foreign line is skipped
    (marks are best effort)."""
    return [(at, what) for at, _, what in read_marks_cpu(text)]


def read_marks_cpu(text: str) -> list[tuple[float, int, str]]:
    """(epoch, the node script's CPU ticks so far, what) per mark line."""
    out = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        try:
            when, ticks = float(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            continue
        if len(parts) == 3 and parts[2]:  # a line cut short while written has no name
            out.append((when, ticks, parts[2]))
    return out


def first(marks: list[tuple[float, str]], what: str) -> float | None:
    return next((at for at, name in marks if name == what), None)


def node_marks(run_dir: Path) -> dict[str, list[tuple[float, str]]]:
    """Every node's marks, by node name."""
    return {node: [(at, what) for at, _, what in m] for node, m in node_marks_cpu(run_dir).items()}


def node_marks_cpu(run_dir: Path) -> dict[str, list[tuple[float, int, str]]]:
    state = run_dir / statefiles.FOLDER
    return {
        path.parent.name: read_marks_cpu(path.read_text(errors="replace"))
        for path in sorted(state.glob(f"*/{statefiles.MARKS}"))
    }


def cpu_before_engine(run_dir: Path) -> dict[str, float]:
    """Per node, the CPU seconds its script used (itself and the commands it waited for) from its start to
    entering its engine step: the node's own start work, the same on every node of any job size."""
    out = {}
    for node, marks in node_marks_cpu(run_dir).items():
        ticks = next((t for _, t, w in marks if w.startswith("step ") and w.endswith(f" {ENGINE}")), None)
        if ticks is not None:
            out[node] = ticks / CLOCK_TICKS
    return out


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def request_span(records: bytes) -> tuple[float | None, float | None]:
    """(first request start, last request end) in epoch seconds from AIPerf's profile_export.jsonl
    (request_start_ns / request_end_ns per record); (None, None) without records."""
    starts = [int(m) for m in _REQUEST_START.findall(records)]
    ends = [int(m) for m in _REQUEST_END.findall(records)]
    return (min(starts) / 1e9 if starts else None, max(ends) / 1e9 if ends else None)


def _span(values: list[float]) -> tuple[float | None, float | None]:
    return (min(values), max(values)) if values else (None, None)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


@dataclass(frozen=True)
class LaunchCpu:
    """CPU ticks per node of the job's processes (tests/bench/scale_memory.job_cpu) read once every
    engine had been launched, and READ_AT: when that /proc read ended."""

    ticks: dict[str, int]
    read_at: float


@dataclass
class Timings:
    """One job's phases in seconds (None: a mark was missing). See DEFINITIONS."""

    nodes: int
    launch_skew_s: float | None = None
    preflight_s: float | None = None
    barrier_s: float | None = None
    barrier_fanin_s: float | None = None
    barrier_release_s: float | None = None
    engine_own_max_s: float | None = None
    engine_own_median_s: float | None = None
    engine_spawn_max_s: float | None = None
    all_ready_s: float | None = None
    overhead_s: float | None = None
    ready_barrier_s: float | None = None
    router_ready_s: float | None = None
    first_request_s: float | None = None
    smoke_and_scrape_s: float | None = None
    first_benchmark_request_s: float | None = None
    after_benchmark_s: float | None = None
    teardown_s: float | None = None
    nodes_done_to_end_s: float | None = None
    node_cpu_s: float | None = None
    leader_cpu_s: float | None = None
    script_floor_s: float | None = None
    launch_cpu_s: float | None = None
    launch_read_late_s: float | None = None
    cpu_floor_s: float | None = None
    shared_cpu_s: float | None = None
    overhead_unshared_s: float | None = None
    overhead_unshared_scripts_s: float | None = None
    host_busy: float | None = None
    missing: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


DEFINITIONS = {
    "job_start": "the first node script's start (its `init` mark, scripts/lib/node.sh)",
    "launch_skew_s": "last node script's start - first's (srun starting N tasks)",
    "preflight_s": "job start -> the last node entering the start barrier (preflight, address, ports)",
    "barrier_s": "start barrier: the first node entering it -> the last node released",
    "barrier_fanin_s": "first node entering the start barrier -> the last one entering it",
    "barrier_release_s": "the last node entering the start barrier -> the last node released",
    "engine_own_max_s": "the slowest engine's own start: its process start (pid file mtime) -> /health 200 "
    "(its `ready vllm` mark)",
    "engine_spawn_max_s": "largest gap from a node entering its engine step to the engine's process start",
    "all_ready_s": "job start -> every engine's /health 200",
    "overhead_s": "all_ready_s - engine_own_max_s: what the job costs on top of the engines' own start",
    "ready_barrier_s": "the last engine ready -> the leader released from the ready barrier",
    "router_ready_s": "the leader's router step -> the router's /health with every backend healthy",
    "first_request_s": "job start -> the first request through the router (the smoke, its step's start)",
    "smoke_and_scrape_s": "smoke step -> benchmark step: smoke + KV proof, N engines' metrics scraped, "
    "token watchdog started",
    "first_benchmark_request_s": "job start -> AIPerf's first request (request_start_ns)",
    "after_benchmark_s": "AIPerf's last answer -> the leader entering the finish barrier (client exit, "
    "result gate, N engines' metrics scraped)",
    "teardown_s": "done signal (the leader released from the finish barrier) -> whole job end",
    "nodes_done_to_end_s": "the last node script's end (latest outcome file) -> whole job end (srun, "
    "outcome.py, slurmctld)",
    "node_cpu_s": "median over the nodes other than the leader: CPU seconds of the node script (itself and "
    "the commands it waited for) from its start to its engine step",
    "leader_cpu_s": "the same on the leader (its preflight checks the inputs and the benchmark client)",
    "script_floor_s": "the node scripts' CPU before their engines (node_cpu_s of every node), summed, over "
    "this host's CPUs: the part of cpu_floor_s the node scripts' own steps do",
    "launch_cpu_s": "median over the nodes other than the leader: CPU seconds of every process of the node's "
    "job (its slurmstepd, the node script, all it started: tools, watchers, the engine) when the last engine "
    "was launched",
    "launch_read_late_s": "how long after the last engine's launch (its pid file) the bench read that CPU",
    "cpu_floor_s": "every node's launch CPU, summed, over this host's CPUs, less launch_read_late_s (what "
    "the host's CPUs can have done after the launch, before the read): the least time this host needs for "
    "work that a real cluster does on every node at once, each on its own CPUs",
    "shared_cpu_s": "cpu_floor_s - the largest node's launch CPU: the least time the overhead grows by "
    "because N nodes share this host's CPUs (on a cluster each node has its own)",
    "overhead_unshared_s": "overhead_s - shared_cpu_s, and at least the largest node script's CPU before "
    "its engine: the job's overhead without what sharing one host's CPUs adds (an estimate: what the other "
    "nodes' work filled of the slowest node's own waits is taken off too; it is a difference of two large "
    "numbers at 32 nodes, so runs spread by a second there)",
    "overhead_unshared_scripts_s": "the same with only the node scripts' CPU taken as shared (script_floor_s "
    "- the largest node script's): counts none of the watchers', engines' and slurmstepds' CPU, so it takes "
    "off less (how this bench estimated it before)",
    "host_busy": "the share of this host's CPU time busy from job start to every engine ready (/proc/stat, "
    "sampled by the bench): near 1, the job's start waited for CPU, not for anything of its own",
}


def timings(
    run_dir: Path,
    nodes: int,
    job_end: float | None,
    cpus: int = 1,
    cpu_samples: list[tuple[float, int, int]] | None = None,
    launch: LaunchCpu | None = None,
) -> Timings:
    """The phases of a job that ran to its end, from its run folder; JOB_END: when the bench saw it end;
    CPUS: the host's (for the CPU floor); CPU_SAMPLES: the host's CPU times as the bench sampled them
    (epoch, busy ticks, total ticks); LAUNCH: the nodes' CPU when the last engine was launched."""
    t = Timings(nodes)
    cpu = cpu_before_engine(run_dir)
    t.node_cpu_s = _median_node(cpu)
    t.leader_cpu_s = cpu.get(LEADER)
    t.script_floor_s = sum(cpu.values()) / cpus if cpu else None
    marks = node_marks(run_dir)
    if len(marks) != nodes:
        t.missing.append(f"marks of {len(marks)} of {nodes} nodes")
    inits = [at for m in marks.values() if (at := first(m, "init")) is not None]
    start, last_init = _span(inits)
    t.launch_skew_s = _diff(last_init, start)
    entered = [at for m in marks.values() if (at := first(m, f"step {START} barrier")) is not None]
    released = [at for m in marks.values() if (at := first(m, f"released {START}")) is not None]
    first_in, last_in = _span(entered)
    _, last_out = _span(released)
    t.preflight_s = _diff(last_in, start)
    t.barrier_s = _diff(last_out, first_in)
    t.barrier_fanin_s = _diff(last_in, first_in)
    t.barrier_release_s = _diff(last_out, last_in)
    own, spawn, ready_at, launched = [], [], [], []
    for node, m in marks.items():
        ready = first(m, f"ready {ENGINE}")
        began = _mtime(run_dir / statefiles.FOLDER / node / f"{ENGINE}{statefiles.PID_SUFFIX}")
        stepped = next((at for at, w in m if w.startswith("step ") and w.endswith(f" {ENGINE}")), None)
        if ready is None or began is None:
            t.missing.append(f"{node}: engine start or ready")
            continue
        own.append(ready - began)
        ready_at.append(ready)
        launched.append(began)
        if stepped is not None:
            spawn.append(began - stepped)
    if own:
        t.engine_own_max_s = max(own)
        t.engine_own_median_s = sorted(own)[len(own) // 2]
        t.engine_spawn_max_s = max(spawn) if spawn else None
        t.all_ready_s = _diff(max(ready_at), start)
        t.overhead_s = None if t.all_ready_s is None else t.all_ready_s - t.engine_own_max_s
        _floor(t, launch, cpus, len(marks), max(launched) if launched else None)
        # Never below the CPU the busiest node script spent before its engine: on a cluster too, not every
        # engine is launched before that work is done (taking off what the others did can overshoot by the
        # waits of that node which their work filled here).
        least = max(cpu.values(), default=0.0)
        t.overhead_unshared_s = _at_least(_diff(t.overhead_s, t.shared_cpu_s), least)
        scripts_shared = None if t.script_floor_s is None else max(0.0, t.script_floor_s - least)
        t.overhead_unshared_scripts_s = _at_least(_diff(t.overhead_s, scripts_shared), least)
        t.host_busy = busy_share(cpu_samples or [], start, max(ready_at))
    lead = marks.get(LEADER, [])
    t.ready_barrier_s = _diff(first(lead, f"released {READY}"), max(ready_at) if ready_at else None)
    t.router_ready_s = _diff(first(lead, "ready router"), first(lead, "step router"))
    smoke = next((at for at, w in lead if w.startswith("step smoke")), None)
    bench = next((at for at, w in lead if w.startswith("step benchmark")), None)
    t.first_request_s = _diff(smoke, start)
    t.smoke_and_scrape_s = _diff(bench, smoke)
    records = b"".join(p.read_bytes() for p in sorted((run_dir / "results").glob("*/profile_export.jsonl")))
    req_first, req_last = request_span(records)
    t.first_benchmark_request_s = _diff(req_first, start)
    t.after_benchmark_s = _diff(first(lead, f"step {FINISH} barrier"), req_last)
    t.teardown_s = _diff(job_end, first(lead, f"released {FINISH}"))
    outcomes = [m for p in run_dir.glob(f"{statefiles.FOLDER}/*/{statefiles.OUTCOME}") if (m := _mtime(p))]
    t.nodes_done_to_end_s = _diff(job_end, max(outcomes) if outcomes else None)
    return t


def _median_node(by_node: dict[str, float]) -> float | None:
    """The median (the upper one of an even count) over the nodes other than the leader."""
    others = sorted(v for n, v in by_node.items() if n != LEADER)
    return others[len(others) // 2] if others else None


def _at_least(value: float | None, least: float) -> float | None:
    return None if value is None else max(value, least)


def _floor(t: Timings, launch: LaunchCpu | None, cpus: int, count: int, last_launch: float | None) -> None:
    """cpu_floor_s and shared_cpu_s from LAUNCH (missing without it, or without every node in it)."""
    if launch is None or last_launch is None or len(launch.ticks) < count:
        t.missing.append("every node's CPU at the last engine's launch")
        return
    seconds = {node: ticks / CLOCK_TICKS for node, ticks in launch.ticks.items()}
    t.launch_cpu_s = _median_node(seconds)
    t.launch_read_late_s = max(0.0, launch.read_at - last_launch)
    t.cpu_floor_s = max(0.0, sum(seconds.values()) / cpus - t.launch_read_late_s)
    t.shared_cpu_s = max(0.0, t.cpu_floor_s - max(seconds.values()))


def leader_timeline(run_dir: Path) -> list[tuple[float, str]]:
    """The leader's marks as seconds from the job start: where rank 0's serial steps spend their time."""
    marks = node_marks(run_dir)
    inits = [at for m in marks.values() if (at := first(m, "init")) is not None]
    if not inits:
        return []
    start = min(inits)
    return [(round(at - start, 3), what) for at, what in marks.get(LEADER, [])]


def read_cpu_times(text: str) -> tuple[int, int] | None:
    """(busy, total) clock ticks of every CPU from /proc/stat's first line (`cpu user nice system idle iowait
    irq softirq steal ...`): busy is all but idle and iowait; None for text that is not such a line."""
    fields = text.split("\n", 1)[0].split()
    if len(fields) < 5 or fields[0] != "cpu" or not all(f.isdigit() for f in fields[1:]):
        return None
    ticks = [int(f) for f in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return sum(ticks) - idle, sum(ticks)


def busy_share(samples: list[tuple[float, int, int]], start: float | None, end: float | None) -> float | None:
    """The share of the host's CPU time that was busy from START to END (epoch seconds), from SAMPLES of
    (epoch, busy ticks, total ticks) in time order: between the last sample at or before START and the first
    at or after END. None when the samples do not cover the span."""
    if start is None or end is None:
        return None
    before = [s for s in samples if s[0] <= start]
    after = [s for s in samples if s[0] >= end]
    if not before or not after:
        return None
    (_, busy0, total0), (_, busy1, total1) = before[-1], after[0]
    return (busy1 - busy0) / (total1 - total0) if total1 > total0 else None


def ratio(value: float | None, base: float | None) -> float | None:
    """VALUE / BASE, None when either is missing or BASE is not positive."""
    return None if value is None or not base or base <= 0 else value / base
