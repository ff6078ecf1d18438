"""What the cluster tests share: the make targets as a person types them, and SLURM clients pointed
at the local cluster."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from sim.cluster.layout import ROOT, Layout, client_env, nodes

NODES = nodes(3)


def make(target: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`make <target>` in the repository, as a person types it."""
    return subprocess.run(
        ["make", "--no-print-directory", "-s", "-C", str(ROOT), target],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@dataclass(frozen=True)
class Cluster:
    layout: Layout

    def run(self, *argv: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess[str]:
        """A SLURM client command (sbatch, scontrol, ...) pointed at this cluster."""
        return subprocess.run(
            argv,
            env=client_env(self.layout),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            **kwargs,
        )

    def pids(self) -> dict[str, str]:
        return {p.stem: p.read_text().strip() for p in sorted(self.layout.pids.glob("*.pid"))}
