"""The local SLURM cluster as the rendered jobs use it: 3 nodes at their own loopback addresses,
sbatch + srun one task per node, srun --kill-on-bad-exit ending the others, make targets that
start nothing twice and leave nothing behind."""

from __future__ import annotations

import re
import socket
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sim.cluster import daemons
from tests.cluster.harness import NODES, Cluster, make

# The job header the renderer writes for the local runner (tests/golden/local-sim-*/job.sbatch).
HEADER = """#!/usr/bin/env bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --partition=sim
#SBATCH --time=00:02:00
set -Eeuo pipefail
"""
JOB_CEILING = 60  # seconds: a generous bound for jobs that take about a second here, never a wait
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


@dataclass(frozen=True)
class Job:
    state: str
    exit_code: str  # "<code>:<signal>", as scontrol shows it
    output: str
    seconds: float


def _run_job(cluster: Cluster, tmp_path: Path, body: str) -> Job:
    """Submit HEADER + body and poll until it ends. (Not `sbatch --wait`: it looks after 2 s, then
    every 10 s, so a job that ends in 1 s can cost 10.)"""
    script = tmp_path / "job.sbatch"
    script.write_text(HEADER + body)
    out = tmp_path / "job.out"
    start = time.monotonic()
    submitted = cluster.run("sbatch", "--parsable", f"--chdir={tmp_path}", f"--output={out}", str(script))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    while time.monotonic() - start < JOB_CEILING:
        shown = dict(re.findall(r"(\w+)=(\S*)", cluster.run("scontrol", "show", "job", "-o", job_id).stdout))
        if shown.get("JobState") not in ACTIVE:
            return Job(shown["JobState"], shown["ExitCode"], out.read_text(), time.monotonic() - start)
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {shown.get('JobState')} after {JOB_CEILING} s")


def test_three_nodes_idle_each_at_its_own_address(cluster: Cluster):
    for node in NODES:
        shown = cluster.run("scontrol", "show", "node", "--oneliner", node.name).stdout
        assert f"NodeAddr={node.addr} " in shown
        assert re.search(r"\bState=IDLE\b", shown), shown
        assert "Partitions=sim " in shown


def test_batch_job_runs_one_task_per_node_that_resolves_its_address(cluster: Cluster, tmp_path: Path):
    # What job.sbatch and sync.py do: node list from scontrol, each node's address from its NodeAddr.
    body = """scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -
srun --kill-on-bad-exit=1 bash -c \\
  'echo "task $SLURMD_NODENAME $SLURM_NODEID $(scontrol show node --oneliner "$SLURMD_NODENAME" \\
   | grep -o "NodeAddr=[0-9.]*")"'
"""
    job = _run_job(cluster, tmp_path, body)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output
    assert job.output.splitlines()[0] == "sim1,sim2,sim3"
    tasks = sorted(line.split()[1:] for line in job.output.splitlines() if line.startswith("task "))
    assert tasks == [[n.name, str(i), f"NodeAddr={n.addr}"] for i, n in enumerate(NODES)]


def test_kill_on_bad_exit_ends_the_other_nodes(cluster: Cluster, tmp_path: Path):
    body = """srun --kill-on-bad-exit=1 bash -c \\
  'if [ "$SLURM_NODEID" = 1 ]; then exit 3; fi; exec sleep infinity'
"""
    job = _run_job(cluster, tmp_path, body)
    assert job.state == "FAILED", job.output
    assert "task 1: Exited with exit code 3" in job.output
    assert job.output.count(": Terminated") == 2, job.output  # the two sleeping nodes, ended by srun
    # srun's own exit code (the job's) is the highest task code: 143 from the SIGTERMed, not 3.
    assert job.exit_code == "143:0"


def test_cluster_up_again_starts_nothing(cluster: Cluster):
    before = cluster.pids()
    again = make("cluster-up")
    assert again.returncode == 0, again.stderr
    assert "starting" not in again.stdout
    assert cluster.pids() == before
    names = Counter(name for _, name in daemons.leftovers(cluster.layout))
    assert (names["munged"], names["slurmctld"], names["slurmd"]) == (1, 1, 3)


def test_cluster_down_leaves_nothing_and_up_comes_back(cluster: Cluster):
    assert make("cluster-down").returncode == 0
    assert daemons.leftovers(cluster.layout) == []
    assert list(cluster.layout.pids.glob("*.pid")) == []
    assert make("cluster-status").returncode != 0
    for node in NODES:  # nothing listens at the slurmd ports any more
        with socket.socket() as sock:
            assert sock.connect_ex((node.addr, node.port)) != 0
    up = make("cluster-up")
    assert up.returncode == 0, up.stderr
    assert make("cluster-status").returncode == 0


def test_cluster_up_names_the_daemon_that_died_and_why(cluster: Cluster):
    assert make("cluster-down").returncode == 0
    node = NODES[1]
    with socket.socket() as squatter:  # takes sim2's slurmd port, so that slurmd exits at start
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the TIME_WAITs
        squatter.bind(("0.0.0.0", node.port))
        squatter.listen()
        failed = make("cluster-up")
    assert failed.returncode != 0
    assert f"slurmd-{node.name} exited while waiting for nodes" in failed.stderr
    assert f"Unable to bind listen port ({node.port})" in failed.stderr  # the tail of its log
    assert make("cluster-down").returncode == 0
    assert make("cluster-up").returncode == 0
