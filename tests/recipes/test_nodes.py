"""The node ledger (recipes/nodes.py): learned from run folders, scoped to the runner, expiring, cleared by
hand, never excluding so many nodes that the job cannot be placed, and never for a fault not the node's."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from recipes import nodes, submit
from recipes.render import render_config
from scripts import statefiles

NODES = ("sim1", "sim2", "sim3")
RUNNER = "cluster:local-sim"
T0 = 1_800_000_000.0


def failed_run(
    out: Path,
    node: str,
    cause: str,
    *,
    at: float = T0,
    kind: str = "failure",
    runner: str = RUNNER,
    run: str = "20270115-000000-aaaaaa",
) -> Path:
    """A run folder as a job leaves it: recipe/plan.json and NODE's outcome naming CAUSE."""
    run_dir = out / "runs" / "key" / "variant" / run
    (run_dir / "recipe").mkdir(parents=True, exist_ok=True)
    (run_dir / "recipe" / "plan.json").write_text(
        json.dumps({"runner": runner, "model": "amd/Kimi-K2.5-MXFP4", "engine": "vllm"})
    )
    state = run_dir / statefiles.FOLDER / node
    state.mkdir(parents=True)
    (state / statefiles.OUTCOME).write_text(
        f"rc=1\nkind={kind}\nat={at}\nstep=preflight\ncause={cause}\ndetail=FAILED preflight on {node}: x\n"
    )
    return state / statefiles.OUTCOME


def test_a_node_s_own_fault_excludes_it_from_the_next_job_of_its_runner(tmp_path):
    evidence = failed_run(tmp_path, "sim1", "gpu-not-drained")
    got = nodes.exclusions(tmp_path, RUNNER, 1, NODES, now=T0 + 60)
    assert got.nodes == ["sim1"]
    line = got.lines()[0]
    assert line.startswith("excluding sim1: gpu-not-drained (FAILED preflight on sim1: x) at ")
    assert f"evidence {evidence}" in line
    entry = nodes.read(tmp_path).entries[0]  # learned into the ledger, with its scope
    assert (entry.node, entry.runner, entry.model, entry.framework) == (
        "sim1",
        RUNNER,
        "amd/Kimi-K2.5-MXFP4",
        "vllm",
    )
    # another runner's jobs on the same host names are not affected
    assert nodes.exclusions(tmp_path, "cluster:local-cpu", 1, NODES, now=T0 + 60).nodes == []


@pytest.mark.parametrize(
    "cause, kind",
    [
        ("engine-flag-rejected", "failure"),  # the config's fault
        ("known-issue", "failure"),  # the engine's
        ("barrier-timeout", "failure"),  # a peer's
        ("unknown", "failure"),
        ("gpu-not-drained", "signal"),  # a node ended by others names no fault of its own
        ("no-such-cause", "failure"),
    ],
)
def test_a_failure_that_is_not_the_node_s_fault_never_excludes_it(tmp_path, cause, kind):
    failed_run(tmp_path, "sim2", cause, kind=kind)
    assert nodes.exclusions(tmp_path, RUNNER, 1, NODES, now=T0 + 60).excluded == ()


def test_never_so_many_that_the_job_cannot_be_placed(tmp_path):
    """Two faulty nodes, a job of two on three nodes: the older fault is left out, the newer kept in."""
    failed_run(tmp_path, "sim1", "gpu-not-drained", at=T0, run="r1")
    failed_run(tmp_path, "sim3", "disk-full", at=T0 + 10, run="r2")
    got = nodes.exclusions(tmp_path, RUNNER, 2, NODES, now=T0 + 60)
    assert got.nodes == ["sim1"]
    assert any(
        line.startswith("NOT excluding sim3 (disk-full") and "the job needs 2 of the runner's 3 nodes" in line
        for line in got.lines()
    )
    assert nodes.exclusions(tmp_path, RUNNER, 3, NODES, now=T0 + 60).nodes == []


def test_an_entry_expires(tmp_path):
    failed_run(tmp_path, "sim1", "gpu-unavailable")
    assert nodes.exclusions(tmp_path, RUNNER, 1, NODES, now=T0 + nodes.TTL_S - 1).nodes == ["sim1"]
    assert nodes.exclusions(tmp_path, RUNNER, 1, NODES, now=T0 + nodes.TTL_S).nodes == []


def test_a_cleared_entry_is_not_learned_again(tmp_path, capsys):
    failed_run(tmp_path, "sim1", "container-leftover")
    assert nodes.main(["--out", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "learned 1 node fault(s)" in listed and "sim1" in listed and "container-leftover --" in listed
    assert nodes.main(["--out", str(tmp_path), "--clear", "sim1", "--why", "container removed"]) == 0
    assert nodes.exclusions(tmp_path, RUNNER, 1, NODES).nodes == []
    assert nodes.main(["--out", str(tmp_path), "--clear", "sim1"]) == 1  # nothing left to clear
    assert nodes.main(["--out", str(tmp_path), "--all"]) == 0
    assert "cleared " in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, says",
    [
        ("{", "cannot read it"),
        ('{"entries": [{"node": "sim1"}]}', "not a node ledger (entries.0.runner"),
        ('{"entries": [], "extra": 1}', "not a node ledger (extra"),
    ],
)
def test_a_broken_ledger_is_an_error_naming_it_never_an_empty_one(tmp_path, content, says):
    (tmp_path / nodes.LEDGER).write_text(content)
    with pytest.raises(nodes.LedgerError) as err:
        nodes.exclusions(tmp_path, RUNNER, 1, NODES)
    assert str(err.value).startswith(f"{tmp_path / nodes.LEDGER}: ") and says in str(err.value)


def test_garbled_outcomes_and_foreign_folders_teach_nothing(tmp_path):
    path = failed_run(tmp_path, "sim1", "disk-full")
    path.write_bytes(b"\xff\xfe" * 10)
    odd = tmp_path / "runs" / "a" / "b" / "c" / statefiles.FOLDER / "sim2"
    odd.mkdir(parents=True)  # no recipe/plan.json beside it
    (odd / statefiles.OUTCOME).write_text("rc=1\nkind=failure\nat=1\nstep=x\ncause=disk-full\n")
    assert nodes.exclusions(tmp_path, RUNNER, 1, NODES).excluded == ()


def test_submit_passes_the_exclusion_to_sbatch_and_keeps_the_evidence(configs, tmp_path, capsys):
    rendered = render_config("local-sim-sglang", configs)[0]  # one node of the runner's three
    failed_run(tmp_path, "sim1", "gpu-not-drained", at=__import__("time").time())
    assert submit.main(["local-sim-sglang", "--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    command = shlex.split(out.splitlines()[0])
    assert "--exclude=sim1" in command and command.index("--exclude=sim1") < command.index("--export=ALL")
    assert "# excluding sim1: gpu-not-drained" in out
    assert rendered.plan.slurm.nodes == 1
