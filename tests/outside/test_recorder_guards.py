"""The recorder's guards, each against the defect it exists for: bash's `kill` in a recorded chain reaches
only that chain's processes (chains run side by side on one host and pids wrap, so a pid a script kept may
be another chain's by the time it signals it), never the harness's whole group; a declared edit of
InferenceX's files whose anchor is gone stops the chain instead of editing nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.outside import chain, sandbox

SHIM = Path(sandbox.__file__).resolve().parent / "shims" / "shim.py"
FIXTURE = Path(sandbox.__file__).resolve().parent / "fixtures" / "mi355x"


def _sleeper(root: Path) -> subprocess.Popen:
    """A process of the chain whose scratch folder is ROOT (its environment names it, as every process the
    recorder starts has it)."""
    env = {"PATH": "/usr/bin:/bin", "RECORDER_ROOT": str(root)}
    return subprocess.Popen(["sleep", "60"], env=env)


def _kill(root: Path, *argv: str) -> subprocess.CompletedProcess:
    (root / "run").mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin", "RECORDER_ROOT": str(root), "RECORDER_LOG": str(root / "records.jsonl"),
        "RECORDER_FIXTURE": str(FIXTURE), "RECORDER_BIN": str(root / "bin"),
    }  # fmt: skip
    return subprocess.run(
        [sys.executable, "-E", "-S", str(SHIM), "kill", *argv], env=env, capture_output=True, text=True
    )


def test_kill_signals_this_chains_process_and_answers_another_chains_as_gone(tmp_path):
    mine, theirs = _sleeper(tmp_path / "a"), _sleeper(tmp_path / "b")
    try:
        other = _kill(tmp_path / "a", "-TERM", str(theirs.pid))
        assert other.returncode == 1 and "No such process" in other.stderr
        assert theirs.poll() is None  # the other chain's process lives on
        own = _kill(tmp_path / "a", str(mine.pid))
        assert own.returncode == 0
        assert mine.wait(timeout=10) == -15
    finally:
        for p in (mine, theirs):
            p.kill()
            p.wait()


def test_kill_never_signals_the_harness_group_a_script_took_for_its_own(tmp_path):
    root = tmp_path / "a"
    (root / "run").mkdir(parents=True)
    (root / "run" / "step.pgid").write_text(str(os.getpgid(0)))  # this test's group stands for the step's
    for argv in (["0"], ["-TERM", "--", f"-{os.getpgid(0)}"]):
        said = _kill(root, *argv)
        assert said.returncode == 1 and "would signal the recorder's whole chain" in said.stderr


def test_a_declared_edit_whose_anchor_is_gone_stops_the_chain(tmp_path):
    box = sandbox.Sandbox(tmp_path)
    (box.checkout / "job.slurm").parent.mkdir(parents=True)
    (box.checkout / "job.slurm").write_text("    -e IS_AGENTIC=1\n")
    anchored = chain.Edit("job.slurm", "-e IS_AGENTIC=1", "    -e KV_OFFLOADING=dram", "why")
    [adjustment] = chain.apply_edits(box, (anchored,))
    assert adjustment["kind"] == "edit" and adjustment["why"] == "why"
    assert (box.checkout / "job.slurm").read_text() == "    -e IS_AGENTIC=1\n    -e KV_OFFLOADING=dram\n"
    gone = chain.Edit("job.slurm", "-e IS_MULTINODE=1", "x", "why")
    with pytest.raises(chain.ChainError, match="has 0 lines '-e IS_MULTINODE=1', not one"):
        chain.apply_edits(box, (gone,))
