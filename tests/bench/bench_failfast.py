"""`make bench-failfast`: the demo job on the local cluster once per fault class -- is the fault detected,
how long from the fault to the end of the whole SLURM job, does the main output name the failing step,
service and node with its log tail, is its cause class the one expected (scripts/causes.json), is anything
left running, did finished results survive.

What the job prints per failure class is scripts/failures.py's (recipe pages show the same catalog);
fault instant and job end are defined in tests/bench/failfast_faults.py and failfast_job.py. A hang can
only be told from slowness by a configured timeout: its detection is measured from the instant that
timeout expired, and the timeout is reported beside it (column `bound`). Target: every fault detected,
the slowest detection under the node scripts' poll interval + 5 s, nothing left behind, no finished
result lost. Table on stdout, JSON in out/bench/failfast.json, last line:
`max detection: <s> s (<d>/<n> faults detected, <c>/<n> clean, <k>/<n> classified)`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from recipes.submit import SubmitError  # noqa: E402
from sim.cluster.layout import default_layout  # noqa: E402
from sim.demo import DemoError  # noqa: E402
from tests.bench.failfast_faults import BY_NAME, FAULTS, Fault  # noqa: E402
from tests.bench.failfast_job import Record, render, run_fault, strays  # noqa: E402

OUT = ROOT / "out" / "bench"
TARGET_MARGIN_S = 5.0  # beyond the poll interval


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_failfast.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="FAULT",
        help=f"one of: {', '.join(BY_NAME)} (repeatable)",
    )
    p.add_argument(
        "--quick", action="store_true", help="only the fast faults (no timeouts, no second concurrency)"
    )
    p.add_argument(
        "--hog",
        type=int,
        default=0,
        metavar="N",
        help="N busy processes for the whole run (a loaded host: the races a fast machine hides)",
    )
    p.add_argument("--out", type=Path, default=OUT / "failfast.json")
    p.add_argument("--list", action="store_true", help="list the fault classes and exit")
    args = p.parse_args(argv)
    names = [n for item in args.only for n in item.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    return args


def chosen(args: argparse.Namespace) -> list[Fault]:
    names = {n for item in args.only for n in item.split(",") if n}
    return [f for f in FAULTS if (not names or f.name in names) and (f.quick or not args.quick)]


def cell(value: float | None, width: int = 6) -> str:
    return f"{value:{width}.2f}" if value is not None else f"{'-':>{width}}"


def breakdown(r: Record) -> tuple[float | None, float | None, float | None]:
    """detect = report (fault or deadline -> first failure reported) + teardown (-> last node script
    ended) + slurm (-> job end: srun, outcome.py, slurmctld)."""
    start = r.deadline_at if r.bound_s else r.fault_at
    if None in (start, r.failure_at, r.nodes_done_at, r.end_at):
        return None, None, None
    # a watchdog records when it first saw the hang (before its grace expired): counted from the deadline
    reported = max(r.failure_at, start)
    return reported - start, r.nodes_done_at - reported, r.end_at - r.nodes_done_at


def table(records: list[Record], poll: float) -> str:
    target = poll + TARGET_MARGIN_S
    head = (
        f"{'fault':41} {'exit':>4} {'fault→end':>9} {'bound':>5} {'detect':>7}  {'report':>6} {'tear':>5} "
        f"{'slurm':>5} {'named':>5} {'cause (expected)':24} {'left':>4} {'kept':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in records:
        bound = f"{r.bound_s:.0f}s" if r.bound_s else "-"
        ok = r.detected and r.detection_s is not None and r.detection_s < target
        detect = f"{cell(r.detection_s)}{' ' if ok else '!'}"
        kept = f"{len(r.results_before_fault)}/{len(r.results_before_fault)}" if r.results_kept else "LOST"
        if not r.results_before_fault and r.results_kept:
            kept = "-" if not r.results_expected else "none!"
        code = r.exit_code.split(":")[0] if r.detected else "0!"
        report, tear, slurm = breakdown(r)
        cause = r.cause if r.classified else f"{r.cause or '-'}! ({r.cause_expected})"
        lines.append(
            f"{r.title:41} {code:>4} {cell(r.fault_to_end_s, 9)} {bound:>5} {detect:>7} {cell(report)} "
            f"{cell(tear, 5)} {cell(slurm, 5)} {'yes' if r.named else 'NO':>5} {cause:24} "
            f"{len(r.left_at_end):>4} {kept:>5}"
        )
    lines.append(
        f"fault→end: s from the fault instant to the end of the whole SLURM job. detect: the same, but for a "
        f"hang from the instant its configured timeout (bound) expired; = report (first failure reported) "
        f"+ tear(down: last node script ended) + slurm (job ended). Target < {target:g} s (poll interval "
        f"{poll:g} s + {TARGET_MARGIN_S:g} s); ! misses it. named: the output names step, service, node "
        f"(+ log tail). cause: the verdict's cause class (scripts/causes.json); ! not the class expected, "
        f"in brackets. left: processes of the job alive at its end. kept: results finished before the "
        f"fault still there."
    )
    return "\n".join(lines)


def summary_line(records: list[Record]) -> str:
    total = len(records)
    detected = sum(r.detected for r in records)
    clean = sum(r.clean for r in records)
    classified = sum(r.classified for r in records)
    times = [r.detection_s for r in records if r.detected and r.detection_s is not None]
    worst = f"{max(times):.2f}" if times and detected == total and len(times) == total else "inf"
    return (
        f"max detection: {worst} s ({detected}/{total} faults detected, {clean}/{total} clean, "
        f"{classified}/{total} classified)"
    )


@contextlib.contextmanager
def cpu_hog(count: int) -> Iterator[None]:
    """COUNT processes that only burn CPU, from now until the block ends (killed, whatever happened)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def cluster_up() -> bool:
    return default_layout().conf.is_file()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for f in FAULTS:
            print(f"{f.name:28} {f.title} -- {f.how}{' [quick]' if f.quick else ''}")
        return 0
    if not cluster_up():
        print("bench-failfast: the local cluster is not up: `make cluster-up` (or python -m sim.cluster up)")
        return 2
    with cpu_hog(args.hog):
        return run(args)


def run(args: argparse.Namespace) -> int:
    faults = chosen(args)
    recipe = render()  # the demo job's; a fault on another job renders that one once
    recipes = {(recipe.key, recipe.variant): recipe}
    work = OUT / "failfast"
    records: list[Record] = []
    started = time.time()
    print(
        f"bench-failfast: {len(faults)} fault(s) on {recipe.key} {recipe.variant}; poll interval "
        f"{recipe.poll_interval:g} s; load {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"({os.cpu_count()} cpus){f'; {args.hog} busy process(es) beside it' if args.hog else ''}",
        flush=True,
    )
    for fault in faults:
        try:
            key = (fault.config, fault.variant)
            if key not in recipes:
                recipes[key] = render(*key)
            record = run_fault(fault, recipes[key], work)
        except (DemoError, SubmitError) as exc:  # the cluster is down, say: one line, not a traceback
            print(f"bench-failfast: {exc}", file=sys.stderr)
            return 2
        records.append(record)
        print(
            f"  {fault.name:28} job {record.job_id:>4} {record.state or '?':10} exit {record.exit_code:6} "
            f"fault→end {cell(record.fault_to_end_s).strip()} s, "
            f"detect {cell(record.detection_s).strip()} s, "
            f"named {'yes' if record.named else 'no: ' + '; '.join(record.named_missing)}, "
            f"cause {record.cause or '-'}"
            + ("" if record.classified else f" (expected {record.cause_expected})")
            + ", "
            f"left {len(record.left_at_end)}, load {record.load_after[0]:.2f}"
            + (f" [{'; '.join(record.notes)}]" if record.notes else ""),
            flush=True,
        )
    others = strays(started, set())
    print()
    print(table(records, recipe.poll_interval))
    for r in records:
        for line in r.left_at_end:
            print(f"left behind by {r.fault}: {line}")
    if others:
        print(f"({len(others)} service-like process(es) started meanwhile and not ours: another user's?)")
    doc = {
        "config": recipe.key,
        "variant": recipe.variant,
        "poll_interval_s": recipe.poll_interval,
        "target_s": recipe.poll_interval + TARGET_MARGIN_S,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "cpu_hogs": args.hog},
        "wall_s": time.time() - started,
        "definitions": {
            "fault_instant": "sim-line: the simulator's `SIM FAULT <kind> at <epoch>` line; wrapper: the "
            "wrapper's own such line; action: the bench's clock just before its signal; start: the start of "
            "the service that needs a taken port (its pid file's mtime)",
            "job_end": "the return of the first `scontrol show job` poll (0.1 s once failing) showing an "
            "ended state (upper bound); EndTime (1 s resolution) recorded as end_time_slurm",
            "detection": "job end - fault instant; for a hang (bound set), job end - the instant the "
            "configured timeout expired",
            "clean": "no process of the job alive at its end and every result finished before the fault "
            "still there, unchanged",
            "classified": "the verdict's `cause: <id>` line names the cause class the failure class expects "
            "(scripts/failures.py CLASSES, scripts/causes.json)",
        },
        "unattributed_processes_started_meanwhile": others,
        "faults": [r.as_dict() for r in records],
        "summary": summary_line(records),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(
        f"JSON: {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}; "
        f"wall {time.time() - started:.0f} s"
    )
    print(summary_line(records))
    target = recipe.poll_interval + TARGET_MARGIN_S
    met = all(
        r.detected and r.clean and r.classified and r.detection_s is not None and r.detection_s < target
        for r in records
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
