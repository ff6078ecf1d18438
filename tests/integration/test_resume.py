"""A sweep killed after its first concurrency, resumed on the local SLURM cluster (`make demo RESUME=<run>`).

What a reviewer would check by hand: the resumed job measured only the missing concurrency (its node
script skipped the other, saying so), completed, copied the earlier result in, and its summary and lock
say which point came from which run; the earlier run folder was left as it was.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from recipes.render import load, render_config
from recipes.submit import pick, submit
from sim.demo import cancel, job_env, job_state, node_steps, simulated_host

from .conftest import nothing_left, run_demo

# A fixed-seq-len point runs its concurrencies in one allocation (an agentic point gets one of its own).
CONFIG = "local-sim-sglang-disagg"
VARIANT = "fsl1k64_p2x8_d1x8"
FIRST, SECOND = (f"{CONFIG}_{VARIANT}_conc{c}.json" for c in (4, 8))
FIRST_DONE_S = 300  # submission to the first concurrency done: start-up (~15 s here), one 10 s benchmark


def killed_after_first_concurrency(out: Path) -> Path:
    """Submits the demo job, waits until its first concurrency is done (result gated, counters scraped: the
    leader has moved on to the second), cancels the job and waits for its end."""
    rendered = pick(render_config(CONFIG, load(CONFIG)), VARIANT)
    env = job_env()
    simulated_host(rendered.plan)
    job = submit(rendered, out, env=env)
    deadline = time.monotonic() + FIRST_DONE_S
    try:
        while node_steps(job.run_dir).get("sim1") != "benchmark conc8":
            state = job_state(job.job_id, env)
            assert not state.ended, f"job {job.job_id} ended {state.state} before conc8 ({job.run_dir})"
            assert time.monotonic() < deadline, f"conc4 not done after {FIRST_DONE_S} s ({job.run_dir})"
            time.sleep(0.5)
    finally:
        cancel(job, env)  # scancel, then polls the job's state until it ended
    assert job_state(job.job_id, env).ended, f"job {job.job_id} outlived its scancel"
    assert (job.run_dir / "results" / FIRST).is_file(), f"conc4 done without its result ({job.run_dir})"
    assert not (job.run_dir / "results" / SECOND).exists(), "the job finished its sweep before the kill"
    return job.run_dir


def results_of(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "results").glob("*.json"))}


def test_a_killed_sweep_resumes_and_completes_marking_the_reused_point(cluster, demo_tools, tmp_path):
    earlier = killed_after_first_concurrency(tmp_path)
    kept = results_of(earlier)

    done, run_dir = run_demo(CONFIG, tmp_path, "--variant", VARIANT, "--resume", str(earlier))

    assert run_dir != earlier and results_of(earlier) == kept  # the earlier run is never modified
    assert f"resuming {earlier}" in done.stdout and "  runs: conc8" in done.stdout
    assert re.search(rf"result: {re.escape(FIRST)} \(resumed from run {earlier.name}\)", done.stdout)
    assert re.search(rf"result: {re.escape(SECOND)}$", done.stdout, re.M)
    job_out = (run_dir / "job.out").read_text()
    assert f"benchmark conc4: resumed, its result was measured by run {earlier.name}" in job_out
    assert "step: benchmark conc4" not in job_out and "sim1 step: benchmark conc8" in job_out
    assert "job succeeded: every node ended cleanly" in job_out
    assert (run_dir / "results" / FIRST).read_bytes() == kept[FIRST]

    summary = json.loads((run_dir / "summary.json").read_text())
    first, second = summary["rows"]
    assert (first["concurrency"], first["resumed_from"]) == (4, earlier.name)
    assert first["requests"] > 0 and first["requests"] == json.loads(kept[FIRST])["request_count"]["avg"]
    assert second["concurrency"] == 8 and "resumed_from" not in second and second["requests"] > 0
    # conc8's counters are the new job's own, from its start snapshot
    assert not (run_dir / "results" / "metrics" / "conc4").exists()
    assert summary["lock"]["resumed"] == {
        "run": run_dir.name,
        "from_run": earlier.name,
        "from_run_dir": str(earlier),
        "reused": {"conc4": earlier.name},
        "measured_here": ["conc8"],
    }
    assert f"conc 4 from run {earlier.name}" in done.stdout and re.search(r"^\s+4\*\s", done.stdout, re.M)
    assert (run_dir / "pareto.png").stat().st_size > 0
    nothing_left(run_dir)
