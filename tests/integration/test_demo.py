"""The demo job, unmodified, on the local SLURM cluster: real LMCache, router and AIPerf, simulated vLLM.

What a reviewer would check by hand: every node walked its steps and ended cleanly, LMCache served
prefix hits on both prefill nodes, the decode node received the KV of every request (no silent
recompute), the router used both prefill nodes, and every concurrency left a valid result.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from .conftest import metric, run_demo

CONFIG = "local-sim-vllm-disagg-agentic"
VARIANTS = ["agentic_p2x8_d1x8_conc4", "agentic_p2x8_d1x8_vllm-router_conc4"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_demo_job_runs_end_to_end_and_proves_its_results(cluster, demo_tools, tmp_path, variant):
    done, run_dir = run_demo(CONFIG, tmp_path, "--variant", variant)
    job_out = (run_dir / "job.out").read_text()

    for node in ("sim1", "sim2", "sim3"):
        ready = f"host preflight on {node}: NICs ready: lo up; 2 RDMA devices active; QoS DSCP with PFC"
        assert ready in job_out, job_out
        assert f"{node} step: finish barrier" in job_out
        assert f"{node} teardown: done (exit code 0)" in job_out
    assert "sim1 step: LMCache proof" in job_out
    assert "job succeeded: every node ended cleanly" in job_out

    metrics = max(
        (run_dir / "results" / "metrics").glob("conc*"), key=lambda p: int(p.name[4:])
    )  # cumulative
    prefills = [metrics / "prefill0.prom", metrics / "prefill1.prom"]
    decode = metrics / "decode0.prom"
    for prefill in prefills:
        # the router used both prefill nodes, and each node's LMCache L2 served prefix hits
        assert metric(prefill, "vllm:request_success_total", finished_reason="length") > 0, prefill.name
        assert metric(prefill, "sim_l2_hit_tokens_total") > 0, prefill.name
        assert metric(prefill, "sim_l2_degraded") == 0, f"{prefill.name}: LMCache went away mid-run"
    # every decoded request loaded its KV from a prefill node: none recomputed, none failed
    served = metric(decode, "vllm:request_success_total")
    assert served > 0
    assert metric(decode, "sim_kv_remote_loads_total", outcome="ok") == served
    assert metric(decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") > 0

    summary = json.loads((run_dir / "summary.json").read_text())
    assert [r["concurrency"] for r in summary["rows"]] == [
        int(c) for c in re.findall(r"result: \S+_conc(\d+)\.json", done.stdout)
    ]
    assert all(r["kv_moved_tokens"] > 0 for r in summary["rows"])
    assert summary["lock"]["nodes"] == ["sim1", "sim2", "sim3"] and summary["lock"]["config_sha256"]
    assert (run_dir / "pareto.png").stat().st_size > 0
    # the real client's scenario lock ran on the made-up corpus the job staged, and the records say so
    assert "sim1 step: cold start proof" in job_out
    assert summary["corpus"] == "made-up corpus, not a submission"
    assert all(
        r["scenario"] == "inferencex-agentx-mvp" and r["submission_valid"] is False for r in summary["rows"]
    )
    traces = summary["lock"]["inputs"]["traces"]
    assert (traces["kind"], traces["corpus"], traces["staged_with"]) == (
        "hf-dataset",
        "made-up",
        "aiperf 0.13.0",
    )

    # after the sweep, GSM8K through the real lm-eval and the router on the staged made-up sums, which the
    # simulator adds right: the pipeline scores them against the seed model's 0.90
    assert "sim1 step: accuracy" in job_out
    assert "gsm8k scored 1.0000 on 8 questions through the router (threshold 0.9000)" in job_out
    acc = summary["accuracy"]
    assert (acc["score"], acc["samples"], acc["threshold"], acc["passed"]) == (1.0, 8, 0.9, True)
    assert summary["lock"]["inputs"]["eval-set"]["rows"] == {"train": 8, "test": 64}

    results = sorted((run_dir / "results").glob(f"{CONFIG}_{variant}*.json"))
    assert [p.name for p in results] == sorted(re.findall(r"result: (\S+\.json)", done.stdout))
    assert results, "no result file"
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False).stdout
    assert left == "", f"processes left behind: {left}"
