"""Start the cluster's daemons in the foreground of their own session, record their PIDs, stop by PID."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sim.cluster.layout import Layout, Node, client_env

# Every daemon (and so every slurmstepd a slurmd forks) carries this in its environment: how
# cluster-down finds anything of ours that outlived its recorded PID, and nothing of anybody else's.
MARKER = "SIM_CLUSTER_DIR"


class ClusterError(RuntimeError):
    """A failure cluster-up/-down reports as one clear message (no traceback)."""


@dataclass(frozen=True)
class Daemon:
    name: str  # also the PID file's and the log's name
    argv: tuple[str, ...]
    log: Path  # its stdout and stderr


def daemons(layout: Layout, node_list: tuple[Node, ...]) -> tuple[Daemon, ...]:
    """In start order. -F/-D keep each in the foreground: the PID we spawn is the daemon's, and what
    it prints (all of it, even errors before slurm opens its own log) goes to log/<name>.out."""
    munged = Daemon(
        "munged",
        (
            "munged",
            "-F",
            f"--key-file={layout.munge_key}",
            f"--socket={layout.munge_socket}",
            f"--pid-file={layout.run / 'munged.pid'}",
            f"--seed-file={layout.munge / 'munged.seed'}",
        ),
        layout.log / "munged.out",
    )
    # -i: start even if the saved state is unreadable (a cluster killed mid-write), never refuse.
    ctld = Daemon(
        "slurmctld", ("slurmctld", "-D", "-i", "-f", str(layout.conf)), layout.log / "slurmctld.out"
    )
    slurmds = tuple(
        Daemon(
            f"slurmd-{n.name}",
            ("slurmd", "-D", "-N", n.name, "-f", str(layout.conf)),
            layout.log / f"slurmd-{n.name}.out",
        )
        for n in node_list
    )
    return (munged, ctld, *slurmds)


def _pid_file(layout: Layout, daemon: Daemon) -> Path:
    return layout.pids / f"{daemon.name}.pid"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _stat(pid: int | str) -> tuple[str, str, int] | None:
    """(name, state, parent pid) from /proc/<pid>/stat; None when there is no such process."""
    try:
        name, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
    except (OSError, ValueError):
        return None
    state, ppid = rest.split()[:2]
    return name.split("(", 1)[1], state, int(ppid)


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (the daemons are orphans: nobody may reap them here)."""
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"


def _is_ours(pid: int, daemon: Daemon) -> bool:
    """Alive and still our daemon: a recycled PID must never be signalled."""
    if not _alive(pid):
        return False
    argv = _cmdline(pid)
    return bool(argv) and Path(argv[0]).name == daemon.argv[0] and argv[1:] == list(daemon.argv[1:])


def running_pid(layout: Layout, daemon: Daemon) -> int | None:
    """The recorded PID if that process is alive and is this daemon, else None."""
    try:
        pid = int(_pid_file(layout, daemon).read_text())
    except (OSError, ValueError):
        return None
    return pid if _is_ours(pid, daemon) else None


def start(layout: Layout, daemon: Daemon) -> int:
    env = {**client_env(layout), MARKER: str(layout.dir)}
    with open(daemon.log, "wb") as log:  # this start only: slurm keeps history in its own .log
        proc = subprocess.Popen(
            daemon.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=layout.dir,
            start_new_session=True,
        )
    _pid_file(layout, daemon).write_text(f"{proc.pid}\n")
    return proc.pid


# Debian's slurmd loads every MPI plugin at start and PMIx is not installed: six harmless errors per
# start that would fill a log tail.
NOISE = re.compile(r"pmix|MPI: Cannot create context")


def log_tail(daemon: Daemon, lines: int = 10) -> str:
    try:
        text = daemon.log.read_text(errors="replace").splitlines()
    except OSError:
        return f"    (no log at {daemon.log})"
    return "\n".join(f"    {line}" for line in [t for t in text if not NOISE.search(t)][-lines:])


def wait_for(
    what: str, ready: Callable[[], bool], watched: tuple[Daemon, ...], layout: Layout, timeout: float
) -> None:
    """Poll `ready` until true; fail at once (with its log) if a watched daemon dies, or on timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        if ready():
            return
        for daemon in watched:
            if running_pid(layout, daemon) is None:
                raise ClusterError(
                    f"{daemon.name} exited while waiting for {what}; "
                    f"last lines of {daemon.log}:\n{log_tail(daemon)}"
                )
        if time.monotonic() > deadline:
            tails = "\n".join(f"  {d.name} ({d.log}):\n{log_tail(d)}" for d in watched)
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [pid for pid in pids if _alive(pid)]
    return pids


def terminate(pids: list[int], grace: float) -> list[int]:
    """SIGTERM, wait up to `grace` seconds, SIGKILL the rest; returns PIDs still there after that."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        pids = _wait_gone(pids, grace if sig == signal.SIGTERM else 5.0)
        if not pids:
            break
    return pids


def stop(layout: Layout, daemon: Daemon, grace: float = 10.0) -> str:
    """Stop the daemon by its recorded PID (only if it is still ours); forget the PID either way."""
    pid = running_pid(layout, daemon)
    _pid_file(layout, daemon).unlink(missing_ok=True)
    if pid is None:
        return "not running"
    left = terminate([pid], grace)
    return f"stopped (pid {pid})" if not left else f"pid {pid} survived SIGKILL"


def _processes() -> dict[int, tuple[int, str, bytes]]:
    """{pid: (parent pid, name, environment)} of every live process but this one."""
    table = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        stat = _stat(proc.name)
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if stat is not None and stat[1] != "Z":
            table[int(proc.name)] = (stat[2], stat[0], environ)
    return table


def leftovers(layout: Layout) -> list[tuple[int, str]]:
    """Processes of this cluster still alive: those carrying our marker (daemons, slurmstepd) and
    their descendants (job tasks whose slurmstepd is gone), as (pid, name)."""
    marker = f"{MARKER}={layout.dir}".encode()
    table = _processes()
    found = {pid for pid, (_, _, environ) in table.items() if marker in environ.split(b"\0")}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    return sorted((pid, table[pid][1]) for pid in found)
