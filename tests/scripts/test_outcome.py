"""scripts/outcome.py: the job's exit code is the first failing node's, not srun's highest."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import SCRIPTS

from scripts import statefiles

sys.path.insert(0, str(SCRIPTS))
from outcome import MAX_SKEW_S, SYMPTOM_WINDOW_S, Outcome, RouterSaw, read_outcome, read_router_saw, verdict  # noqa: E402 (scripts/ is not a package: it runs on the nodes)


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


def test_the_verdict_names_the_first_failure_s_cause_class():
    first = Outcome("b", 6, "failure", 1.0, "ports free", "port-in-use", "127.0.0.13:8000 is taken")
    later = Outcome("a", 1, "failure", 2.0, "ready barrier", "peer-unreachable", "connection refused")
    code, said = verdict({"a": later, "b": first}, 6)
    assert code == 6
    assert said.splitlines()[1] == "cause: port-in-use (127.0.0.13:8000 is taken)"
    # a node script of an older run folder, which named no cause
    _, said = verdict({"b": node("b", 3)}, 3)
    assert said.splitlines()[1] == "cause: unknown (the node named none)"


def test_the_cause_is_read_from_the_outcome_file(tmp_path):
    state = tmp_path / statefiles.FOLDER / "sim2"
    state.mkdir(parents=True)
    (state / statefiles.OUTCOME).write_bytes(GOOD + b"cause=killed\ndetail=killed by SIGKILL:\tdmesg\n")
    got = read_outcome(str(tmp_path), "sim2")
    assert (got.cause, got.detail) == ("killed", "killed by SIGKILL: dmesg")


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
        GOOD + b"cause=Port In Use\n",  # not an id of scripts/causes.json's form
        GOOD + b"cause=\x1b[2J\n",
        GOOD + b"x" * 10_000_000,
        "directory",
        "fifo",  # its open would wait for a writer forever
    ],
    ids=lambda c: str(c)[:40],
)
def test_a_malformed_outcome_is_no_outcome_never_a_traceback(tmp_path, content):
    state = tmp_path / statefiles.FOLDER / "sim1"
    state.mkdir(parents=True)
    if content == "directory":
        (state / statefiles.OUTCOME).mkdir()
    elif content == "fifo":
        os.mkfifo(state / statefiles.OUTCOME)
    else:
        (state / statefiles.OUTCOME).write_bytes(content)
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
        "job failed: no outcome from sim1 (killed before it could report?)\n"
        "cause: unknown (no node reported a failure)\n",
    )


def test_an_outcome_as_the_node_script_writes_it_is_read(tmp_path):
    state = tmp_path / statefiles.FOLDER / "sim1"
    state.mkdir(parents=True)
    (state / statefiles.OUTCOME).write_bytes(GOOD)
    assert read_outcome(str(tmp_path), "sim1") == Outcome(
        "sim1", 3, "failure", 1700000000.5, "prefill lmcache"
    )
    (state / statefiles.OUTCOME).write_bytes(b"rc=0\nkind=failure\nat=\nstep=finish barrier\n")  # a clean end
    assert read_outcome(str(tmp_path), "sim1") == Outcome("sim1", 0, "failure", 0.0, "finish barrier")


PEERS = frozenset({"requests-failed", "barrier-timeout", "peer-unreachable"})


def test_a_symptom_gives_way_to_the_root_cause_failing_moments_later():
    """The benchmark on sim1 saw its requests fail 0.4 s before sim3's decode was seen exiting: the verdict
    names the crash, and says the earlier failure was its symptom."""
    bench = Outcome("sim1", 10, "failure", 100.0, "benchmark conc2", "requests-failed", "100% failed")
    crash = Outcome("sim3", 1, "failure", 100.4, "decode vllm", "crashed", "vllm exited with code 1")
    code, said = verdict({"sim1": bench, "sim3": crash}, 10, PEERS)
    assert code == 1
    assert said.splitlines() == [
        "job failed: first failure on sim3 in step 'decode vllm' (exit code 1)",
        "cause: crashed (vllm exited with code 1)",
        "(sim1 failed 0.40 s earlier in step 'benchmark conc2', requests-failed: a symptom of this)",
    ]


@pytest.mark.parametrize(
    "later",
    [
        Outcome("sim3", 1, "failure", 106.0, "decode vllm", "crashed", "x"),  # outside the window
        Outcome("sim3", 5, "failure", 100.5, "start barrier", "barrier-timeout", "x"),  # a symptom too
        Outcome("sim1", 1, "failure", 100.5, "teardown", "crashed", "x"),  # the same node
    ],
)
def test_the_earliest_failure_stands_when_no_root_cause_follows_closely(later):
    first = Outcome("sim1", 5, "failure", 100.0, "start barrier", "barrier-timeout", "waited")
    _, said = verdict({"a": first, "b": later}, 5, PEERS)
    assert said.splitlines()[0] == "job failed: first failure on sim1 in step 'start barrier' (exit code 5)"
    assert len(said.splitlines()) == 2


def test_the_window_covers_the_assumed_clock_skew():
    """A decode that crashed 0.3 s before the benchmark failed, on a node whose clock is MAX_SKEW_S ahead,
    reports a time after the symptom's: the window still makes it the root cause."""
    assert SYMPTOM_WINDOW_S >= 1.0 + 2.0 + MAX_SKEW_S  # the supervisor's poll, the fail grace, the skew
    bench = Outcome("sim1", 10, "failure", 100.0, "benchmark conc2", "requests-failed", "100% failed")
    crash = Outcome("sim3", 1, "failure", 100.0 - 0.3 + MAX_SKEW_S, "finish barrier", "crashed", "x")
    _, said = verdict({"sim1": bench, "sim3": crash}, 10, PEERS)
    assert said.splitlines()[0] == "job failed: first failure on sim3 in step 'finish barrier' (exit code 1)"


DECODE_DOWN = RouterSaw(99.3, "decode", "http://127.0.0.13:8000", "sim3", "ConnectError: refused")


def test_the_router_names_the_engine_when_no_node_reported_the_root_cause():
    """sim3's engine was still dying when the stop came (its node ended by the signal, no failure of its
    own): the router's line on sim1, same clock as sim1's symptom, names it."""
    bench = Outcome("sim1", 10, "failure", 100.0, "benchmark conc2", "requests-failed", "100% failed")
    ended = Outcome("sim3", 143, "signal", 100.6, "finish barrier")
    code, said = verdict({"sim1": bench, "sim3": ended}, 143, PEERS, (DECODE_DOWN,))
    assert code == 10
    assert said.splitlines() == [
        "job failed: first failure on sim3: the router found its decode engine (http://127.0.0.13:8000) "
        "unhealthy 0.70 s before sim1 failed",
        "cause: engine-unhealthy (the router found the decode engine at http://127.0.0.13:8000 unhealthy: "
        "ConnectError: refused)",
        "(sim1 failed then in step 'benchmark conc2', requests-failed: a symptom of this)",
    ]


@pytest.mark.parametrize(
    "saw, node_report",
    [
        ((), None),  # no router evidence: the symptom stands
        ((RouterSaw(30.0, "decode", "http://127.0.0.13:8000", "sim3", "x"),), None),  # long before
        ((RouterSaw(100.5, "decode", "http://127.0.0.13:8000", "sim3", "x"),), None),  # after the symptom
        (
            (RouterSaw(99.0, "prefill", "http://127.0.0.11:8000", "sim1", "x"),),
            None,
        ),  # the symptom's own node
        # a node's own report of a root failure wins over the router's evidence
        ((DECODE_DOWN,), Outcome("sim2", 1, "failure", 100.2, "prefill lmcache", "crashed", "lmcache")),
    ],
)
def test_router_evidence_is_used_only_when_it_can_be(saw, node_report):
    bench = Outcome("sim1", 10, "failure", 100.0, "benchmark conc2", "requests-failed", "100% failed")
    outcomes = {"sim1": bench, "sim2": node_report}
    _, said = verdict({k: v for k, v in outcomes.items() if v is not None}, 10, PEERS, saw)
    first = said.splitlines()[0]
    want = "sim2 in step 'prefill lmcache'" if node_report else "sim1 in step 'benchmark conc2'"
    assert first == f"job failed: first failure on {want} (exit code {1 if node_report else 10})"


def _write_run(tmp_path, router_log: str) -> None:
    state, logs = tmp_path / statefiles.FOLDER / "sim1", tmp_path / "logs" / "sim1"
    state.mkdir(parents=True)
    logs.mkdir(parents=True)
    ranks = {str(i): {"node": f"sim{i + 1}", "data": {"addr": f"127.0.0.1{i + 1}"}} for i in range(3)}
    (state / statefiles.PEERS).write_text(json.dumps({"ranks": ranks}))
    (logs / "router.log").write_text(router_log)


def test_the_router_s_lines_are_read_as_our_proxy_writes_them(tmp_path):
    import logging

    record = logging.LogRecord("proxy.backends", logging.WARNING, "", 0, "%s %s unhealthy: %s", (), None)
    record.args = ("decode", "http://127.0.0.13:8000", "ConnectError: All connection attempts failed")
    record.created = 1764158187.19
    record.msecs = 190.0
    written = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s").format(record)
    _write_run(tmp_path, "noise\n" + written + "\n2026-11-26 garbage decode http://x unhealthy: y\n")
    (saw,) = read_router_saw(str(tmp_path), "sim1")
    assert (saw.role, saw.url, saw.node) == ("decode", "http://127.0.0.13:8000", "sim3")
    assert saw.problem == "ConnectError: All connection attempts failed"
    assert saw.at == pytest.approx(1764158187.19, abs=1e-3)


@pytest.mark.parametrize(
    "log",
    [
        # an address no node of the job has; a date that is none
        "2026-11-26 12:56:27,190 WARNING proxy.backends: decode http://10.9.9.9:8000 unhealthy: x\n",
        "2026-13-26 12:56:27,190 WARNING proxy.backends: decode http://127.0.0.13:8000 unhealthy: x\n",
        "",
    ],
)
def test_router_lines_that_name_no_node_of_the_job_are_no_evidence(tmp_path, log):
    _write_run(tmp_path, log)
    assert read_router_saw(str(tmp_path), "sim1") == ()
    assert read_router_saw(str(tmp_path), "sim2") == ()  # no table, no log: nothing, never a traceback
