"""`make submit ... RESUME=<run>`: the points an earlier run of the same lock did not finish, in a new run.

The earlier run folder is never modified. The new one gets the earlier gated results (copied, so the
folder is complete on its own), resume.json (what its node script skips: scripts/resume.py reads it, and
where each reused result was measured, with that run's cache rates) and a lock that names both runs.
Refused when the lock differs (each differing key named, earlier and new value), when the folder is no
run folder, when its job still runs, for a soak (its phases are one continuous load) and when every
result is there already.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .render import Rendered
from .report import CACHE_KEYS, RESUME_FILE, ReportError, reused_points, summarize

# What makes two runs' numbers comparable: a resumed run mixes results of both, so all must be equal.
SAME_LOCK = (
    "config_key",
    "variant",
    "config_sha256",
    "rendered_sha256",
    "components",
    "image",
    "workarounds",
    "mode",
)


class ResumeError(Exception):
    """The earlier run cannot be resumed; says which run and why."""


@dataclass(frozen=True)
class Point:
    name: str  # the benchmark's name in the plan (conc<C>)
    concurrency: int
    result: str  # its result file under results/
    measured_in: str  # the run id whose job measured it (an earlier resume passes on its own origin)
    cache: dict  # prefix/L2 hit rates and KV moved, from the counters of the job that measured it


@dataclass(frozen=True)
class Resume:
    run_dir: Path  # the earlier run
    reused: tuple[Point, ...]
    measured_here: tuple[str, ...]  # names of the benchmarks the new job runs

    def lock_record(self, run_id: str) -> dict:
        """What the new run's lock.json says about both runs."""
        return {
            "run": run_id,
            "from_run": self.run_dir.name,
            "from_run_dir": str(self.run_dir),
            "reused": {p.name: p.measured_in for p in self.reused},
            "measured_here": list(self.measured_here),
        }

    def lines(self) -> list[str]:
        """What submit prints."""
        reused = ", ".join(f"{p.name} (measured by run {p.measured_in})" for p in self.reused)
        return [
            f"resuming {self.run_dir}",
            f"  reused: {reused or 'nothing (the earlier job finished no concurrency)'}",
            f"  runs: {', '.join(self.measured_here)}",
        ]


def _read_lock(run_dir: Path) -> dict:
    lock_file, plan_file = run_dir / "lock.json", run_dir / "recipe" / "plan.json"
    for need in (lock_file, plan_file):
        if not need.is_file():
            raise ResumeError(
                f"RESUME={run_dir} is not a run folder ({need.relative_to(run_dir)} not found): "
                "give out/runs/<key>/<variant>/<run-id>"
            )
    try:
        lock = json.loads(lock_file.read_text())
    except ValueError as err:
        raise ResumeError(f"RESUME={run_dir}: lock.json is not JSON ({err})") from None
    if not isinstance(lock, dict):
        raise ResumeError(f"RESUME={run_dir}: lock.json is not a JSON object")
    return lock


def _shown(value) -> str:
    return "(absent)" if value is None else json.dumps(value, sort_keys=True)


def lock_differences(earlier: dict, new: dict) -> list[str]:
    """`key: earlier -> new` for every key of SAME_LOCK that differs; a dict (components) per entry."""
    out = []
    for key in SAME_LOCK:
        old_value, new_value = earlier.get(key), new.get(key)
        if old_value == new_value:
            continue
        if isinstance(old_value, dict) and isinstance(new_value, dict):
            for sub in sorted(old_value.keys() | new_value.keys()):
                if old_value.get(sub) != new_value.get(sub):
                    out.append(f"{key}.{sub}: {_shown(old_value.get(sub))} -> {_shown(new_value.get(sub))}")
        else:
            out.append(f"{key}: {_shown(old_value)} -> {_shown(new_value)}")
    return out


# A job in these states may still write results; a completing one is past its benchmarks (being ended).
LIVE_STATES = "PENDING,CONFIGURING,RUNNING,SUSPENDED,REQUEUED,REQUEUE_HOLD,RESV_DEL_HOLD"


def still_running(job_name: str, env: dict[str, str] | None) -> list[str]:
    """Job ids of SLURM jobs named JOB_NAME that have not ended (their results may still land)."""
    try:
        done = subprocess.run(
            ["squeue", "--noheader", "--format=%i", f"--states={LIVE_STATES}", f"--name={job_name}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ResumeError(f"cannot tell whether job {job_name} still runs: squeue: {err}") from None
    if done.returncode != 0:
        raise ResumeError(
            f"cannot tell whether job {job_name} still runs: squeue exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()}"
        )
    return done.stdout.split()


def plan_resume(rendered: Rendered, new_lock: dict, run_dir: Path, *, env: dict[str, str] | None) -> Resume:
    """What a resumed run of RUN_DIR reuses and runs; ResumeError if it may not be resumed."""
    run_dir = run_dir.resolve()
    differ = lock_differences(_read_lock(run_dir), new_lock)
    if differ:
        raise ResumeError(
            f"RESUME={run_dir} ran under a different lock, so its results would not compare with new ones "
            "(resume with the config, rendered files and components it ran with, or submit without "
            "RESUME); earlier -> now:\n" + "\n".join(f"  {d}" for d in differ)
        )
    plan = rendered.plan
    if plan.mode != "sweep":
        raise ResumeError(f"RESUME={run_dir} is a {plan.mode} run: its phases are one load, rerun it whole")
    done = [b for b in plan.benchmarks if (run_dir / "results" / b.result).is_file()]
    if done != list(plan.benchmarks[: len(done)]):
        # A job stops at its first failed concurrency, so its results are the sweep's first ones; the
        # node script's last proof reads the last benchmark's snapshot, which a gap would leave unmeasured.
        missing = next(b.name for b in plan.benchmarks if b not in done)
        raise ResumeError(
            f"RESUME={run_dir}: has results after {missing}, which has none; a job stops at its first failed "
            "concurrency, so these results did not come from one sweep: refused"
        )
    if len(done) == len(plan.benchmarks):
        raise ResumeError(
            f"RESUME={run_dir}: nothing to resume, every concurrency has its result "
            f"({', '.join(b.name for b in done)}): `make report RUN={run_dir}`"
        )
    running = still_running(f"{plan.slurm.job_name}-{run_dir.name}", env)
    if running:
        raise ResumeError(
            f"RESUME={run_dir}: its job {', '.join(running)} is still running (its results may still "
            f"land): wait for it to end, or scancel {' '.join(running)}"
        )
    return Resume(
        run_dir,
        _points(run_dir, done),
        tuple(b.name for b in plan.benchmarks if b not in done),
    )


def _points(run_dir: Path, done: list) -> tuple[Point, ...]:
    if not done:
        return ()
    try:
        rows = {r["concurrency"]: r for r in summarize(run_dir)["rows"]}
    except (ReportError, ValueError, KeyError) as err:
        raise ResumeError(f"RESUME={run_dir}: its results cannot be summarized: {err}") from None
    origins = reused_points(run_dir)  # a result the earlier run itself reused keeps its first origin
    return tuple(
        Point(
            b.name,
            b.concurrency,
            b.result,
            origins.get(b.name, {}).get("measured_in", run_dir.name),
            {k: rows[b.concurrency].get(k) for k in CACHE_KEYS},
        )
        for b in done
    )


def apply(resume: Resume, run_dir: Path) -> None:
    """Into the new RUN_DIR (already snapshotted): the reused results, resume.json, the lock's record."""
    results = run_dir / "results"
    results.mkdir(exist_ok=True)
    for point in resume.reused:
        shutil.copy2(resume.run_dir / "results" / point.result, results / point.result)
    doc = {
        "from_run_dir": str(resume.run_dir),
        "points": [
            {
                "name": p.name,
                "concurrency": p.concurrency,
                "result": p.result,
                "measured_in": p.measured_in,
                "cache": p.cache,
            }
            for p in resume.reused
        ],
    }
    (run_dir / RESUME_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    lock_file = run_dir / "lock.json"
    lock = json.loads(lock_file.read_text())
    lock["resumed"] = resume.lock_record(run_dir.name)
    lock_file.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
