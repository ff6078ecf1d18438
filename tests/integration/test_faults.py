"""Fail-fast on the local cluster, a fast subset of `make bench-failfast` (tests/bench/failfast_*.py):
the demo job with one fault injected must end -- all nodes -- within the node scripts' poll interval
+ 5 s of the fault, with a non-zero exit code, its main output naming the failing step, service and
node with the service's log tail and the failure's cause class, and no process of the job left running.

Five faults, three ways in: a PATH wrapper (LMCache exits at start; detected while waiting for it to
become healthy), a port taken on a node's address before submission (the router cannot bind), and the
simulator's own SIM_FAULT (the decode crashes with streams in flight, detected by the supervisor; on the
SGLang + MoRI job, a NIC runs out of RDMA retries mid-benchmark, detected by the log watcher; the decode's
KV corrupted in transit, caught by the same-answers check before the sweep).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.bench.failfast_faults import BY_NAME, Fault
from tests.bench.failfast_job import Recipe, render, run_fault

MARGIN_S = 5.0
# The decode crashes on its 9th request: the smoke request, the same-answers check's 6 (scripts/proof.py
# ANSWER_PROMPTS), then the first ones of the benchmark.
DECODE_CRASH = dataclasses.replace(
    BY_NAME["decode-crash-mid-stream"],
    env={"SIM_FAULT": "crash-after:9", "SIM_FAULT_ROLE": "decode"},
    instant="sim-line:sim3/vllm",
)
FAULTS: dict[str, Fault] = {
    "lmcache-exit-at-start": BY_NAME["lmcache-exit-at-start"],
    "router-bind-fails": BY_NAME["router-bind-fails"],
    "decode-crash-mid-stream": DECODE_CRASH,
    "rdma-retry-exceeded": BY_NAME["rdma-retry-exceeded"],
    # KV corrupted in transit: fast, plausible answers that only comparing them catches
    "answers-differ": BY_NAME["answers-differ"],
}


@pytest.fixture(scope="module")
def recipes(demo_tools) -> dict[tuple[str, str], Recipe]:
    """Each job the faults run on, rendered once."""
    return {key: render(*key) for key in dict.fromkeys((f.config, f.variant) for f in FAULTS.values())}


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_fault_ends_the_whole_job_fast_naming_it_and_leaving_nothing(cluster, recipes, tmp_path, name):
    fault = FAULTS[name]
    recipe = recipes[fault.config, fault.variant]
    record = run_fault(fault, recipe, tmp_path)
    where = f"{record.run_dir}/job.out"
    assert record.fault_at is not None, f"the fault never took effect: {record.notes} ({where})"
    assert record.detected, f"job {record.job_id} ended {record.state} {record.exit_code} ({where})"
    target = recipe.poll_interval + MARGIN_S
    assert record.detection_s is not None and record.detection_s < target, (
        f"fault to job end {record.detection_s} s, target {target} s ({where})"
    )
    assert record.named, f"the main output lacks {record.named_missing} ({where})"
    assert record.classified, (record.cause, record.cause_detail, f"expected {record.cause_expected}")
    assert record.left_at_end == [], f"left running at the job's end: {record.left_at_end}"
    assert record.results_kept, record.notes


def test_wrong_answers_pass_the_kv_checks_and_fail_the_graded_eval(cluster, recipes, tmp_path):
    """Every engine answers the eval's sums wrongly the same way (SIM_FAULT wrong-answers): the smoke request,
    the KV proof and the same-answers check pass, the sweep runs and keeps its results, and the graded eval
    after it fails the job as a quality failure (exit 18, cause accuracy-below-threshold), its score recorded.
    Its detection is the eval's own run (questions still to ask after the first wrong answer), so no time
    target: what is asserted is that it is caught, classified and leaves nothing."""
    fault = BY_NAME["accuracy-below-threshold"]
    record = run_fault(fault, recipes[fault.config, fault.variant], tmp_path)
    where = f"{record.run_dir}/job.out"
    assert record.fault_at is not None, f"the fault never took effect: {record.notes} ({where})"
    assert record.detected and record.exit_code.split(":")[0] == "18", (record.state, record.exit_code, where)
    assert record.classified, (record.cause, record.cause_detail, f"expected {record.cause_expected}")
    assert record.left_at_end == [], f"left running at the job's end: {record.left_at_end}"
    assert record.results_kept, record.notes
    found = json.loads((Path(record.run_dir) / "results" / "accuracy" / "accuracy.json").read_text())
    assert (found["passed"], found["score"], found["samples"], found["threshold"]) == (False, 0.0, 8, 0.9)
