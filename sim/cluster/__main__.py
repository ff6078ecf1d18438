"""`python -m sim.cluster up|down|status`: the local SLURM cluster behind `make cluster-*`."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Callable

from sim import apt
from sim.cluster import daemons as dm
from sim.cluster.layout import (
    MAX_NODES,
    Layout,
    Node,
    client_env,
    default_layout,
    nodes,
    prepare,
    render_conf,
)

PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "squeue")
# Node states in which a node takes (or runs) jobs; down, drained or not responding (`idle*`) are not up.
UP_STATES = {"idle", "allocated", "mixed", "completing"}
START_TIMEOUT = 15.0  # munged and slurmctld answer within a second here; this only bounds a hang


def ensure_installed(layout: Layout) -> None:
    """apt-get install slurm-wlm and munge when a program is missing (root only, as CI is)."""
    path = client_env(layout)["PATH"]
    missing = [p for p in PROGRAMS if shutil.which(p, path=path) is None]
    if missing:
        try:
            apt.install(PACKAGES, ", ".join(missing))
        except apt.AptError as err:
            raise dm.ClusterError(str(err)) from None


def _client(layout: Layout, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=client_env(layout), capture_output=True, text=True, timeout=20)


def node_states(layout: Layout) -> dict[str, tuple[str, str]]:
    """{node: (NodeAddr, state)} as sinfo reports them; empty when the controller does not answer."""
    out = _client(layout, "sinfo", "--noheader", "--Node", "--partition=sim", "--format=%N %o %T")
    rows = (line.split() for line in out.stdout.splitlines()) if out.returncode == 0 else ()
    return {row[0]: (row[1], row[2]) for row in rows if len(row) == 3}


def configured_nodes(layout: Layout) -> tuple[Node, ...]:
    """The nodes of the slurm.conf last written: what runs, or ran."""
    try:
        count = len(re.findall(r"^NodeName=sim\d+ ", layout.conf.read_text(), flags=re.M))
    except OSError:
        return ()
    return nodes(count) if count else ()


def _munge_ready(layout: Layout) -> bool:
    return _client(layout, "munge", "--no-input", "--socket", str(layout.munge_socket)).returncode == 0


def _ctld_ready(layout: Layout) -> bool:
    return "is UP" in _client(layout, "scontrol", "ping").stdout


def _nodes_ready(layout: Layout, node_list: tuple[Node, ...]) -> bool:
    states = node_states(layout)
    return all(states.get(n.name, ("", ""))[1] in UP_STATES for n in node_list)


def _ensure(
    layout: Layout,
    group: tuple[dm.Daemon, ...],
    what: str,
    ready: Callable[[], bool],
    watched: tuple[dm.Daemon, ...],
    timeout: float,
) -> None:
    """Start whichever of `group` is not running (so a second cluster-up starts nothing), then wait."""
    for daemon in group:
        if dm.running_pid(layout, daemon) is None:
            print(f"starting {daemon.name}: {' '.join(daemon.argv)}", flush=True)
            dm.start(layout, daemon)
    dm.wait_for(what, ready, watched, layout, timeout)


def up(layout: Layout, count: int, timeout: float) -> int:
    ensure_installed(layout)
    node_list = nodes(count)
    conf = render_conf(layout, node_list)
    running = [d.name for d in dm.daemons(layout, nodes(MAX_NODES)) if dm.running_pid(layout, d)]
    if running and layout.conf.exists() and layout.conf.read_text() != conf:
        raise dm.ClusterError(
            f"{', '.join(running)} run with another {layout.conf} (NODES changed?): "
            "run `make cluster-down` first"
        )
    prepare(layout, conf)
    munged, ctld, *slurmds = dm.daemons(layout, node_list)
    _ensure(layout, (munged,), "munged to answer", lambda: _munge_ready(layout), (munged,), START_TIMEOUT)
    ctld_up = "slurmctld to answer `scontrol ping`"
    _ensure(layout, (ctld,), ctld_up, lambda: _ctld_ready(layout), (munged, ctld), START_TIMEOUT)
    nodes_up = f"nodes {','.join(n.name for n in node_list)} to be up"
    try:
        _ensure(
            layout,
            tuple(slurmds),
            nodes_up,
            lambda: _nodes_ready(layout, node_list),
            (munged, ctld, *slurmds),
            timeout,
        )
    except dm.ClusterError as err:
        states = " ".join(f"{name}={state}" for name, (_, state) in node_states(layout).items())
        raise dm.ClusterError(
            f"{err}\nnode states: {states or 'controller does not answer'}\n"
            "daemons left running to look at: `make cluster-status`, then `make cluster-down`"
        ) from None
    return status(layout)


def status(layout: Layout) -> int:
    """Print daemons and nodes; 0 only if every daemon is alive and every node is up at its address."""
    node_list = configured_nodes(layout)
    if not node_list:
        print(f"no cluster configured ({layout.conf} missing): run `make cluster-up`")
        return 1
    ok = True
    print(f"{'DAEMON':<12} {'PID':>8}  STATE")
    for daemon in dm.daemons(layout, node_list):
        pid = dm.running_pid(layout, daemon)
        ok &= pid is not None
        print(f"{daemon.name:<12} {pid or '-':>8}  {'running' if pid else 'NOT RUNNING'}")
    states = node_states(layout) if ok else {}
    print(f"\n{'NODE':<6} {'ADDR':<12} {'PORT':>6}  STATE")
    for node in node_list:
        addr, state = states.get(node.name, ("?", "unknown"))
        ok &= state in UP_STATES and addr == node.addr
        print(f"{node.name:<6} {addr:<12} {node.port:>6}  {state}")
    print(f"\nexport SLURM_CONF={layout.conf}   # or: source sim/cluster/env.sh")
    return 0 if ok else 1


def down(layout: Layout) -> int:
    """Cancel our jobs, stop our daemons by recorded PID (slurmd first), verify nothing of ours is left."""
    everything = dm.daemons(layout, nodes(MAX_NODES))
    if dm.running_pid(layout, everything[1]) is not None:
        _cancel_jobs(layout, dm.daemons(layout, configured_nodes(layout))[2:])
    for daemon in reversed(everything):
        result = dm.stop(layout, daemon)
        if result != "not running":
            print(f"{daemon.name}: {result}")
    left = dm.leftovers(layout)
    if left:  # e.g. the slurmstepd of a job whose slurmd died: ours by its environment marker
        print("ending leftovers: " + ", ".join(f"{comm}[{pid}]" for pid, comm in left))
        dm.terminate([pid for pid, _ in left], grace=5.0)
        left = dm.leftovers(layout)
    if left:
        print("still running: " + ", ".join(f"{comm}[{pid}]" for pid, comm in left), file=sys.stderr)
        return 1
    print("cluster down: no daemon of ours left")
    return 0


def _cancel_jobs(layout: Layout, slurmds: tuple[dm.Daemon, ...]) -> None:
    """Jobs end while their slurmds still run, so no job step outlives its slurmd; with a slurmd
    already dead this gives up at once (the leftover sweep ends what that node's jobs left)."""
    jobs = _client(layout, "squeue", "--noheader", "--format=%A").stdout.split()
    if not jobs:
        return
    print(f"cancelling jobs {' '.join(jobs)}", flush=True)
    _client(layout, "scancel", *jobs)
    try:
        dm.wait_for(
            "cancelled jobs to end",
            lambda: not _client(layout, "squeue", "--noheader").stdout,
            slurmds,
            layout,
            timeout=30,
        )
    except dm.ClusterError as err:
        print(f"cluster-down: {str(err).split(';')[0]}; stopping anyway", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.cluster", description=__doc__)
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--nodes", type=int, default=3, help="simulated nodes for `up` (default 3)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds for the nodes to come up")
    args = parser.parse_args(argv)
    layout = default_layout()
    try:
        if args.command == "up":
            return up(layout, args.nodes, args.timeout)
        return down(layout) if args.command == "down" else status(layout)
    except (dm.ClusterError, ValueError) as err:
        print(f"cluster-{args.command}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
