"""A job's worst case against its runner's time limit: every bounded wait and every measured second the plan
holds, summed as if each ran to its bound. SLURM kills a job at its limit without a verdict and without the
results of the point it was measuring; a plan whose worst case does not fit is refused at render (and so by
lint), naming the numbers, instead of dying hours into an allocation."""

from __future__ import annotations

from dataclasses import dataclass

from scripts.bounds import METRICS_S, SAME_ANSWERS_S, SMOKE_ANSWER_S

from . import accuracy
from .benchmark import point_seconds, seconds_of
from .plan import Timeouts
from .target import Target, Unsupported

AIPERF_GRACE_S = 30  # AIPerf's --benchmark-grace-period when the runner sets none
AIPERF_CONFIGURE_S = 300  # AIPerf's dataset-configuration timeout when the plan sets none (0.13.0)


@dataclass(frozen=True)
class Item:
    what: str
    seconds: int
    times: int = 1

    @property
    def total(self) -> int:
        return self.seconds * self.times

    def __str__(self) -> str:
        each = f"{self.times} x {self.seconds} s" if self.times > 1 else f"{self.seconds} s"
        return f"{self.what} {each}"


def worst_case(t: Target, timeouts: Timeouts, *, points: int, flushes: bool, soak_phases: int = 0) -> tuple:
    """Every step of the job at its bound, in the order the job takes them (a soak: its phases instead of
    the sweep's points)."""
    p = t.launch
    items = []
    if p.nic_check is not None:
        items.append(Item("host check", p.nic_check.timeout))
    items.append(Item("start barrier (node setup included)", timeouts.barrier))
    if t.uses_lmcache:
        items.append(Item("LMCache ready", timeouts.lmcache_ready))
    items.append(Item("engines ready", timeouts.engine_ready))
    if t.disagg:
        items.append(Item("router ready", timeouts.router_ready))
    items.append(Item("smoke request and proofs", int(SMOKE_ANSWER_S + 2 * METRICS_S)))
    if t.answers_checked:
        items.append(Item("same-answers check", int(SAME_ANSWERS_S)))
    runs = soak_phases or points
    items.append(
        Item("benchmark" if not soak_phases else "soak phase", _one_benchmark(t, soak_phases > 0), runs)
    )
    if flushes:
        items.append(Item("cache flush", timeouts.cache_flush, runs))
    if accuracy.concurrency(t, soak=soak_phases > 0) is not None:
        items.append(Item("accuracy eval", p.benchmark.accuracy.seconds))
    items.append(
        Item(
            "teardown",
            p.teardown.grace + (p.teardown.container_stop if p.container_runtime == "docker" else 0),
        )
    )
    return tuple(items)


def _one_benchmark(t: Target, soak: bool) -> int:
    """One concurrency (or soak phase) at its bound: the client's configuration, the agentic warm-up and its
    drain, the measured duration, the grace for answers in flight, the counters saved after it."""
    bench = t.launch.benchmark
    seconds = bench.seconds if soak else point_seconds(t)  # a soak phase lasts the runner's seconds
    after = seconds + (bench.grace_seconds or AIPERF_GRACE_S) + int(METRICS_S)
    if t.point.scenario != "agentic-coding":
        return AIPERF_CONFIGURE_S + after
    replay = bench.agentic_replay
    return replay.configure_seconds + replay.warmup_seconds + replay.warmup_grace_seconds + after


def check(t: Target, items: tuple, *, soak: bool = False) -> None:
    """Unsupported, with the sum and its parts, when the worst case outlasts the runner's time limit."""
    limit = seconds_of(t.launch.time_limit)
    total = sum(i.total for i in items)
    if total <= limit:
        return
    parts = ", ".join(str(i) for i in items)
    fewer = (
        "a shorter soak (fewer phases)"
        if soak
        else "fewer concurrencies (each is measured in this allocation)"
    )
    profile = f"configs/launch.yaml profiles.{t.runner_label}"
    agentic = t.point.scenario == "agentic-coding" and not soak
    duration = "benchmark.agentic-replay.seconds" if agentic else "benchmark.seconds"
    raise Unsupported(
        f"the job's worst case is {_hms(total)} ({total} s: {parts}), over runner {t.runner_label}'s "
        f"time-limit {t.launch.time_limit} ({limit} s), set in {profile}.time-limit: SLURM would end it "
        f"mid-measurement without a verdict. Ask for {fewer}, or a shorter measured duration ({profile}."
        f"{duration}) or shorter waits (its timeouts); or, if the site allows longer jobs, raise "
        f"{profile}.time-limit",
        at=t.point.path,
    )


def _hms(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
