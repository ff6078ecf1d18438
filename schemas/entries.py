"""Walking a validated entry: its search-space points, their engines (workers) and typed settings, the KV
transfer of a point and the DRAM budget of its offloading server. Shared by the lint rules and the planner
(recipes/)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import dram
from . import settings as reg
from .config import AgenticCoding, FixedSeqLen, MasterEntry, SearchSpace, Worker
from .runners import Hardware
from .yamlio import Path_


@dataclass(frozen=True)
class Point:
    """One search-space item with where it sits and the scenario it belongs to."""

    path: Path_
    scenario: str  # fixed-seq-len | agentic-coding
    space: SearchSpace
    dram_utilization: float | None
    group: int = 0  # index of its scenario group (fixed-seq-len: which isl/osl pair)


SCENARIOS = ("fixed-seq-len", "agentic-coding")


def points(entry: MasterEntry, base: Path_) -> Iterator[Point]:
    """Every search-space item of the entry, in file order; `base` is the entry's key path."""
    sc = entry.scenarios
    scenarios: tuple[tuple[str, Sequence[FixedSeqLen | AgenticCoding] | None], ...] = (
        ("fixed-seq-len", sc.fixed_seq_len),
        ("agentic-coding", sc.agentic_coding),
    )
    for name, groups in scenarios:
        for gi, group in enumerate(groups or ()):
            for si, space in enumerate(group.search_space):
                path = base + ("scenarios", name, gi, "search-space", si)
                yield Point(path, name, space, getattr(group, "dram_utilization", None), gi)


def workers(entry: MasterEntry, base: Path_) -> Iterator[tuple[Path_, str, Worker, Point]]:
    """Every engine of every point: prefill and decode of a multinode point, the server of a single-node
    one (its settings sit on the point itself)."""
    for pt in points(entry, base):
        if not entry.multinode:
            if pt.space.tp is not None:
                yield pt.path, reg.SERVER, server_worker(pt.space), pt
            continue
        for role in reg.ROLES:
            worker = getattr(pt.space, role)
            if worker is not None:
                yield pt.path + (role,), role, worker, pt


def server_worker(space: SearchSpace) -> Worker:
    """The single engine of a single-node point, as a worker: one instance of tp GPUs."""
    return Worker.model_validate(
        {
            "num-worker": 1,
            "tp": space.tp,
            "pp": space.pp,
            "dcp-size": space.dcp_size,
            "pcp-size": space.pcp_size,
            "ep": space.ep,
            "dp-attn": space.dp_attn,
            "additional-settings": space.additional_settings,
        }
    )


def parsed_settings(worker: Worker) -> dict[str, Any]:
    """Known, well-formed settings of a worker as typed values (bad ones are reported by their rule)."""
    out: dict[str, Any] = {}
    for item in worker.additional_settings:
        try:
            key, raw = reg.split_setting(item)
            out[key] = reg.lookup(key).parse(raw)
        except reg.SettingError:
            continue
    return out


def recipe_pointers(space: SearchSpace, key: str = "srt-recipe") -> list[tuple[Path_, str]]:
    """Where the point names the srt-slurm recipe it runs (`key`: srt-recipe; eval-srt-recipe: its eval's),
    relative to the point: the key itself, and InferenceX's older form, a CONFIG_FILE (EVAL_CONFIG_FILE)
    setting on one of its workers."""
    setting = "CONFIG_FILE" if key == "srt-recipe" else "EVAL_CONFIG_FILE"
    value = space.srt_recipe if key == "srt-recipe" else space.eval_srt_recipe
    found: list[tuple[Path_, str]] = [((key,), value)] if value else []
    for role in (*reg.ROLES, "worker"):
        worker = getattr(space, role)
        for i, item in enumerate(worker.additional_settings if worker else ()):
            name, _, raw = item.partition("=")
            if name == setting:
                found.append(((role, "additional-settings", i), raw))
    return found


def role_gpus(worker: Worker) -> int:
    """GPUs one engine instance of this role spans: tp x pp x pcp-size."""
    return dram.footprint(worker.tp, worker.pp, worker.pcp_size)


def splits_experts(worker: Worker) -> bool:
    """Whether the worker's experts are split over its GPUs (ep > 1; ep absent or 1: not split)."""
    return (worker.ep or 1) > 1


def role_nodes(worker: Worker, gpus_per_node: int) -> int:
    """Nodes a role's workers take: each worker whole nodes of its own (one smaller than a node has one to
    itself, its other GPUs idle, as InferenceX runs a TP4 prefill on an 8-GPU node)."""
    return worker.num_worker * -(-role_gpus(worker) // gpus_per_node)


def kv_transfer(entry: MasterEntry, space: SearchSpace) -> str | None:
    """The KV transfer of a point: its own kv-p2p-transfer, else the entry's (InferenceX allows either)."""
    return space.kv_p2p_transfer or entry.kv_p2p_transfer


def offloading_worker(entry: MasterEntry, space: SearchSpace) -> Worker | None:
    """The engine whose node's DRAM the KV offload uses: a multinode point's prefill, else the server."""
    if entry.multinode:
        return space.prefill
    return server_worker(space) if space.tp is not None else None


def dram_budget(hw: Hardware, dram_utilization: float, worker: Worker) -> dram.DramBudget | None:
    """InferenceX's KV-offload DRAM budget of one server of `worker` (schemas/dram.py); None when the
    worker does not tile a node or the runner states no DRAM."""
    if hw.available_cpu_dram_mib is None:
        return None
    return dram.budget(hw.available_cpu_dram_mib, hw.gpus_per_node, dram_utilization, role_gpus(worker))
