"""Where the local cluster lives (.cluster/), its nodes, and the slurm.conf written from the template."""

from __future__ import annotations

import os
import socket
import string
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Path(__file__).with_name("slurm.conf.in")

CTLD_ADDR = "127.0.0.10"  # the controller is not a node: it gets an address no node uses
CTLD_PORT = 16817
SLURMD_PORT_BASE = 16820  # simN's slurmd listens on 16820 + N
# 32: the widest wide-EP jobs users run (16-32 nodes), for `make bench-scale`; node addresses 127.0.0.11..42
# and slurmd ports 16821..16852, clear of the controller (.10, 16817) and of every service port a job uses.
MAX_NODES = 32
# Node shape of runner `cluster:local-sim` in configs/runners.yaml (available-cpu-dram-mib); a test keeps
# them equal.
NODE_CPUS = 2
NODE_MEMORY_MIB = 4096


@dataclass(frozen=True)
class Node:
    name: str
    addr: str
    port: int


def nodes(count: int) -> tuple[Node, ...]:
    """sim1..simN, each on its own loopback address (127.0.0.11, .12, ...) and slurmd port."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"NODES must be 1..{MAX_NODES}, got {count}")
    return tuple(Node(f"sim{i}", f"127.0.0.{10 + i}", SLURMD_PORT_BASE + i) for i in range(1, count + 1))


@dataclass(frozen=True)
class Layout:
    """Every path the cluster writes; all under one git-ignored folder."""

    dir: Path

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def state(self) -> Path:
        return self.dir / "state"

    @property
    def run(self) -> Path:  # daemons' own PID files and the munge socket
        return self.dir / "run"

    @property
    def pids(self) -> Path:  # PIDs recorded by cluster-up: what cluster-down stops
        return self.dir / "pids"

    @property
    def log(self) -> Path:
        return self.dir / "log"

    @property
    def munge(self) -> Path:  # key and seed: owner-only, as munged insists
        return self.dir / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.run / "munge.socket"


def default_layout() -> Layout:
    return Layout(ROOT / ".cluster")


def client_env(layout: Layout) -> dict[str, str]:
    """The environment in which the daemons run and sbatch/srun/scontrol/sinfo talk to this cluster.

    PATH gains the sbin folders, where Debian puts the daemons, for callers whose PATH lacks them."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
    return {**os.environ, "PATH": path, "SLURM_CONF": str(layout.conf)}


def render_conf(layout: Layout, node_list: tuple[Node, ...]) -> str:
    node_lines = "\n".join(
        f"NodeName={n.name} NodeAddr={n.addr} Port={n.port} CPUs={NODE_CPUS} Sockets=1 "
        f"CoresPerSocket={NODE_CPUS} ThreadsPerCore=1 RealMemory={NODE_MEMORY_MIB} State=UNKNOWN"
        for n in node_list
    )
    return string.Template(TEMPLATE.read_text()).substitute(
        host=socket.gethostname().split(".")[0],
        ctld_addr=CTLD_ADDR,
        ctld_port=CTLD_PORT,
        munge_socket=layout.munge_socket,
        dir=layout.dir,
        state=layout.state,
        run=layout.run,
        log=layout.log,
        nodes=node_lines,
        node_list=",".join(n.name for n in node_list),
    )


def prepare(layout: Layout, conf_text: str) -> None:
    """Create the folders (with the modes munged checks), the munge key once, and slurm.conf."""
    for path, mode in (
        (layout.dir, 0o755),
        (layout.state, 0o755),
        (layout.run, 0o755),
        (layout.pids, 0o755),
        (layout.log, 0o755),
        (layout.munge, 0o700),
    ):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)  # munged refuses a socket dir others cannot enter, a key dir others can
    if not layout.munge_key.exists():
        fd = os.open(layout.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as key:
            key.write(os.urandom(1024))
    plugstack = layout.dir / "plugstack.conf"
    if not plugstack.exists():
        plugstack.write_text("# No SPANK plugins in the local cluster.\n")
    if not layout.conf.exists() or layout.conf.read_text() != conf_text:
        layout.conf.write_text(conf_text)
