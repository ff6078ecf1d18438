"""scripts/outcome.py: the job's exit code is the first failing node's, not srun's highest."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
from outcome import Outcome, read_outcome, verdict  # noqa: E402 (scripts/ is not a package: it runs on the nodes)


def node(name: str, rc: int, kind: str = "failure", at: float = 0.0, step: str = "s") -> Outcome:
    return Outcome(name, rc, kind, at, step)


@pytest.mark.parametrize(
    "outcomes, srun_rc, code, line",
    [
        ({"a": node("a", 0), "b": node("b", 0)}, 0, 0, "job succeeded"),
        # the node srun terminated reports 143; the root cause is the other one
        (
            {"a": node("a", 143, "signal", 2.0), "b": node("b", 3, at=1.0, step="prefill lmcache")},
            143,
            3,
            "first failure on b in step 'prefill lmcache' (exit code 3)",
        ),
        # two independent failures: the earlier one
        ({"a": node("a", 5, at=1.5), "b": node("b", 4, at=1.0)}, 5, 4, "first failure on b"),
        # a TERM from outside (scancel) ends every node: still named
        (
            {"a": node("a", 143, "signal", 1.0), "b": node("b", 143, "signal", 1.1)},
            143,
            143,
            "first failure on a",
        ),
        ({"a": node("a", 0), "b": None}, 137, 137, "no outcome from b"),
        ({"a": node("a", 0), "b": node("b", 0)}, 1, 1, "srun exited 1 although every node ended cleanly"),
    ],
)
def test_verdict(outcomes, srun_rc, code, line):
    got_code, got_line = verdict(outcomes, srun_rc)
    assert got_code == code
    assert line in got_line


GOOD = b"rc=3\nkind=failure\nat=1700000000.5\nstep=prefill lmcache\n"


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe\x00garbage",
        GOOD.replace(b"rc=3", b"rc=abc"),
        GOOD.replace(b"rc=3", b"rc=999"),  # no exit status: sys.exit(999) would exit 231
        GOOD.replace(b"rc=3", b"rc=-1"),
        GOOD.replace(b"at=1700000000.5", b"at=nan"),  # a NaN time sorts anywhere: a wrong "first" failure
        GOOD.replace(b"at=1700000000.5", b"at=inf"),
        GOOD.replace(b"kind=failure", b"kind=whatever"),
        GOOD.replace(b"step=prefill lmcache", b"step=\x1b[2J\x1b[Hall good"),  # would drive the terminal
        GOOD.replace(b"step=prefill lmcache\n", b""),
        GOOD + b"x" * 10_000_000,
        "directory",
        "fifo",  # its open would wait for a writer forever
    ],
    ids=lambda c: str(c)[:40],
)
def test_a_malformed_outcome_is_no_outcome_never_a_traceback(tmp_path, content):
    state = tmp_path / "state" / "sim1"
    state.mkdir(parents=True)
    if content == "directory":
        (state / "outcome").mkdir()
    elif content == "fifo":
        os.mkfifo(state / "outcome")
    else:
        (state / "outcome").write_bytes(content)
    assert read_outcome(str(tmp_path), "sim1") is None
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "outcome.py"),
            "--run-dir",
            str(tmp_path),
            "--nodes",
            "sim1",
            "--srun-exit",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (
        1,
        "job failed: no outcome from sim1 (killed before it could report?)\n",
    )


def test_an_outcome_as_the_node_script_writes_it_is_read(tmp_path):
    state = tmp_path / "state" / "sim1"
    state.mkdir(parents=True)
    (state / "outcome").write_bytes(GOOD)
    assert read_outcome(str(tmp_path), "sim1") == Outcome(
        "sim1", 3, "failure", 1700000000.5, "prefill lmcache"
    )
    (state / "outcome").write_bytes(b"rc=0\nkind=failure\nat=\nstep=finish barrier\n")  # a clean end
    assert read_outcome(str(tmp_path), "sim1") == Outcome("sim1", 0, "failure", 0.0, "finish barrier")
