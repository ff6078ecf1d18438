"""scripts/outcome.py: the job's exit code is the first failing node's, not srun's highest."""

from __future__ import annotations

import sys

import pytest
from conftest import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
from outcome import Outcome, verdict  # noqa: E402 (scripts/ is not a package: it runs on the nodes)


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
