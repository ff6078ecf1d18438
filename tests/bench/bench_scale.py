"""`make bench-scale`: what the job itself costs on top of the engines' own start as the node count grows.

Per N (default 4, 8, 16, 32) an xPyD job of N/2 prefill x N/2 decode simulated vLLM engines (fixed-seq-len,
KV over the simulated Mooncake, no LMCache, our proxy in front, one low concurrency for the runner's short
benchmark) is submitted to the local cluster through the path users take (a master file under out/bench/,
recipes.render and recipes.submit): --repeat times to its end, timed from the nodes' own marks
(tests/bench/scale_measure.py) with every node's memory sampled during the benchmark
(tests/bench/scale_memory.py), and once with the last decode node crashing mid-run, timed as
bench-failfast times a fault (tests/bench/failfast_job.py). Every simulated node shares this host's CPUs,
so the overhead is also given without the least time that sharing adds (scale_measure.DEFINITIONS). Table
on stdout, JSON in out/bench/scale.json, last line: `scale: <N> nodes, overhead ratio <that overhead at N /
at the smallest N> (as measured <the measured overhead's ratio>, ...), fault detection <s> s, verdict
ok|wrong`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import textwrap
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from recipes.render import RenderError, load, render_config  # noqa: E402
from recipes.submit import SubmitError, pick, submit  # noqa: E402
from scripts import statefiles  # noqa: E402
from scripts.failures import BY_NAME as CLASSES  # noqa: E402
from sim.cluster import __main__ as cluster  # noqa: E402
from sim.cluster import daemons  # noqa: E402
from sim.cluster.layout import MAX_NODES, default_layout, nodes  # noqa: E402
from sim.demo import DemoError, job_env, simulated_host  # noqa: E402
from tests.bench import scale_measure as measure  # noqa: E402
from tests.bench import scale_memory as memory  # noqa: E402
from tests.bench.bench_failfast import breakdown, cell  # noqa: E402
from tests.bench.failfast_faults import Fault  # noqa: E402
from tests.bench.failfast_job import Recipe, Record, Watcher, leftovers, run_fault  # noqa: E402
from tests.bench.scale_config import (  # noqa: E402
    CONCURRENCY,
    ENGINE_LOAD_S,
    KEY,
    shape,
    variant_of,
    write_master,
)

OUT = ROOT / "out" / "bench"
CRASH_AFTER = 2  # requests the last decode finishes before it crashes: inside the benchmark at every N
JOB_TIMEOUT_S = 900.0  # a job still running this long after it started is cancelled (and reported)
CPU_EVERY_S = 0.25  # the host's CPU times: fine enough to bound a start phase of a few seconds
LAUNCH_POLL_S = 0.05  # looking for the last engine's pid file: what the snapshot counts late, at most
LAUNCH_RT_PRIORITY = 1  # the CPU snapshot's thread, ahead of the nodes' processes (SCHED_FIFO, as root)
SAMPLE_EVERY_S = 2.0  # memory samples while the benchmark runs: steady state, every engine serving
CLUSTER_UP_S = 180.0  # 32 slurmds registering on two busy cores


@dataclass(frozen=True)
class CleanRun:
    """What failfast_job.Watcher needs of a job without a fault: no action, a timeout."""

    timeout: float
    action: None = None


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_scale.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--nodes", default="4,8,16,32", help="comma-separated even node counts (default 4,8,16,32)"
    )
    p.add_argument("--no-fault", action="store_true", help="skip the fault run of each N")
    p.add_argument(
        "--repeat", type=int, default=1, help="clean runs per N; the table shows the median one (default 1)"
    )
    p.add_argument("--out", type=Path, default=OUT / "scale.json")
    args = p.parse_args(argv)
    try:
        args.counts = sorted({int(n) for n in args.nodes.split(",") if n.strip()})
        for n in args.counts:
            shape(n)
    except ValueError as exc:
        p.error(f"--nodes {args.nodes!r}: {exc}")
    if not args.counts or args.counts[-1] > MAX_NODES:
        p.error(f"--nodes: 2..{MAX_NODES} nodes (the local cluster's most)")
    return args


def ensure_cluster(count: int) -> None:
    """The local cluster with at least COUNT nodes: up if down; a smaller one running is an error (its jobs
    may be someone else's), said with the command that resizes it."""
    layout = default_layout()
    have = len(cluster.configured_nodes(layout))
    running = daemons.running_pid(layout, daemons.daemons(layout, nodes(1))[1]) is not None
    if running and have >= count:
        return
    if running:
        raise DemoError(
            f"the local cluster runs {have} nodes, the bench needs {count}: "
            f"`make cluster-down`, then `make bench-scale` (or `make cluster-up NODES={count}`)"
        )
    if cluster.up(layout, count, CLUSTER_UP_S) != 0:
        raise DemoError(f"the local cluster did not come up with {count} nodes (make cluster-status)")


def job_environment() -> dict[str, str]:
    """The job's environment: the local node tools, and the simulated engines' short known start."""
    return {**job_env(), "SIM_LOAD_DELAY_S": f"{ENGINE_LOAD_S:g}"}


class Sampler(threading.Thread):
    """Samples every node's processes while the leader is in its benchmark step."""

    def __init__(self, run_dir: Path, job_id: str) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.job_id = run_dir, job_id
        self.samples: list[list[memory.Proc]] = []
        self.done = threading.Event()

    def run(self) -> None:
        step = self.run_dir / statefiles.FOLDER / measure.LEADER / statefiles.STEP
        cluster_dir = str(default_layout().dir)
        while not self.done.wait(SAMPLE_EVERY_S):
            try:
                now = step.read_text().strip()
            except OSError:
                continue  # the node has not started yet
            if now.startswith("benchmark"):
                self.samples.append(memory.sample(cluster_dir, self.job_id))


class LaunchReader(threading.Thread):
    """The CPU every node's job processes had used when the last engine was launched (its pid file, written
    as start_service starts it): the end of the start work the job's own steps do, on every node at once on
    a cluster, here in turns on this host's CPUs. One /proc read, once every engine's pid file is there."""

    def __init__(self, run_dir: Path, count: int) -> None:
        super().__init__(daemon=True)
        self.count = count
        self.pid_files = f"{statefiles.FOLDER}/*/{measure.ENGINE}{statefiles.PID_SUFFIX}"
        self.run_dir = run_dir
        self.snapshot: measure.LaunchCpu | None = None
        self.done = threading.Event()

    def run(self) -> None:
        # Real-time (as root), ahead of the nodes' processes, so that the last pid file is seen and /proc
        # read at once (at nice -10 the read still came a second late behind 32 nodes' starting engines);
        # a glob every LAUNCH_POLL_S costs this host about 1% of a CPU.
        try:
            os.sched_setscheduler(
                threading.get_native_id(), os.SCHED_FIFO, os.sched_param(LAUNCH_RT_PRIORITY)
            )
        except OSError:
            pass  # launch_read_late_s says how late the read was, and the floor takes that off
        while len(engines := self.engines()) < self.count:
            if self.done.wait(LAUNCH_POLL_S):
                return
        stats = memory.read_stats()
        self.snapshot = measure.LaunchCpu(memory.job_cpu(stats, engines), time.time())

    def engines(self) -> dict[str, int]:
        """The engine pid of every node whose pid file is written whole (start_service writes it after the
        start)."""
        out = {}
        for path in self.run_dir.glob(self.pid_files):
            try:
                out[path.parent.name] = int(path.read_text())
            except (OSError, ValueError):
                continue
        return out


class HostCpu(threading.Thread):
    """The host's CPU times (/proc/stat) every CPU_EVERY_S while a job runs: how busy this host was."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            try:
                with open("/proc/stat", encoding="ascii") as stat:
                    times = measure.read_cpu_times(stat.read())
            except OSError:
                times = None
            if times is not None:
                self.samples.append((time.time(), *times))
            if self.done.wait(CPU_EVERY_S):
                return


def run_clean(recipe: Recipe, out: Path) -> dict:
    """The job to its end: its state, timings, leader timeline and memory per node."""
    env = job_environment()
    simulated_host(recipe.rendered.plan)
    record = Record("none", "no fault", "")
    job = submit(recipe.rendered, out, env=env)
    record.job_id, record.run_dir = job.job_id, str(job.run_dir)
    count = recipe.rendered.plan.slurm.nodes
    sampler, cpu = Sampler(Path(job.run_dir), job.job_id), HostCpu()
    launch = LaunchReader(Path(job.run_dir), count)
    for thread in (sampler, cpu, launch):
        thread.start()
    try:
        state, code = Watcher(CleanRun(JOB_TIMEOUT_S), job, env, record).follow()
    finally:
        for thread in (sampler, cpu, launch):
            thread.done.set()
            thread.join()
    run_dir = Path(job.run_dir)
    # the job's nodes only: the cluster's other slurmds (idle, no job process) are no node of this job
    ran_on = {p.name for p in (run_dir / statefiles.FOLDER).iterdir() if p.is_dir()}
    mem = [n for n in memory.per_node(sampler.samples) if n.node in ran_on]
    return {
        "job_id": job.job_id,
        "run_dir": str(run_dir),
        "state": state,
        "exit_code": code,
        "ok": state == "COMPLETED" and code == "0:0",
        "notes": record.notes,
        "timings": measure.timings(
            run_dir,
            count,
            record.end_at,
            os.cpu_count() or 1,
            cpu.samples,
            launch.snapshot,
        ).as_dict(),
        "leader_timeline": measure.leader_timeline(run_dir),
        # what the CPU floor is made of: every node's job processes at the last engine's launch, in ticks
        "launch_cpu": asdict(launch.snapshot) if launch.snapshot else None,
        "memory_samples": len(sampler.samples),
        "memory": memory.summary(mem, measure.LEADER),
        "memory_per_node": [vars(n) for n in mem],
        "left_at_end": leftovers(run_dir, job.job_id),
    }


def last_node_fault(count: int) -> Fault:
    """The last node (rank N-1, a decode) crashes after CRASH_AFTER requests: decode-crash-mid-stream."""
    node = f"sim{count}"
    addr = nodes(count)[-1].addr
    return Fault(
        CLASSES["decode-crash-mid-stream"],
        f"SIM_FAULT=crash-after:{CRASH_AFTER} on the last decode ({node}, {addr})",
        f"sim-line:{node}/vllm",
        node,
        values={"code": "1"},
        env={
            "SIM_FAULT": f"crash-after:{CRASH_AFTER}",
            "SIM_FAULT_ROLE": "decode",
            "SIM_FAULT_HOST": addr,
            "SIM_LOAD_DELAY_S": f"{ENGINE_LOAD_S:g}",
        },
        timeout=JOB_TIMEOUT_S,
        config=KEY,
        variant=variant_of(count),
    )


def run_with_fault(recipe: Recipe, count: int, out: Path) -> dict:
    fault = last_node_fault(count)
    r = run_fault(fault, recipe, out)
    ran_on = sorted(p.name for p in (Path(r.run_dir) / statefiles.FOLDER).iterdir() if p.is_dir())
    last = max(ran_on, key=lambda n: (len(n), n)) if ran_on else ""
    report, teardown, slurm = breakdown(r)
    notes = list(r.notes)
    if last != fault.node:  # SLURM placed the job elsewhere: the fault's address was not the last node
        notes.append(f"the job ran on {','.join(ran_on)}: its last node is {last}, not {fault.node}")
    return {
        "job_id": r.job_id,
        "run_dir": r.run_dir,
        "how": fault.how,
        "state": r.state,
        "exit_code": r.exit_code,
        "detected": r.detected,
        "detection_s": r.detection_s,
        # detection = report (crash -> first failure reported) + teardown (-> last node script ended) + slurm
        "report_s": report,
        "teardown_s": teardown,
        "slurm_s": slurm,
        "verdict_line": r.verdict,
        "cause": r.cause,
        "cause_expected": r.cause_expected,
        "named": r.named,
        "named_missing": r.named_missing,
        "verdict": "ok" if r.detected and r.named and r.classified and last == fault.node else "wrong",
        "left_at_end": r.left_at_end,
        "notes": notes,
    }


def median_run(repeats: list[dict]) -> dict:
    """The run whose overhead without sharing is the median of the good clean runs (the upper one of an even
    count); the first run when none was good (the table then says FAIL)."""
    good = [r for r in repeats if r["ok"] and r["timings"]["overhead_unshared_s"] is not None]
    if not good:
        return repeats[0]
    return sorted(good, key=lambda r: r["timings"]["overhead_unshared_s"])[len(good) // 2]


def spread_lines(runs: list[dict]) -> list[str]:
    """Per N with more than one clean run: each overhead's median [min-max] over them."""
    out = []
    for r in runs:
        repeats = [x["timings"] for x in r.get("repeats", []) if x["ok"]]
        if len(repeats) < 2:
            continue
        parts = []
        for name, key in (
            ("without sharing", "overhead_unshared_s"),
            ("taking off the node scripts' CPU only", "overhead_unshared_scripts_s"),
            ("as measured", "overhead_s"),
        ):
            values = sorted(t[key] for t in repeats if t[key] is not None)
            if values:
                parts.append(f"{name} {statistics.median(values):.2f} [{values[0]:.2f}-{values[-1]:.2f}]")
        out.append(f"overhead at {r['nodes']} nodes over {len(repeats)} runs: {', '.join(parts)} s")
    return out


COLUMNS = (
    ("skew", "launch_skew_s"),
    ("prefl", "preflight_s"),
    ("barr", "barrier_s"),
    ("fanin", "barrier_fanin_s"),
    ("rel", "barrier_release_s"),
    ("eng", "engine_own_max_s"),
    ("ready", "all_ready_s"),
    ("ovhd", "overhead_s"),
    ("rdyb", "ready_barrier_s"),
    ("router", "router_ready_s"),
    ("1st", "first_request_s"),
    ("smoke", "smoke_and_scrape_s"),
    ("1stb", "first_benchmark_request_s"),
    ("after", "after_benchmark_s"),
    ("tear", "teardown_s"),
    ("cpu/n", "node_cpu_s"),
    ("floor", "cpu_floor_s"),
    ("shared", "shared_cpu_s"),
    ("unshr", "overhead_unshared_s"),
    ("busy", "host_busy"),
)


def table(runs: list[dict]) -> str:
    head = (
        f"{'N':>3} {'shape':7} {'job':>4} "
        + " ".join(f"{c:>6}" for c, _ in COLUMNS)
        + f" {'ratio':>5} {'raw':>5} {'MiB/n':>6} {'detect':>6} verdict"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        t, clean, fault = r["clean"]["timings"], r["clean"], r.get("fault") or {}
        unshared, raw = ratios(runs, r)
        mib = clean["memory"]["node_rss_mib"]
        lines.append(
            f"{r['nodes']:>3} {r['shape']:7} {'ok' if clean['ok'] else 'FAIL':>4} "
            + " ".join(cell(t[k]) for _, k in COLUMNS)
            + f" {cell(unshared, 5)} {cell(raw, 5)} {cell(mib, 6)} {cell(fault.get('detection_s'))} "
            + f"{fault.get('verdict', '-')}"
        )
    legend = (
        "seconds; skew: srun's task starts; prefl: job start -> last node at the start barrier; barr = fanin "
        "(first -> last node in) + rel (last in -> last released); eng: slowest engine's own start "
        "(process -> /health 200); ready: job start -> every engine ready; ovhd = ready - eng; rdyb: ready "
        "barrier; router: router start -> healthy with every backend; 1st: job start -> first request "
        "through the router (smoke); smoke: smoke + N engines' metrics scraped; 1stb: job start -> first "
        "benchmark request; after: last answer -> finish barrier (client exit, result gate, scrape); tear: "
        "done signal -> job end; MiB/n: RSS of a non-leader node; "
        "detect: last decode's crash -> whole job end; verdict ok: the job's verdict names that node, "
        "cause decode crash; cpu/n: a node script's CPU seconds before its engine step (median node); floor: "
        "the CPU of every node's job processes (script, tools, watchers, engine) when the last engine was "
        "launched, over this host's CPUs, less how late it was read (work a real cluster does on all nodes "
        "at once, done here in turns); shared: floor - the largest node's, the least that sharing this host "
        "adds; "
        "unshr = ovhd - shared; busy: share of this host's CPU time busy from job start to every engine "
        "ready (1.00: the start waited for CPU); ratio: unshr / unshr at the smallest N; raw: ovhd / ovhd at "
        "the smallest N."
    )
    return "\n".join([*lines, textwrap.fill(legend, width=len(head))])


def memory_lines(runs: list[dict]) -> list[str]:
    out = []
    for r in runs:
        m = r["clean"]["memory"]
        if m["node_rss_mib"] is None:
            out.append(f"memory at {r['nodes']} nodes: no sample (the benchmark step was not seen)")
            continue
        kinds = ", ".join(f"{k} {v:g}" for k, v in m["node_by_kind_rss_mib"].items())
        node, lead = f"{m['node_rss_mib']:.0f} MiB RSS ({m['node_pss_mib']:.0f} PSS)", m["leader_rss_mib"]
        every = f"{m['total_rss_mib']:.0f} MiB RSS, {m['total_pss_mib']:.0f} MiB PSS"
        out.append(
            f"memory at {r['nodes']} nodes: {node} per node [{kinds}]; leader {lead:.0f} MiB RSS; "
            f"all nodes {every}"
        )
    return out


def ratios(runs: list[dict], run: dict) -> tuple[float | None, float | None]:
    """RUN's overhead over the smallest N's: without what sharing this host's CPUs adds, and as measured."""
    base, t = runs[0]["clean"]["timings"], run["clean"]["timings"]
    return (
        measure.ratio(t["overhead_unshared_s"], base["overhead_unshared_s"]),
        measure.ratio(t["overhead_s"], base["overhead_s"]),
    )


def summary_line(runs: list[dict]) -> str:
    if not runs:
        return "scale: no run"
    top = runs[-1]
    unshared, raw = ratios(runs, top)
    fault = top.get("fault") or {}
    detect = fault.get("detection_s")
    return (
        f"scale: {top['nodes']} nodes, overhead ratio {cell(unshared, 0)} (as measured {cell(raw, 0)}, with "
        f"{top['nodes']} nodes' own start work sharing {os.cpu_count()} CPUs), "
        f"fault detection {f'{detect:.2f}' if detect is not None else '-'} s, "
        f"verdict {fault.get('verdict', '- (no fault run)')}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        ensure_cluster(args.counts[-1])
        master = write_master(OUT / "scale-master.yaml", args.counts)
        rendered = render_config(KEY, load(KEY, [master]))
    except RenderError as exc:
        for finding in exc.findings:
            print(finding.format())
        return 1
    except (DemoError, daemons.ClusterError) as exc:
        print(f"bench-scale: {exc}", file=sys.stderr)
        return 2
    started, work, runs = time.time(), OUT / "scale", []
    print(
        f"bench-scale: {KEY} at {', '.join(map(str, args.counts))} nodes (conc {CONCURRENCY}, engines' "
        f"simulated load {ENGINE_LOAD_S:g} s); master file {master.relative_to(ROOT)}; load "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cpus)",
        flush=True,
    )
    for count in args.counts:
        plan = pick(rendered, variant_of(count))
        recipe = Recipe(plan, float(plan.plan.timeouts.poll_interval), KEY, plan.plan.variant)
        prefill, decode = shape(count)
        run: dict = {"nodes": count, "shape": f"{prefill}P{decode}D", "variant": plan.plan.variant}
        try:
            for _ in range(max(1, args.repeat)):
                clean = run_clean(recipe, work)
                run.setdefault("repeats", []).append(clean)
                print(
                    f"  {count:>2} nodes: job {clean['job_id']} {clean['state']} {clean['exit_code']}, "
                    f"overhead {cell(clean['timings']['overhead_s']).strip()} s, without sharing "
                    f"{cell(clean['timings']['overhead_unshared_s']).strip()} s",
                    flush=True,
                )
            run["clean"] = median_run(run["repeats"])
            if not args.no_fault:
                run["fault"] = run_with_fault(recipe, count, work)
                f = run["fault"]
                print(
                    f"  {count:>2} nodes, fault: job {f['job_id']} {f['state']} {f['exit_code']}, detection "
                    f"{cell(f['detection_s']).strip()} s, verdict {f['verdict']} ({f['verdict_line']})",
                    flush=True,
                )
        except (DemoError, SubmitError) as exc:
            print(f"bench-scale: {exc}", file=sys.stderr)
            return 2
        runs.append(run)
    print()
    print(table(runs))
    for line in [*spread_lines(runs), *memory_lines(runs)]:
        print(line)
    doc = {
        "config": KEY,
        "master_file": str(master.relative_to(ROOT)),
        "concurrency": CONCURRENCY,
        "engine_load_s": ENGINE_LOAD_S,
        "crash_after": CRASH_AFTER,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
        "wall_s": round(time.time() - started, 1),
        "definitions": measure.DEFINITIONS,
        "runs": runs,
        "summary": summary_line(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"JSON: {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    print(summary_line(runs))
    ok = all(
        all(x["ok"] for x in r["repeats"]) and (args.no_fault or r["fault"]["verdict"] == "ok") for r in runs
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
