#!/usr/bin/env python3
"""`sync.py leftovers`: no process of an earlier job of this repository still runs on the node's host.
Every process a job starts carries the job's RUN_DIR and SLURM_JOB_ID in its environment (the node script
exports them; engines, LMCache and routers inherit them). A process with a RUN_DIR whose job SLURM no
longer runs was left behind (a child that escaped the job's cleanup, a hung teardown); it would hold the
GPUs, ports or host memory the new job needs, and fail it minutes later. It fails the host preflight now,
named by pid, command, job and run folder; the site (or `kill`) removes it. A process of another job SLURM
still runs is none of this job's business (one host, several nodes: the local cluster). Containers of
earlier jobs are container.sh's (removed by name). Stdlib only; reads /proc."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path
from typing import Any

from failures import die, line, one_line

EXIT_LEFTOVER = 1  # a preflight failure, as every other check of a preflight step
ENVIRON_BYTES = 1 << 20  # /proc/<pid>/environ is at most a few hundred KiB
ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING"}
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")
_GONE = re.compile(r"Invalid job id", re.IGNORECASE)


class LeftoverError(Exception):
    """SLURM cannot say whether a job still runs; one line."""


def ours(proc: Path) -> dict[int, tuple[str, str, str]]:
    """{pid: (job id, run folder, command)} of every process under PROC whose environment has RUN_DIR and
    SLURM_JOB_ID (unreadable ones are another user's: not ours)."""
    found = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            with (entry / "environ").open("rb") as handle:
                raw = handle.read(ENVIRON_BYTES)
            comm = (entry / "comm").read_text(errors="replace").strip()
        except OSError:
            continue  # gone, or not ours to read
        env = dict(
            item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item and not item.startswith(b"=")
        )
        run_dir, job = env.get(b"RUN_DIR"), env.get(b"SLURM_JOB_ID")
        if run_dir and job:
            found[int(entry.name)] = (job.decode(errors="replace"), run_dir.decode(errors="replace"), comm)
    return found


def job_state(job: str, timeout: float) -> str:
    """SLURM's state of JOB ("" when SLURM no longer knows it: ended long enough ago)."""
    if not _JOB_ID.fullmatch(job):
        return ""  # not a job id SLURM ever gave: nothing runs it
    try:
        done = subprocess.run(
            ["squeue", "--noheader", "--jobs", job, "--format", "%T"],
            capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError:
        raise LeftoverError("squeue not found: the host cannot ask SLURM which jobs still run") from None
    except subprocess.TimeoutExpired:
        raise LeftoverError(f"squeue --jobs {job} did not answer within {timeout:g} s") from None
    if done.returncode != 0:
        if _GONE.search(done.stderr):
            return ""
        raise LeftoverError(f"squeue --jobs {job} exited {done.returncode}: {one_line(done.stderr, 160)}")
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""


def leftovers(proc: Path, job: str, timeout: float) -> list[str]:
    """'pid N (comm) of job J (state), run R' for every process of an earlier job that no longer runs."""
    found, states = [], {}
    for pid, (other, run_dir, comm) in sorted(ours(proc).items()):
        if other == job:
            continue
        if other not in states:
            states[other] = job_state(other, timeout)
        if states[other] in ALIVE:
            continue
        state = states[other].lower() or "ended"
        who = f"pid {pid} ({one_line(comm, 40)}) of job {one_line(other, 20)} ({state})"
        found.append(f"{who}, run {one_line(run_dir, 200)}")
    return found


def cmd_leftovers(args: argparse.Namespace) -> int:
    try:
        found = leftovers(Path(args.proc), args.job, args.timeout)
    except LeftoverError as err:
        die(line("leftover-processes", problems=err), EXIT_LEFTOVER)
    if found:
        shown = "; ".join(found[: args.show]) + (
            f"; and {len(found) - args.show} more" if len(found) > args.show else ""
        )
        die(line("leftover-processes", problems=shown), EXIT_LEFTOVER)
    print("no process of an earlier job left")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leftovers", help="no process of an earlier job of this repository still runs here")
    p.add_argument(
        "--job", required=True, help="this job's SLURM_JOB_ID (its own processes are not leftovers)"
    )
    p.add_argument("--proc", default="/proc", help="the process table (tests: a fake tree)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds squeue may take")
    p.add_argument("--show", type=int, default=8, help="processes named in the line (the rest counted)")
    p.set_defaults(func=cmd_leftovers)
