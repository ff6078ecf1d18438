"""SGLang on the local SLURM cluster: the real sglang-router and AIPerf, simulated SGLang engines.

An SGLang PD job (2 prefill + 1 decode, Mooncake), one over MoRI (2P1D: the runner's RDMA devices checked
and passed, its traffic class on MoRI's packets) and a single-node soak run unmodified and prove their
results; the PD job's recorded known-issue workaround reaches its lock file and summary. Then the known
issue itself: engines launched with the flags that trigger it, on an image the registry would call
fixed, print its log signature mid-benchmark and wedge -- the node-side watcher must end the whole job
within seconds, naming the issue.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest

from recipes.build import build_plan
from recipes.render import load, render_plan
from recipes.submit import submit
from sim.cluster.layout import ROOT
from sim.demo import follow, job_env, simulated_host

from .conftest import metric, nothing_left, require_tools, run_demo

PD = "local-sim-sglang-disagg"
MORI = "local-sim-sglang-mori-disagg"
SINGLE = "local-sim-sglang"
TOOLS = [ROOT / ".venv-sglang-router/bin/python", ROOT / ".venv-bench/bin/aiperf", ROOT / "sim/bin/sglang"]
SIGNATURE = "kv_indptr[i+1] - kv_indptr[i] should be non-negative"
DETECT_S = 5.0  # from the signature in an engine log to the job's end


@pytest.fixture(scope="module")
def tools():
    require_tools(TOOLS)


def test_an_sglang_pd_job_runs_end_to_end_and_records_its_workaround(cluster, tools, tmp_path):
    done, run_dir = run_demo(PD, tmp_path)
    job_out = (run_dir / "job.out").read_text()
    for node in ("sim1", "sim2", "sim3"):
        assert f"{node} teardown: done (exit code 0)" in job_out
    assert "job succeeded: every node ended cleanly" in job_out
    assert re.search(r"smoke: HTTP 200, \d+ tokens", job_out), job_out

    metrics = run_dir / "results" / "metrics" / "conc8"  # cumulative: covers the whole sweep
    served = metric(metrics / "decode0.prom", "sim_kv_remote_loads_total", outcome="ok")
    assert served > 0 and metric(metrics / "decode0.prom", "sim_kv_remote_loads_total") == served
    for prefill in ("prefill0.prom", "prefill1.prom"):  # the router used both prefill nodes
        assert metric(metrics / prefill, "sglang:prompt_tokens_total") > 0, prefill

    lock = json.loads((run_dir / "lock.json").read_text())
    assert [(w["issue"], w["workaround"]) for w in lock["workarounds"]] == [
        ("minicpm-sala-kv-indptr", "minicpm-flashattn")
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["workarounds"] == ["minicpm-sala-kv-indptr: minicpm-flashattn"]
    assert [r["concurrency"] for r in summary["rows"]] == [4, 8]
    nothing_left(run_dir)


def test_an_sglang_pd_job_over_mori_checks_its_nics_marks_its_traffic_and_moves_kv(cluster, tools, tmp_path):
    done, run_dir = run_demo(MORI, tmp_path)
    job_out = (run_dir / "job.out").read_text()
    assert "job succeeded: every node ended cleanly" in job_out
    for node in ("sim1", "sim2", "sim3"):  # the simulated NICs' RDMA devices, as the kernel lists them
        assert re.search(
            rf"host preflight on {node}: NICs ready: lo up; 2 RDMA devices active; .*RDMA's DSCP 24 on it",
            job_out,
        ), job_out
        log = (run_dir / "logs" / node / "sglang.log").read_text()
        # MoRI on the runner's devices, marking RDMA with its traffic class (DSCP 24 << 2) and priority
        assert "RDMA backend on ionic_0,ionic_1: traffic class 96 (DSCP 24), service level 3" in log, log
    assert re.search(r"smoke: HTTP 200, \d+ tokens; KV moved: ", job_out), job_out
    metrics = run_dir / "results" / "metrics" / "conc4"
    served = metric(metrics / "decode0.prom", "sim_kv_remote_loads_total", outcome="ok")
    assert served > 0 and metric(metrics / "decode0.prom", "sim_kv_remote_loads_total") == served
    plan = json.loads((run_dir / "recipe" / "plan.json").read_text())
    watched = {s["issue"] for s in plan["log_signatures"]}
    assert watched >= {"mori-rdma-register-failed", "rdma-retry-exceeded"}
    nothing_left(run_dir)


def test_a_single_node_sglang_soak_serves_varied_load_without_a_router(cluster, tools, tmp_path):
    done, run_dir = run_demo(SINGLE, tmp_path, "--soak", "30s")  # 3 phases of 10 s on the simulator
    job_out = (run_dir / "job.out").read_text()
    assert "sim1 teardown: done (exit code 0)" in job_out and "step: router" not in job_out
    assert "step: benchmark soak003 (conc 4, 3 of 3)" in job_out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "soak" and len(summary["rows"]) == 3
    assert all(r["requests"] > 0 for r in summary["rows"])
    assert json.loads((run_dir / "lock.json").read_text())["mode"] == "soak"
    nothing_left(run_dir)


def test_the_log_watcher_ends_the_job_when_an_engine_prints_a_known_issue_signature(cluster, tools, tmp_path):
    loaded = load(PD)
    target = loaded.targets(PD)[0]
    # What a registry that wrongly lists the image as fixed would let through: the triggering flags,
    # no workaround. Built past lint on purpose; the watcher is the last line of defence.
    space = target.point.space
    flags = ["DENSE_AS_SPARSE=true", "ATTENTION_BACKEND=minicpm_flashinfer"]
    space = space.model_copy(
        update={
            role: getattr(space, role).model_copy(update={"additional_settings": flags})
            for role in ("prefill", "decode")
        }
    )
    entry = target.entry.model_copy(update={"known_issue_workarounds": []})
    target = dataclasses.replace(target, entry=entry, point=dataclasses.replace(target.point, space=space))
    plan = build_plan(target)
    assert plan.workarounds == () and [s["issue"] for s in plan.log_signatures] == ["minicpm-sala-kv-indptr"]

    env = {**job_env(), "SIM_KV_INDPTR_AFTER": "6"}  # a few requests into the first benchmark
    simulated_host(plan)
    job = submit(render_plan(plan), tmp_path, env=env)
    state = follow(job, env, timeout=300, engine="sglang")
    ended = time.time()
    job_out = (job.run_dir / "job.out").read_text()
    assert not state.ok and state.exit_code.startswith("12:"), f"{state}\n{job_out}"
    assert "known-issues exited (code 12)" in job_out
    assert "cause: known-issue (minicpm-sala-kv-indptr: its fix and workarounds are in configs/" in job_out
    assert "KNOWN ISSUE minicpm-sala-kv-indptr: its log signature appeared in sglang.log" in job_out

    logs = [p.read_text() for p in (job.run_dir / "logs").glob("*/sglang.log")]
    assert any(SIGNATURE in text for text in logs), "no engine printed the signature"
    # the simulator stamps the moment it printed it: "SIM FAULT kv-indptr-after:N at <epoch>"
    printed = min(
        float(m) for text in logs for m in re.findall(r"SIM FAULT kv-indptr-after:\d+ at (\S+)", text)
    )
    assert ended - printed < DETECT_S + 2, f"signature to job end {ended - printed:.1f} s (follow polls 1 s)"
    nothing_left(job.run_dir)
