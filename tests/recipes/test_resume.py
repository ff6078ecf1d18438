"""make submit RESUME=<run>: only what an earlier run left, same lock; the summary marks reused points."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from recipes import report, submit
from recipes.build import build_plan
from recipes.render import render_config, render_plan, whole_points
from tests.recipes.test_report import KEY_VARIANT, aiperf, snapshot

LOCAL = "local-sim-vllm-disagg-agentic"
CONC2, CONC4 = f"{KEY_VARIANT}_conc2.json", f"{KEY_VARIANT}_conc4.json"


@pytest.fixture
def rendered(configs):
    """The agentic point's two concurrencies in one allocation (agentic points run one per allocation; a
    fixed-seq-len point runs all of its own in one, and can be resumed): what resume reuses and reruns."""
    return render_plan(build_plan(whole_points(configs.targets(LOCAL))[0]))


@pytest.fixture
def slurm(tmp_path: Path) -> dict[str, str]:
    """sbatch and squeue on PATH: sbatch answers like `sbatch --parsable`; squeue lists $FAKE_SQUEUE_JOBS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("sbatch", 'echo "4242;cluster"'), ("squeue", 'echo "${FAKE_SQUEUE_JOBS:-}"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.fixture
def earlier(rendered, tmp_path, slurm) -> Path:
    """A run killed after its first concurrency: conc2's result and snapshots, no conc4."""
    run_dir = submit.submit(rendered, tmp_path / "out", env=slurm).run_dir
    results = run_dir / "results"
    results.mkdir()
    (results / CONC2).write_text(json.dumps(aiperf(100, 480.0, 2.5)))
    snapshot(results / "metrics" / "start", (0, 0), (0, 0), 600)
    snapshot(results / "metrics" / "conc2", (800, 1000), (0, 200), 10_600)
    return run_dir


def listing(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_resumed_run_reuses_the_finished_points_in_a_new_folder(rendered, earlier, slurm):
    before = listing(earlier)
    job = submit.submit(rendered, earlier.parents[3], env=slurm, resume_from=earlier)
    assert job.run_dir != earlier and listing(earlier) == before  # the earlier run is never modified
    assert (job.run_dir / "results" / CONC2).read_bytes() == (earlier / "results" / CONC2).read_bytes()
    points = json.loads((job.run_dir / "resume.json").read_text())["points"]
    assert [(p["name"], p["measured_in"]) for p in points] == [("conc2", earlier.name)]
    assert points[0]["cache"] == {"prefix_hit_rate": 0.8, "l2_hit_rate": 0.0, "kv_moved_tokens": 10_000}
    lock = json.loads((job.run_dir / "lock.json").read_text())
    assert lock["resumed"] == {
        "run": job.run_dir.name,
        "from_run": earlier.name,
        "from_run_dir": str(earlier),
        "reused": {"conc2": earlier.name},
        "measured_here": ["conc4"],
    }
    # the rendered files are the earlier run's, byte for byte: the skip is an input of the job
    assert lock["rendered_sha256"] == json.loads((earlier / "lock.json").read_text())["rendered_sha256"]
    assert job.resumed.lines()[1:] == [f"  reused: conc2 (measured by run {earlier.name})", "  runs: conc4"]


def test_a_point_an_earlier_resume_reused_keeps_the_run_that_measured_it(rendered, earlier, slurm):
    second = submit.submit(rendered, earlier.parents[3], env=slurm, resume_from=earlier).run_dir
    (second / "results" / "metrics").mkdir()  # killed again before conc4 finished
    third = submit.submit(rendered, earlier.parents[3], env=slurm, resume_from=second)
    assert [(p.name, p.measured_in) for p in third.resumed.reused] == [("conc2", earlier.name)]


def test_a_different_lock_is_refused_naming_each_key_with_both_values(rendered, earlier, slurm):
    lock_file = earlier / "lock.json"
    lock = json.loads(lock_file.read_text())
    old_sha = lock["config_sha256"]
    lock["config_sha256"] = "0" * 64
    lock["components"]["lmcache"] = "0.5.5"
    lock_file.write_text(json.dumps(lock))
    with pytest.raises(submit.SubmitError) as refused:
        submit.submit(rendered, earlier.parents[3], env=slurm, resume_from=earlier)
    text = str(refused.value)
    assert f"RESUME={earlier} ran under a different lock" in text
    assert f'config_sha256: "{"0" * 64}" -> "{old_sha}"' in text
    assert 'components.lmcache: "0.5.5" -> "0.5.6"' in text
    assert "rendered_sha256" not in text and len(list(earlier.parent.iterdir())) == 1  # nothing submitted


def test_a_folder_that_is_no_run_folder_is_named(rendered, tmp_path, slurm):
    with pytest.raises(
        submit.SubmitError, match=r"RESUME=.*/nowhere is not a run folder \(lock.json not found"
    ):
        submit.submit(rendered, tmp_path, env=slurm, resume_from=tmp_path / "nowhere")


def test_a_run_with_every_result_has_nothing_to_resume(rendered, earlier, slurm):
    (earlier / "results" / CONC4).write_text(json.dumps(aiperf(180, 720.0, 4.0)))
    with pytest.raises(
        submit.SubmitError, match=r"nothing to resume, every concurrency has its result \(conc2, conc4\)"
    ):
        submit.submit(rendered, earlier.parents[3], env=slurm, resume_from=earlier)


def test_results_with_a_gap_did_not_come_from_one_sweep(rendered, earlier, slurm):
    (earlier / "results" / CONC2).rename(earlier / "results" / CONC4)
    with pytest.raises(submit.SubmitError, match="has results after conc2, which has none"):
        submit.submit(rendered, earlier.parents[3], env=slurm, resume_from=earlier)


def test_a_run_whose_job_still_runs_is_not_resumed(rendered, earlier, slurm):
    with pytest.raises(submit.SubmitError, match="its job 77 is still running"):
        submit.submit(
            rendered, earlier.parents[3], env={**slurm, "FAKE_SQUEUE_JOBS": "77"}, resume_from=earlier
        )


def test_a_soak_is_rerun_whole(configs, tmp_path, slurm):
    soak = render_config(LOCAL, configs, soak_seconds=20)[0]
    run_dir = submit.submit(soak, tmp_path, env=slurm).run_dir
    with pytest.raises(submit.SubmitError, match="is a soak run: its phases are one load, rerun it whole"):
        submit.submit(soak, tmp_path, env=slurm, resume_from=run_dir)


def test_dry_run_says_what_a_resume_would_reuse_and_run(rendered, earlier, slurm, monkeypatch):
    monkeypatch.setenv("PATH", slurm["PATH"])
    lines = submit.resume_of(rendered, earlier, None).lines()  # what --dry-run prints, each after '# '
    assert lines == [
        f"resuming {earlier}",
        f"  reused: conc2 (measured by run {earlier.name})",
        "  runs: conc4",
    ]


def test_the_summary_marks_reused_points_and_never_takes_a_delta_across_two_jobs(rendered, earlier, slurm):
    run_dir = submit.submit(rendered, earlier.parents[3], env=slurm, resume_from=earlier).run_dir
    results = run_dir / "results"
    (results / CONC4).write_text(json.dumps(aiperf(180, 720.0, 4.0)))
    # The new job's engines start from zero: its deltas must come from its own start snapshot.
    snapshot(results / "metrics" / "start", (0, 0), (0, 0), 0)
    snapshot(results / "metrics" / "conc4", (900, 1000), (100, 200), 20_000)
    summary = report.summarize(run_dir)
    first, second = summary["rows"]
    assert first["resumed_from"] == earlier.name
    assert (first["prefix_hit_rate"], first["l2_hit_rate"], first["kv_moved_tokens"]) == (0.8, 0.0, 10_000)
    assert "resumed_from" not in second
    assert (second["prefix_hit_rate"], second["l2_hit_rate"], second["kv_moved_tokens"]) == (0.9, 0.5, 20_000)
    assert summary["resumed"]["from_run"] == earlier.name
    table = report.table(summary).splitlines()
    assert f"NOTE resumed run: conc marked * reused from an earlier job (conc 2 from run {earlier.name})" in (
        "\n".join(table)
    )
    assert table[-2].split()[0] == "2*" and table[-1].split()[0] == "4"
