"""Every process of each simulated node for `make bench-scale` (its slurmd, the job's slurmstepd, node
script, simulated engine and tools), found in /proc: memory per node, summed (RSS, and PSS: shared pages
split between their users, so the sum over nodes is what the host really holds), and the CPU a node's job
processes had used at one moment (job_cpu)."""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from sim.cluster.daemons import MARKER

PROC = Path("/proc")
_KIB = re.compile(rb"^(Rss|Pss):\s+(\d+) kB", re.M)
# What a process is, by its command line (first match wins); the node script is the bash srun started.
KINDS = (
    ("slurmd", re.compile(r"^\S*slurmd\b")),
    ("slurmstepd", re.compile(r"^slurmstepd")),
    ("engine", re.compile(r"sim/bin/vllm|vllm serve")),
    ("router", re.compile(r"-m proxy\b")),
    ("benchmark", re.compile(r"aiperf")),
    ("node script", re.compile(r"^(\S*/)?bash\b")),
)


@dataclass(frozen=True)
class Proc:
    pid: int
    node: str
    kind: str
    rss_kib: int
    pss_kib: int


def kind_of(cmdline: str) -> str:
    return next((name for name, pattern in KINDS if pattern.search(cmdline)), "tools")


def node_of(cmdline: str, environ: bytes, cluster_dir: str, job_id: str) -> str | None:
    """The simulated node a process belongs to: a slurmd of this cluster by its -N, a process of JOB_ID by
    the node name SLURM gave its environment; None for anything else (another job, the host)."""
    env = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
    if env.get(MARKER.encode()) == cluster_dir.encode():
        slurmd = re.search(r"\bslurmd\b.*\s-N\s+(\S+)", cmdline)
        if slurmd:
            return slurmd[1]
    if env.get(b"SLURM_JOB_ID") == job_id.encode():
        node = env.get(b"SLURMD_NODENAME")
        return node.decode() if node else None
    return None


def memory_of(rollup: bytes) -> tuple[int, int]:
    """(Rss, Pss) in KiB from /proc/<pid>/smaps_rollup."""
    found = {name.decode(): int(kib) for name, kib in _KIB.findall(rollup)}
    return found.get("Rss", 0), found.get("Pss", 0)


def stat_fields(stat: bytes) -> tuple[int, int]:
    """(ppid, CPU ticks) from /proc/<pid>/stat; the CPU is utime + stime + cutime + cstime: the process's
    own and that of the children it has waited for (a reaped child's CPU stays counted, in its parent)."""
    fields = stat.rsplit(b")", 1)[1].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15])


def read_stats(proc: Path = PROC) -> dict[int, tuple[int, int]]:
    """Every live process's (ppid, CPU ticks); one small file each, nothing else read: quick enough to be
    a snapshot on a host whose CPUs are saturated (a process that ends while read is left out)."""
    out = {}
    for name in os.listdir(proc):
        if name.isdigit():
            try:
                out[int(name)] = stat_fields((proc / name / "stat").read_bytes())
            except (OSError, ValueError, IndexError):
                continue
    return out


def job_cpu(stats: dict[int, tuple[int, int]], engine_pids: dict[str, int]) -> dict[str, int]:
    """CPU ticks per node of its job's processes: every process under the slurmstepd that runs the node
    script which started ENGINE_PIDS[node] (the engine's service wrapper: node script -> its parent). Not
    the node's slurmd, which ran before the job and serves every job. A node whose chain is not in STATS
    (a process gone) is left out."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out = {}
    for node, engine in engine_pids.items():
        script = stats.get(engine, (0, 0))[0]
        stepd = stats.get(script, (0, 0))[0]
        if stepd <= 1 or stepd not in stats:
            continue
        total, todo, seen = 0, [stepd], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total += stats[pid][1]
            todo.extend(children.get(pid, ()))
        out[node] = total
    return out


def sample(cluster_dir: str, job_id: str) -> list[Proc]:
    """Every live process of the cluster's nodes and the job, with its memory (processes that end while
    they are read are skipped: the next sample sees the steady state again). A job's slurmstepd has no node
    in its environment: it is the node of the tasks it runs (its children)."""
    seen: dict[int, tuple[int, str, str | None, tuple[int, int]]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if not cmdline:
                continue  # a kernel thread
            node = node_of(cmdline, (entry / "environ").read_bytes(), cluster_dir, job_id)
            stepd = cmdline.startswith("slurmstepd") and f"[{job_id}." in cmdline
            if node is None and not stepd:
                continue
            memory = memory_of((entry / "smaps_rollup").read_bytes())
            seen[int(entry.name)] = (stat_fields((entry / "stat").read_bytes())[0], cmdline, node, memory)
        except (OSError, ValueError, IndexError):
            continue
    out = []
    for pid, (_, cmdline, node, (rss, pss)) in seen.items():
        if node is None:  # a slurmstepd: its children's node
            node = next((n for ppid, _, n, _ in seen.values() if ppid == pid and n), None)
        if node is not None:
            out.append(Proc(pid, node, kind_of(cmdline), rss, pss))
    return out


@dataclass
class NodeMemory:
    """One node's sum over its processes (median of the samples taken at steady state), in MiB."""

    node: str
    rss_mib: float
    pss_mib: float
    processes: int
    by_kind_rss_mib: dict[str, float] = field(default_factory=dict)


def per_node(samples: list[list[Proc]]) -> list[NodeMemory]:
    """The median over SAMPLES of each node's sums (a sample where a node shows fewer processes than in
    the fullest one, caught mid-start or mid-exit, still counts: the median takes care of it)."""
    nodes = sorted({p.node for s in samples for p in s}, key=lambda n: (len(n), n))
    out = []
    for node in nodes:
        rss, pss, count, kinds = [], [], [], {}
        for s in samples:
            mine = [p for p in s if p.node == node]
            if not mine:
                continue
            rss.append(sum(p.rss_kib for p in mine) / 1024)
            pss.append(sum(p.pss_kib for p in mine) / 1024)
            count.append(len(mine))
            for p in mine:
                kinds.setdefault(p.kind, {}).setdefault(id(s), 0.0)
                kinds[p.kind][id(s)] += p.rss_kib / 1024
        by_kind = {k: round(statistics.median(v.values()), 1) for k, v in sorted(kinds.items())}
        out.append(
            NodeMemory(
                node,
                round(statistics.median(rss), 1),
                round(statistics.median(pss), 1),
                round(statistics.median(count)),
                by_kind,
            )
        )
    return out


def summary(nodes: list[NodeMemory], leader: str) -> dict:
    """Per node MiB: the median node other than the leader (router and benchmark client live there), the
    leader, and the total over the job's nodes."""
    others = [n for n in nodes if n.node != leader]
    lead = next((n for n in nodes if n.node == leader), None)
    return {
        "node_rss_mib": statistics.median(n.rss_mib for n in others) if others else None,
        "node_pss_mib": statistics.median(n.pss_mib for n in others) if others else None,
        "leader_rss_mib": lead.rss_mib if lead else None,
        "leader_pss_mib": lead.pss_mib if lead else None,
        "total_rss_mib": round(sum(n.rss_mib for n in nodes), 1),
        "total_pss_mib": round(sum(n.pss_mib for n in nodes), 1),
        "node_by_kind_rss_mib": others[len(others) // 2].by_kind_rss_mib if others else {},
    }
