"""`sync.py leftovers`: a process of an earlier job of this repository still on the host fails the host
preflight, named; a process of this job, of a job SLURM still runs, or of no job of ours is no failure. The
process table is a fake /proc tree laid out as the kernel's (environ NUL-separated, comm one line); SLURM is
a stand-in `squeue` answering as the real one does (a state per job, or "Invalid job id specified" with exit
code 1 once SLURM forgot the job)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.scripts.conftest import hostcheck, stub_squeue, sync

RUN = "/shared/out/runs/kimi/agentic_p1x8_d1x8_conc8/20261124-101010-abcdef"


def process(proc: Path, pid: int, comm: str, **env: str) -> None:
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    (folder / "comm").write_text(comm + "\n")
    (folder / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


@pytest.fixture
def host(tmp_path: Path):
    """(the fake /proc, an env whose squeue says: job 50 RUNNING, job 41 COMPLETED, others forgotten)."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "self").mkdir()  # not a pid
    bin_dir = stub_squeue(
        tmp_path / "bin",
        'case "$3" in\n'
        "  50) echo RUNNING ;;\n"
        "  41) echo COMPLETED ;;\n"
        "  *) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;\n"
        "esac",
    )
    return proc, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def leftovers(proc: Path, env: dict, job: str = "60") -> subprocess.CompletedProcess:
    return sync("leftovers", "--job", job, "--proc", str(proc), timeout=60, env=env)


def test_a_clean_host_passes(host):
    proc, env = host
    process(proc, 100, "bash", PATH="/usr/bin")  # no job of ours
    process(proc, 101, "vllm", RUN_DIR=RUN, SLURM_JOB_ID="60")  # this job's own
    process(
        proc, 102, "vllm", RUN_DIR=RUN, SLURM_JOB_ID="50"
    )  # a job SLURM still runs (one host, many nodes)
    done = leftovers(proc, env)
    assert (done.returncode, done.stdout) == (0, "no process of an earlier job left\n"), done.stderr


def test_processes_of_ended_jobs_are_named_with_their_job_and_run(host):
    proc, env = host
    process(proc, 4242, "vllm", RUN_DIR=RUN, SLURM_JOB_ID="41")
    process(proc, 4243, "lmcache", RUN_DIR=RUN, SLURM_JOB_ID="7")
    done = leftovers(proc, env)
    assert done.returncode == 1
    assert done.stderr == (
        f"processes of earlier jobs still run here: pid 4242 (vllm) of job 41 (completed), run {RUN}; "
        f"pid 4243 (lmcache) of job 7 (ended), run {RUN}\n"
    )


def test_many_leftovers_are_counted_not_all_listed(host):
    proc, env = host
    for pid in range(300, 320):
        process(proc, pid, "python3", RUN_DIR=RUN, SLURM_JOB_ID="7")
    done = leftovers(proc, env)
    assert done.returncode == 1 and done.stderr.endswith("; and 12 more\n")


def test_what_a_process_says_of_itself_reaches_the_line_printable(host):
    proc, env = host
    process(proc, 500, "x\x1b[2Jy", RUN_DIR="/r\x07un", SLURM_JOB_ID="7")
    done = leftovers(proc, env)
    assert done.returncode == 1 and "\x1b" not in done.stderr and "\x07" not in done.stderr


def test_a_slurm_that_cannot_answer_fails_the_check_instead_of_guessing(host, tmp_path):
    proc, env = host
    process(proc, 600, "vllm", RUN_DIR=RUN, SLURM_JOB_ID="7")
    broken = stub_squeue(
        tmp_path / "broken", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1"
    )
    done = leftovers(proc, {**env, "PATH": f"{broken}:{env['PATH']}"})
    assert done.returncode == 1
    assert (
        "squeue --jobs 7 exited 1: slurm_load_jobs error: Unable to contact slurm controller" in done.stderr
    )


def test_this_machines_own_processes_are_read():
    """The real /proc: this test's own process is found with its job (set here), and is this job's."""
    env = {**os.environ, "RUN_DIR": "/tmp/x", "SLURM_JOB_ID": "9999999"}
    done = sync("leftovers", "--job", "9999999", timeout=60, env=env)
    assert done.returncode == 0, done.stderr


def test_hostcheck_fails_the_node_on_a_real_leftover_and_names_its_cause(host, tmp_path):
    """A real process of "job 7" (which SLURM forgot) on this host: the host preflight fails, its outcome
    carries cause leftover-process, and nothing after it (the NIC check) runs."""
    _, env = host
    run_dir = tmp_path / "run"
    stray = subprocess.Popen(
        ["sleep", "300"], env={**env, "RUN_DIR": "/old/run", "SLURM_JOB_ID": "7"}, start_new_session=True
    )
    try:
        job = {"RUN_DIR": str(run_dir), "SLURMD_NODENAME": "sim2", "SLURM_JOB_ID": "60"}
        done = hostcheck({**env, **job}, "--interface", "lo", timeout=60)
    finally:
        stray.kill()
        stray.wait()
    assert done.returncode == 1
    said = f"pid {stray.pid} (sleep) of job 7 (ended), run /old/run"
    assert f"FAILED host preflight on sim2: processes of earlier jobs still run here: {said}" in done.stderr
    outcome = (run_dir / "state/sim2/outcome").read_text()
    assert "step=host preflight\ncause=leftover-process\n" in outcome
    assert not (run_dir / "state/sim2/nic-facts.json").exists()
