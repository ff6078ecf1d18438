"""Every job's worst case against its runner's time limit (recipes/budget.py): summed from every bounded wait
and every measured second the plan holds, refused at render (so by lint) with the numbers when it does not
fit. SLURM ends a job at its limit without a verdict, and without the point it was measuring."""

from __future__ import annotations

import dataclasses

import pytest

from recipes import budget
from recipes.build import Unsupported, build_plan, timeouts_of

SEED = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"
XPYD = "kimik2.5-fp4-mi355x-vllm-disagg"


def with_limit(target, limit: str):
    return dataclasses.replace(target, launch=target.launch.model_copy(update={"time_limit": limit}))


def test_the_worst_case_sums_every_bound_of_an_agentic_point(configs):
    t = configs.targets(SEED)[0]
    items = {i.what: i for i in budget.worst_case(t, timeouts_of(t.launch), points=1, flushes=False)}
    replay = t.launch.benchmark.agentic_replay
    # the client's configuration, the warm-up and its drain, InferenceX's 3600 s, answers in flight, scrape
    assert items["benchmark"].seconds == 1800 + 600 + 1800 + 3600 + 30 + 10
    assert replay.seconds == 3600 and replay.configure_seconds == 1800
    assert items["engines ready"].seconds == 3600 and items["LMCache ready"].seconds == 300
    assert items["same-answers check"].seconds == 120  # the whole check's bound (scripts/bounds.py)
    assert sum(i.total for i in items.values()) == 13135  # 03:38:55, under the runner's 08:00:00


def test_a_job_that_outlasts_its_time_limit_is_refused_naming_the_numbers(configs):
    """The check can fail: the seed's point under InferenceX's old 04:00:00 fits, under 03:00:00 it does not;
    a fixed-seq-len point runs all of its concurrencies in one job and is told to ask for fewer."""
    t = configs.targets(SEED)[0]
    build_plan(with_limit(t, "04:00:00"))
    refused = (
        r"worst case is 03:38:55 \(13135 s: .*benchmark 7840 s.*\), over runner cluster:mi355x-amds's "
        r"time-limit 03:00:00 \(10800 s\)"
    )
    with pytest.raises(Unsupported, match=refused):
        build_plan(with_limit(t, "03:00:00"))
    fixed = configs.targets(XPYD)[0]
    with pytest.raises(Unsupported, match=r"benchmark 3 x 2140 s.* Ask for fewer concurrencies"):
        build_plan(with_limit(fixed, "02:00:00"))
