"""node.sh under a job step: a failing node tells the others at once, a foreground command leaves nothing
running behind it, and a foreground command ended by the job's stop signal is not reported as a failure."""

from __future__ import annotations

import os
import signal
from pathlib import Path

FAST = 6.0


def fake_scancel(tmp_path: Path, code: int = 0, then: str = "") -> tuple[dict[str, str], Path]:
    """A `scancel` first on PATH that records its arguments (then runs THEN, shell); the environment of a
    task of job step 77.0."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "scancel.calls"
    bin_dir.mkdir(exist_ok=True)
    scancel = bin_dir / "scancel"
    scancel.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n{then}\nexit {code}\n')
    scancel.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}
    return env, calls


def test_a_failing_node_tells_the_other_nodes_before_its_teardown(node, tmp_path, assert_no_leftovers):
    """scancel goes out first, and the node tears down while slurmctld answers: here scancel answers only
    once the node's service is gone (after 5 s the node would give up on it and say so)."""
    then = (
        f'i=0; while pgrep -f "{node.marker}" > /dev/null && [ $i -lt 100 ]; do\n'
        "  sleep 0.05; i=$((i + 1))\ndone\n"
        f'[ $i -lt 100 ] && echo "answered after the teardown" >> "{tmp_path}/scancel.calls"'
    )
    env, calls = fake_scancel(tmp_path, then=then)
    run = node.run(
        "step serve\nsvc keeper --no-server\nuntil [[ -s $LOG_DIR/keeper.log ]]; do sleep 0.05; done\n"
        'step bench\nrun_cmd "$PYTHON" -c "import sys; sys.exit(3)"\n',
        env=env,
    )
    assert run.rc == 3, run.text
    assert calls.read_text() == "--signal=TERM 77.0\nanswered after the teardown\n"
    assert "told the other nodes to stop (scancel --signal=TERM 77.0)" in run.out
    assert "did not answer" not in run.err and run.elapsed < FAST
    assert_no_leftovers()


def test_a_clean_node_or_one_ended_by_others_tells_nobody(node, tmp_path, poll, assert_no_leftovers):
    env, calls = fake_scancel(tmp_path)
    assert node.run("step done\n", env=env).rc == 0
    proc, work = node.start('step bench\nrun_cmd "$PYTHON" "$STUB" --marker "$MARKER" --no-server\n', env=env)
    try:
        poll(lambda: "stub: starting" in (work / "out.txt").read_text(), 10, "the foreground command")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=FAST) == 143
    finally:
        proc.kill()
    assert not calls.exists()
    assert_no_leftovers()


def test_a_refused_scancel_is_reported_and_the_node_still_fails(node, tmp_path):
    env, calls = fake_scancel(tmp_path, code=1)
    run = node.run('step bench\nfail "broken"\n', env=env)
    assert run.rc == 1, run.text
    assert "FAILED bench on sim0: broken" in run.err
    assert "could not signal the other nodes" in run.err and calls.exists()


def test_children_a_foreground_command_leaves_behind_are_stopped(node, assert_no_leftovers):
    # The command starts a long-running child in its own session and returns without waiting for it.
    run = node.run("""
step bench
run_cmd bash -c '"$PYTHON" "$STUB" --marker "$MARKER" --no-server > "$WORK/child.out" &
  until [[ -s $WORK/child.out ]]; do sleep 0.05; done; exit 0'
step after
""")
    assert run.rc == 0, run.text
    assert "bench on sim0: bash left process(es)" in run.err and "behind; stopping them" in run.err
    assert_no_leftovers()  # before teardown even began: nothing else would have stopped it


def test_a_foreground_command_ended_by_sigterm_is_a_stop_not_a_failure(node, assert_no_leftovers):
    # What srun (or a failing node's scancel) does: TERM to every process of the step; here the
    # foreground command gets it first.
    run = node.run("""
step finish-barrier
run_cmd bash -c 'kill -TERM $$'
""")
    assert run.rc == 143, run.text
    assert "FAILED finish-barrier on sim0: received SIGTERM" in run.err
    assert "exited (code 143)" not in run.err
    assert "kind=signal" in (run.work / "state" / "outcome").read_text()
    assert_no_leftovers()
