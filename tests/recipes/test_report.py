"""make report / make compare: a run folder's numbers, hit rates from counter deltas, the plot."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from recipes import report
from scripts import statefiles
from tests.recipes.golden import GOLDEN

ROOT = Path(__file__).resolve().parents[2]
PLAN = GOLDEN / "local-sim-vllm-disagg-agentic" / "agentic_p2x8_d1x8_conc4" / "plan.json"
KEY_VARIANT = "local-sim-vllm-disagg-agentic_agentic_p2x8_d1x8"


def two_point_plan() -> dict:
    """The golden plan with two benchmarks (conc2, conc4) in one job, as a fixed-seq-len point runs them: the
    report's rows per concurrency and its counter deltas between them."""
    plan = json.loads(PLAN.read_text())
    (bench,) = plan["benchmarks"]
    plan["benchmarks"] = [
        {**bench, "concurrency": c, "name": f"conc{c}", "result": f"{KEY_VARIANT}_conc{c}.json"}
        for c in (2, 4)
    ]
    return plan


def aiperf(requests: float, tok_s: float, itl_p50: float) -> dict:
    stats = {"p50": 40.0, "p90": 80.0, "p99": 120.0}
    return {
        "request_count": {"avg": requests},
        "benchmark_duration": {"avg": 10.0},
        "request_throughput": {"avg": requests / 10},
        "output_token_throughput": {"avg": tok_s},
        "time_to_first_token": stats,
        "inter_token_latency": {**stats, "p50": itl_p50},
        "request_latency": stats,
    }


def snapshot(folder: Path, prefix: tuple, l2: tuple, kv: float) -> None:
    """Cumulative counters as the job scrapes them: (hits, queries) on each prefill, KV on the decode."""
    folder.mkdir(parents=True)
    for i in range(2):
        (folder / f"prefill{i}.prom").write_text(
            f'vllm:prefix_cache_hits_total{{engine="0"}} {prefix[0] / 2}\n'
            f'vllm:prefix_cache_queries_total{{engine="0"}} {prefix[1] / 2}\n'
            f'vllm:external_prefix_cache_hits_total{{engine="0"}} {l2[0] / 2}\n'
            f'vllm:external_prefix_cache_queries_total{{engine="0"}} {l2[1] / 2}\n'
        )
    (folder / "decode0.prom").write_text(
        f'vllm:prompt_tokens_by_source_total{{source="external_kv_transfer"}} {kv}\n'
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "20261121-000000-abcdef"
    (run / "recipe").mkdir(parents=True)
    (run / "recipe" / "plan.json").write_text(json.dumps(two_point_plan()))
    results = run / "results"
    results.mkdir()
    (results / f"{KEY_VARIANT}_conc2.json").write_text(json.dumps(aiperf(100, 480.0, 2.5)))
    (results / f"{KEY_VARIANT}_conc4.json").write_text(json.dumps(aiperf(180, 720.0, 4.0)))
    snapshot(results / "metrics" / "start", (0, 0), (0, 0), 600)
    snapshot(results / "metrics" / "conc2", (800, 1000), (0, 200), 10_600)
    snapshot(results / "metrics" / "conc4", (1700, 2000), (100, 400), 30_600)
    for node in ("sim1", "sim2", "sim3"):
        (run / statefiles.FOLDER / node).mkdir(parents=True)
    (run / "lock.json").write_text(json.dumps({"components": {"lmcache": "0.5.6"}}))
    return run


def test_summary_per_concurrency_from_results_and_counter_deltas(run_dir):
    s = report.summarize(run_dir)
    assert s["gpus"] == 24  # 3 nodes x 8
    first, second = s["rows"]
    assert (first["concurrency"], first["requests"], first["output_tok_per_s_per_gpu"]) == (2, 100.0, 20.0)
    assert first["interactivity_tok_per_s_per_user"] == 400.0  # 1000 / ITL p50 (ms)
    assert (first["prefix_hit_rate"], first["l2_hit_rate"], first["kv_moved_tokens"]) == (0.8, 0.0, 10_000)
    # the second concurrency's rates come from its own counter deltas, not the totals
    assert (second["prefix_hit_rate"], second["l2_hit_rate"], second["kv_moved_tokens"]) == (0.9, 0.5, 20_000)
    assert s["lock"] == {"components": {"lmcache": "0.5.6"}, "nodes": ["sim1", "sim2", "sim3"]}
    assert "20.0" in report.table(s)


def test_what_each_node_showed_at_preflight_reaches_the_lock(run_dir):
    """Driver, ROCm and NIC firmware (the AMD drain gate's node-facts.json) go into the summary's lock; a file
    that is not a JSON object, or is too large to be one, is marked, never trusted."""
    facts = {"amdgpu_driver": "6.18.3", "rocm": "7.2.0", "rdma_firmware": {"rdma0": "1.117.5-a-45"}}
    (run_dir / statefiles.FOLDER / "sim1" / statefiles.NODE_FACTS).write_text(json.dumps(facts))
    (run_dir / statefiles.FOLDER / "sim2" / statefiles.NODE_FACTS).write_text("[1, 2]")
    (run_dir / statefiles.FOLDER / "sim3" / statefiles.NODE_FACTS).write_text(
        " " * (report.FACTS_BYTES + 1) + "{}"
    )
    bad = {"error": "node-facts.json is not a JSON object"}
    assert report.summarize(run_dir)["lock"]["node_facts"] == {"sim1": facts, "sim2": bad, "sim3": bad}


def test_the_hosts_nics_join_each_nodes_facts(run_dir):
    nics = {"interface": {"operstate": "up"}, "qos": {"0000:06:00.0": {"classification": "DSCP"}}}
    (run_dir / statefiles.FOLDER / "sim1" / statefiles.NIC_FACTS).write_text(json.dumps(nics))
    (run_dir / statefiles.FOLDER / "sim1" / statefiles.NODE_FACTS).write_text(json.dumps({"rocm": "7.2.0"}))
    (run_dir / statefiles.FOLDER / "sim2" / statefiles.NIC_FACTS).write_text("not json")
    facts = report.summarize(run_dir)["lock"]["node_facts"]
    assert facts["sim1"] == {"rocm": "7.2.0", "nics": nics}
    assert facts["sim2"] == {"nics": {"error": "nic-facts.json is not a JSON object"}}


IMAGE_ID = "5b8e692e27a529311ced10fdf947010178f8e484da779605357a1cbc18f42379"  # podman's, as recorded here
DIGEST = "sha256:8b62dd6df94eed8bdcab3767c02856ca853a60379b12fd8a68f55a0b86bcd92b"


def image_file(run_dir: Path, node: str, image_id: str = IMAGE_ID, digests: str = "") -> None:
    text = f"image=localhost/disagg-recipes-node:bookworm\nid={image_id}\ndigests={digests}\n"
    (run_dir / statefiles.FOLDER / node / statefiles.IMAGE).write_text(text)


def test_the_image_every_node_ran_is_the_locks_digest(run_dir):
    for node in ("sim1", "sim2", "sim3"):
        image_file(run_dir, node, digests=f"localhost/disagg-recipes-node@{DIGEST}")
    s = report.summarize(run_dir)
    assert s["lock"]["image_digest"] == DIGEST
    assert s["lock"]["node_facts"]["sim2"]["image"]["id"] == IMAGE_ID
    assert not any("different images" in c for c in report.caveats(s))


def test_nodes_that_ran_different_images_under_one_tag_are_said_and_no_digest_is_claimed(run_dir):
    image_file(run_dir, "sim1", digests=f"localhost/disagg-recipes-node@{DIGEST}")
    image_file(run_dir, "sim2", image_id="289a94bfca67" + "0" * 52)
    (run_dir / statefiles.FOLDER / "sim3" / statefiles.IMAGE).write_text("id=$(reboot)\n")
    s = report.summarize(run_dir)
    assert s["lock"].get("image_digest") is None
    assert s["lock"]["node_facts"]["sim3"]["image"] == {
        "error": "state/<node>/image is not what scripts/container.sh writes"
    }
    note = next(c for c in report.caveats(s) if "different images" in c)
    assert note == (
        f"the nodes ran different images under one reference: sim1 {IMAGE_ID}, sim2 289a94bfca67{'0' * 52}, "
        "sim3 unknown"
    )
    assert f"NOTE {note}" in report.table(s)


def test_a_concurrency_that_did_not_finish_is_left_out_not_invented(run_dir):
    (run_dir / "results" / f"{KEY_VARIANT}_conc4.json").unlink()
    assert [r["concurrency"] for r in report.summarize(run_dir)["rows"]] == [2]


def test_no_result_at_all_is_an_error(run_dir):
    for result in (run_dir / "results").glob("*.json"):
        result.unlink()
    with pytest.raises(report.ReportError, match="finished no concurrency"):
        report.summarize(run_dir)


def test_compare_prints_both_runs_and_ratios(run_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    (other / "results" / f"{KEY_VARIANT}_conc2.json").write_text(json.dumps(aiperf(100, 960.0, 2.5)))
    text = report.compare(report.summarize(run_dir), report.summarize(other))
    line = next(x for x in text.splitlines() if x.strip().startswith("2 "))
    assert "20.00" in line and "40.00" in line and "2.00" in line


@pytest.mark.tools
def test_make_report_writes_summary_and_a_png(run_dir):
    python = ROOT / ".venv-report" / "bin" / "python"
    if not python.exists():
        pytest.fail("missing .venv-report: run `make tools` (make test does)")
    done = subprocess.run(
        [str(python), "-m", "recipes.report", "report", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((run_dir / "summary.json").read_text())["rows"][0]["concurrency"] == 2
    assert (run_dir / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_recorded_workaround_marks_the_summary_and_a_comparison_with_a_plain_run(run_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    plan = json.loads((other / "recipe" / "plan.json").read_text())
    plan["workarounds"] = [{"issue": "minicpm-sala-kv-indptr", "workaround": "minicpm-flashattn"}]
    (other / "recipe" / "plan.json").write_text(json.dumps(plan))
    marked = report.summarize(other)
    assert marked["workarounds"] == ["minicpm-sala-kv-indptr: minicpm-flashattn"]
    assert "NOTE known-issue workaround applied (minicpm-sala-kv-indptr: minicpm-flashattn)" in report.table(
        marked
    )
    plain = report.summarize(run_dir)
    assert plain["workarounds"] == [] and "NOTE known-issue" not in report.table(plain)
    text = report.compare(plain, marked)
    assert text.startswith("WARNING: A and B differ in known-issue workarounds (A: none; B: minicpm-sala")


def test_a_made_up_corpus_and_the_clients_verdict_reach_the_summary(run_dir):
    """Whatever the client's scenario stamps, a run on the local made-up corpus says it is no submission; and
    a run the client marked invalid says which point and why."""
    plan = json.loads((run_dir / "recipe" / "plan.json").read_text())
    assert plan["client_scenario"]["corpus"] == "made-up"
    for c in (2, 4):
        path = run_dir / "results" / f"{KEY_VARIANT}_conc{c}.json"
        doc = json.loads(path.read_text())
        doc["metadata"] = {"scenario": "inferencex-agentx-mvp", "submission_valid": False,
                           "submission_invalid_reasons": ["unsafe_override"]}  # fmt: skip
        path.write_text(json.dumps(doc))
    s = report.summarize(run_dir)
    assert s["corpus"] == "made-up corpus, not a submission"
    assert [r["submission_valid"] for r in s["rows"]] == [False, False]
    assert "NOTE made-up corpus, not a submission" in report.table(s)
    plan["client_scenario"]["corpus"] = "pinned"
    (run_dir / "recipe" / "plan.json").write_text(json.dumps(plan))
    s = report.summarize(run_dir)
    assert s["corpus"] is None
    assert (
        report.caveats(s)[0]
        == "the client marked conc 2 (unsafe_override), conc 4 (unsafe_override) no valid submission"
    )
