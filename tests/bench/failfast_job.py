"""One fault, one job: submit the demo job with the fault injected, watch it to its end, then measure.

Job end: the first `scontrol show job` poll (every 0.1 s once a failure shows in job.out or the bench
has acted, every 0.5 s before) that reports an ended state; the time is taken when that poll returns,
so it is an upper bound (late by at most one poll period plus one scontrol call, ~20 ms). slurmctld's
EndTime (1 s resolution) is recorded beside it as a cross-check.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from recipes.render import load, render_config
from recipes.submit import pick, submit
from sim.demo import DemoError, job_env, job_state, simulated_host
from tests.bench.failfast_faults import CONFIG, LEADER, VARIANT, Fault, sim_fault_instant, write_wrappers

ROOT = Path(__file__).resolve().parents[2]
FAST_POLL_S, SLOW_POLL_S = 0.1, 0.5
PENDING_S = 900.0  # the cluster may be busy with another engineer's job
FAILURE_MARKS = ("FAILED ", "job failed", "job succeeded", "srun: error")
# Processes a job of ours runs, by command line: what an orphan would look like.
SERVICE_WORDS = re.compile(
    r"lmcache|sim/bin/vllm|vllm serve|vllm-router|aiperf|-m proxy|sync\.py|run-service\.sh"
)


@dataclass
class Recipe:
    """The variant rendered once for every fault."""

    rendered: object
    poll_interval: float
    key: str
    variant: str


def render(config: str = CONFIG, variant: str = VARIANT) -> Recipe:
    rendered = pick(render_config(config, load(config)), variant)
    return Recipe(rendered, float(rendered.plan.timeouts.poll_interval), config, variant)


@dataclass
class Record:
    """What one fault's job showed; times are epoch seconds."""

    fault: str
    title: str
    how: str
    job_id: str = ""
    run_dir: str = ""
    state: str = ""
    exit_code: str = ""
    detected: bool = False
    submitted_at: float = 0.0
    fault_at: float | None = None
    deadline_at: float | None = None  # a hang's: when the configured timeout expired
    bound: str = ""
    bound_s: float | None = None
    end_at: float | None = None  # observed (upper bound)
    end_time_slurm: float | None = None  # EndTime, 1 s resolution
    fault_to_end_s: float | None = None
    # The breakdown: fault -> first failure report (a node's outcome `at`) -> last node script ended (the
    # latest outcome file's mtime, written after teardown) -> job end (srun, outcome.py, slurmctld).
    failure_at: float | None = None
    nodes_done_at: float | None = None
    detection_s: float | None = None  # from the fault instant, or from the deadline for a hang
    leader_step_at_fault: str = ""
    verdict: str = ""
    cause: str = ""  # the verdict's `cause: <id> (<detail>)` line: the id
    cause_detail: str = ""
    cause_expected: str = ""  # the failure class's (scripts/failures.py)
    named: bool = False
    named_missing: list[str] = field(default_factory=list)
    left_at_end: list[str] = field(default_factory=list)
    left_after_3s: list[str] = field(default_factory=list)
    results_before_fault: list[str] = field(default_factory=list)
    results_kept: bool = True
    results_expected: bool = False
    notes: list[str] = field(default_factory=list)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def clean(self) -> bool:
        return not self.left_at_end and self.results_kept

    @property
    def classified(self) -> bool:
        return bool(self.cause) and self.cause == self.cause_expected

    def as_dict(self) -> dict:
        return {**asdict(self), "clean": self.clean, "classified": self.classified}


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _pid(path: Path) -> int | None:
    text = _read(path).strip()
    return int(text) if text.isdigit() else None


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(p) for p in _read(task).split()]
    return found


def _cmdline(pid: int | str) -> str:
    return _read(Path(f"/proc/{pid}/cmdline")).replace("\0", " ").strip()


def _environ(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _start_epoch(pid: str) -> float | None:
    """A process's start time (epoch s) from /proc/<pid>/stat and the boot time."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def leftovers(run_dir: Path, job_id: str) -> list[str]:
    """Live processes of this job: the run folder in their command line or environment, or the job id
    in their environment (everything srun starts inherits SLURM_JOB_ID)."""
    mine, found = {os.getpid(), os.getppid()}, []
    marks = (f"RUN_DIR={run_dir}\0", f"SLURM_JOB_ID={job_id}\0")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in mine:
            continue
        cmd = _cmdline(proc.name)
        if not cmd:
            continue  # a kernel thread, or gone meanwhile
        state = _read(proc / "stat").rsplit(")", 1)[-1].split()[:1]
        if state == ["Z"]:
            continue  # a zombie holds nothing; its parent is what would be left
        env = _environ(proc.name)
        if str(run_dir) in cmd or any(m in env for m in marks):
            found.append(f"{proc.name} {cmd[:160]}")
    return found


def strays(since: float, exclude: set[str]) -> list[str]:
    """Service-like processes started since SINCE that are not attributed to any job of ours: reported,
    not counted (another engineer's benchmark may run the same tools)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name in exclude:
            continue
        cmd = _cmdline(proc.name)
        if cmd and SERVICE_WORDS.search(cmd) and (_start_epoch(proc.name) or 0) >= since:
            found.append(f"{proc.name} {cmd[:160]}")
    return found


class PortHog:
    """A listening socket on ADDR:PORT, held from before submission until the job has ended."""

    def __init__(self, addr: str, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # TIME_WAIT connections of the previous job's service must not stop us; a live listener does.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((addr, port))
        self.sock.listen(1)

    def close(self) -> None:
        self.sock.close()


class Watcher:
    """Follows one job: steps, results, the bench's action, the end."""

    def __init__(self, fault: Fault, job, env: dict[str, str], record: Record) -> None:
        self.fault, self.job, self.env, self.record = fault, job, env, record
        self.run_dir = Path(job.run_dir)
        self.results: dict[str, tuple[float, int]] = {}  # name -> (mtime, size) when first seen
        self.trigger_seen_at: float | None = None
        self.acted = False
        self.out_offset = 0
        self.failing = False

    def step(self, node: str) -> str:
        return _read(self.run_dir / "state" / node / "step").strip()

    def _triggered(self, now: float) -> bool:
        trig = self.fault.action.trigger
        if self.trigger_seen_at is None:
            if trig.pid_of:
                seen = (self.run_dir / "state" / trig.node / f"{trig.pid_of}.pid").exists()
            else:
                seen = self.step(trig.node) == trig.step
            if seen:
                self.trigger_seen_at = now
        return self.trigger_seen_at is not None and now - self.trigger_seen_at >= trig.delay

    def _act(self) -> None:
        action = self.fault.action
        state = self.run_dir / "state" / action.node
        sig = getattr(signal, f"SIG{action.signal}")
        if action.kind == "kill-aiperf":
            target = self._aiperf_pid()
            if target is None:
                record = self.run_dir / "state" / LEADER / "foreground.pid"
                pid = _pid(record)
                self.record.notes.append(
                    f"no aiperf to kill: {record} holds {pid} ({_cmdline(pid)[:120] if pid else 'no pid'})"
                )
                return
            self.record.fault_at = time.time()
            os.kill(target, sig)
        elif action.kind == "kill-service":
            wrapper = _pid(state / f"{action.service}.pid")
            targets = _children(wrapper) if wrapper else []  # the service under run-service.sh
            if not targets:
                self.record.notes.append(f"no {action.service} process found under pid {wrapper}")
                return
            self.record.fault_at = time.time()
            os.kill(targets[0], sig)
        elif action.kind == "stop-group":
            group = _pid(state / f"{action.service}.pid")
            try:
                self.record.fault_at = time.time()
                os.killpg(group, sig)  # the wrapper is its session and group leader (start_service)
            except (TypeError, OSError) as err:
                self.record.fault_at = None
                self.record.notes.append(f"could not signal {action.service}'s group {group}: {err}")
                return
        self.record.leader_step_at_fault = self.step("sim1")
        self.record.results_before_fault = sorted(self.results)
        self.record.notes.append(
            f"bench: SIG{action.signal} ({action.kind} {action.service} on {action.node})"
        )

    def _aiperf_pid(self) -> int | None:
        """The benchmark client run_cmd started: the pid the node recorded for its foreground command
        (aiperf renames its processes, so names cannot find it), waited for up to 2 s."""
        record = self.run_dir / "state" / LEADER / "foreground.pid"
        deadline = time.monotonic() + 2.0
        while True:
            pid = _pid(record)
            if pid is not None and "aiperf" in _cmdline(pid):
                return pid
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def _scan_output(self) -> None:
        try:
            with open(self.run_dir / "job.out", "rb") as out:
                out.seek(self.out_offset)
                chunk = out.read()
        except OSError:
            return
        self.out_offset += len(chunk)
        if any(mark.encode() in chunk for mark in FAILURE_MARKS):
            self.failing = True

    def _track_results(self) -> None:
        for path in (self.run_dir / "results").glob("*_conc*.json"):
            if path.name not in self.results:
                with contextlib.suppress(OSError):
                    st = path.stat()
                    self.results[path.name] = (st.st_mtime, st.st_size)

    def follow(self) -> tuple[str, str]:
        """Until the job has ended: (state, exit code). The job is cancelled FAULT.timeout s after it
        started running (time spent queued behind someone else's job does not count, up to PENDING_S)."""
        next_poll, deadline = 0.0, time.monotonic() + PENDING_S
        running = False
        while True:
            now = time.time()
            if self.fault.action and not self.acted and self._triggered(now):
                self.acted = True
                self._act()
            self._track_results()
            self._scan_output()
            if time.monotonic() >= next_poll:
                state = job_state(self.job.job_id, self.env)
                if state.ended:
                    self.record.end_at = time.time()
                    return state.state, state.exit_code
                if state.state == "RUNNING" and not running:
                    running, deadline = True, time.monotonic() + self.fault.timeout
                fast = self.failing or self.acted
                next_poll = time.monotonic() + (FAST_POLL_S if fast else SLOW_POLL_S)
            if time.monotonic() > deadline:
                subprocess.run(["scancel", self.job.job_id], env=self.env, check=False)
                what = (
                    f"still running after {self.fault.timeout:g} s" if running else f"queued {PENDING_S:g} s"
                )
                self.record.notes.append(f"{what}: cancelled")
                deadline = float("inf")
            time.sleep(FAST_POLL_S / 2 if self.fault.action and not self.acted else FAST_POLL_S)


def end_time_slurm(job_id: str, env: dict[str, str]) -> float | None:
    done = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job_id],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    match = re.search(r"\bEndTime=(\S+)", done.stdout)
    try:
        return dt.datetime.fromisoformat(match[1]).timestamp() if match else None
    except ValueError:
        return None


def fault_instant(fault: Fault, run_dir: Path, fault_dir: Path, record: Record) -> float | None:
    if fault.instant == "action":
        return record.fault_at
    if fault.instant == "wrapper":
        return sim_fault_instant(_read(fault_dir / "events.log"))
    kind, _, where = fault.instant.partition(":")
    node, service = where.split("/")
    if kind == "sim-line":
        return sim_fault_instant(_read(run_dir / "logs" / node / f"{service}.log"))
    if kind == "step":
        return _step_started(_read(run_dir / "job.out"), node, service)
    raise ValueError(fault.instant)


def _step_started(job_out: str, node: str, step: str) -> float | None:
    """When NODE started STEP (today's date, 1 s resolution)."""
    return next((at for at, name in _steps(job_out, node, dt.date.today()) if name == step), None)


def deadline_of(fault: Fault, run_dir: Path, fault_at: float | None) -> float | None:
    """When a hang's configured timeout expired: from the waiting service's start (its pid file), the
    leader's entry into the barrier (its step file, last rewritten when it entered it), or the fault itself
    (a watchdog's grace: the stopped-service watchdog counts from when it first sees the stop)."""
    _, seconds, start = fault.bound
    kind, _, where = start.partition(":")
    if kind == "fault":
        began = fault_at
    elif kind == "start":
        node, service = where.split("/")
        began = _mtime(run_dir / "state" / node / f"{service}.pid")
    else:
        began = _mtime(run_dir / "state" / where / "step")
    return None if began is None else began + seconds


def check_output(fault: Fault, job_out: str, run_dir: Path) -> list[str]:
    """What the main output fails to say (empty: it names step, service and node, with the log tail)."""
    exp, missing = fault.expect, []
    node = exp.node or r"\S+"
    verdict = re.search(r"^job failed: first failure on (\S+) in step '([^']*)'", job_out, re.M)
    if not verdict or not re.fullmatch(node, verdict[1]) or (exp.step and verdict[2] != exp.step):
        missing.append(
            f"verdict naming {exp.node or 'a node'}" + (f" in step '{exp.step}'" if exp.step else "")
        )
    failed = re.findall(rf"FAILED .* on {node}: .*$", job_out, re.M)
    if not any(re.search(exp.what, line) for line in failed):
        missing.append(f"FAILED line on {exp.node or 'a node'} matching /{exp.what}/")
    if exp.root:
        first = job_out.find("FAILED ")
        if first < 0 or not re.search(exp.root, job_out[first:]):
            missing.append(f"the root cause (/{exp.root}/) after the first FAILED line")
    if exp.service and exp.node:
        log = run_dir / "logs" / exp.node / f"{exp.service}.log"
        if not re.search(rf"--- last \d+ lines of {re.escape(str(log))} ---", job_out):
            missing.append(f"tail of {exp.node}/{exp.service}.log")
    return missing


def run_fault(fault: Fault, recipe: Recipe, out: Path) -> Record:
    """Submit the demo job with FAULT injected (run folders under OUT/runs/), follow it, measure.
    Raises DemoError when the cluster is not there."""
    record = Record(fault.name, fault.title, fault.how)
    fault_dir = (out / fault.name).resolve()
    env = job_env()
    if fault.wrappers:
        env["PATH"] = f"{write_wrappers(fault, ROOT, fault_dir)}:{env['PATH']}"
    env.update(fault.env)
    simulated_host(recipe.rendered.plan)
    hog = PortHog(*fault.hog) if fault.hog else None
    record.load_before = os.getloadavg()
    try:
        record.submitted_at = time.time()
        job = submit(recipe.rendered, out, env=env)
        record.job_id, record.run_dir = job.job_id, str(job.run_dir)
        watcher = Watcher(fault, job, env, record)
        record.state, record.exit_code = watcher.follow()
    finally:
        if hog:
            hog.close()
    run_dir = Path(record.run_dir)
    record.left_at_end = leftovers(run_dir, record.job_id)
    record.load_after = os.getloadavg()
    record.end_time_slurm = end_time_slurm(record.job_id, env)
    if record.left_at_end:
        time.sleep(3)
        record.left_after_3s = leftovers(run_dir, record.job_id)
    _measure(fault, record, watcher, run_dir, fault_dir)
    return record


def _measure(fault: Fault, record: Record, watcher: Watcher, run_dir: Path, fault_dir: Path) -> None:
    record.detected = not (record.state == "COMPLETED" and record.exit_code == "0:0")
    record.fault_at = fault_instant(fault, run_dir, fault_dir, record)
    job_out = _read(run_dir / "job.out")
    verdict = re.search(r"^job (?:failed|succeeded): .*$", job_out, re.M)
    record.verdict = verdict[0] if verdict else "(no verdict line)"
    # the verdict's next line (outcome.py): the cause class of the first failure
    cause = re.search(r"^job failed: .*\ncause: ([a-z0-9-]+) \((.*)\)$", job_out, re.M)
    record.cause, record.cause_detail = (cause[1], cause[2]) if cause else ("", "")
    record.cause_expected = fault.failure.cause
    if record.fault_at is None:
        record.notes.append("the fault never took effect (no fault instant)")
    elif record.end_at is not None:
        record.fault_to_end_s = record.end_at - record.fault_at
        record.detection_s = record.fault_to_end_s
    if fault.bound:
        record.bound, record.bound_s = fault.bound[0], fault.bound[1]
        record.deadline_at = deadline_of(fault, run_dir, record.fault_at)
        if record.deadline_at is not None and record.end_at is not None:
            record.detection_s = record.end_at - record.deadline_at
    outcomes = list(run_dir.glob("state/*/outcome"))
    ats = []
    for path in outcomes:
        fields = dict(line.split("=", 1) for line in _read(path).splitlines() if "=" in line)
        if fields.get("rc", "0") != "0" and fields.get("at"):
            ats.append((fields.get("kind") == "signal", float(fields["at"])))
    record.failure_at = min(ats)[1] if ats else None
    record.nodes_done_at = max((_mtime(p) or 0.0 for p in outcomes), default=None)
    if record.fault_at is not None and not record.leader_step_at_fault:
        record.leader_step_at_fault = _step_at(job_out, "sim1", record.fault_at)
    missing = check_output(fault, job_out, run_dir) if record.detected else ["the job did not fail"]
    record.named, record.named_missing = not missing, missing
    # Results finished before the fault must all be there, unchanged, after the job.
    if record.fault_at is not None:
        before = {n: v for n, v in watcher.results.items() if v[0] < record.fault_at}
        record.results_before_fault = sorted(before)
        for name, (mtime, size) in before.items():
            path = run_dir / "results" / name
            try:
                st = path.stat()
                json.loads(path.read_text())
            except (OSError, ValueError):
                record.results_kept = False
                record.notes.append(f"{name} finished before the fault and is gone or unreadable")
                continue
            if (st.st_mtime, st.st_size) != (mtime, size):
                record.results_kept = False
                record.notes.append(f"{name} changed after the fault")
    record.results_expected = fault.after_first_result
    if fault.after_first_result and not record.results_before_fault:
        record.notes.append(
            "meant to hit the second concurrency, but no result had finished before the fault"
        )


def _steps(job_out: str, node: str, day: dt.date):
    """(when, step) of NODE's `[HH:MM:SS] node step: X` lines in the job's output, on DAY (1 s resolution)."""
    for match in re.finditer(rf"\[(\d\d:\d\d:\d\d)\] {node} step: (.+)$", job_out, re.M):
        yield dt.datetime.combine(day, dt.time.fromisoformat(match[1])).timestamp(), match[2]


def _step_at(job_out: str, node: str, instant: float) -> str:
    """NODE's step at INSTANT."""
    current = ""
    for at, step in _steps(job_out, node, dt.datetime.fromtimestamp(instant).date()):
        if at > instant:
            break
        current = step
    return current


__all__ = ["DemoError", "Record", "Recipe", "render", "run_fault", "leftovers", "strays"]
