"""scripts/logwatch.py: a known issue's log signature in an engine log fails the node, naming the issue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.scripts.conftest import SCRIPTS

LOGWATCH = SCRIPTS / "logwatch.py"
SIGNATURE = {
    "issue": "minicpm-sala-kv-indptr",
    "title": "CUDA-graph replay crashes in FlashInfer plan()",
    "regex": r"kv_indptr\[i\+1\] - kv_indptr\[i\] should be non-negative",
    "fix": "use an image with the fix; or record a workaround",
}
CRASH = "RuntimeError: Check failed: kv_indptr[i+1] - kv_indptr[i] should be non-negative (-3 vs. 0)"


def plan_file(tmp_path: Path, signatures=(SIGNATURE,)) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"log_signatures": list(signatures)}))
    return path


def start(tmp_path: Path, log: Path, signatures=(SIGNATURE,)) -> subprocess.Popen:
    args = [sys.executable, str(LOGWATCH), "--plan", str(plan_file(tmp_path, signatures)), "--log", str(log)]
    return subprocess.Popen(args + ["--interval", "0.05"], stdout=subprocess.PIPE, text=True)


def test_a_signature_in_a_log_that_appears_later_and_grows_in_pieces_is_found(tmp_path):
    log = tmp_path / "sglang.log"
    watcher = start(tmp_path, log)
    try:
        log.write_text("INFO server up\n")
        with log.open("a") as handle:
            handle.write(CRASH[:20])  # half a line: the watcher must wait for the rest
            handle.flush()
            assert watcher.poll() is None
            handle.write(CRASH[20:] + "\n")
        out, _ = watcher.communicate(timeout=10)
    finally:
        watcher.kill()
    assert watcher.returncode == 12
    assert "KNOWN ISSUE minicpm-sala-kv-indptr: its log signature appeared in sglang.log line 2" in out
    assert CRASH in out and "what to do: use an image with the fix" in out


def test_unrelated_lines_never_match_only_the_signature_does(tmp_path):
    log = tmp_path / "sglang.log"
    # near misses first: the watcher must read past all 100 of them and report the real one
    log.write_text("INFO kv_indptr ok\nRuntimeError: something else\n" * 50 + CRASH + "\n")
    watcher = start(tmp_path, log)
    try:
        out, _ = watcher.communicate(timeout=10)
    finally:
        watcher.kill()
    assert watcher.returncode == 12 and "appeared in sglang.log line 101" in out


def test_a_plan_without_signatures_is_a_usage_error_not_a_silent_watcher(tmp_path):
    done = subprocess.run(
        [sys.executable, str(LOGWATCH), "--plan", str(plan_file(tmp_path, ())), "--log", "x.log"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "lists no log signature" in done.stderr


def test_the_node_fails_at_once_with_the_issue_named_when_its_engine_logs_the_signature(
    node, tmp_path, assert_no_leftovers
):
    plan = plan_file(tmp_path)
    run = node.run(
        f"""
supervise
step "decode known-issues"
start_service known-issues "$PYTHON" "$SCRIPTS_DIR/logwatch.py" --plan {plan} --log "$LOG_DIR/engine.log"
step "decode engine"
start_service engine bash -c 'echo ready; sleep 0.3; echo "{CRASH}"; exec sleep 60 # $MARKER'
step "benchmark conc8"
run_cmd sleep 30
""",
        timeout=30,
    )
    assert run.rc == 12, run.text
    assert "FAILED benchmark conc8 on sim0: known-issues exited (code 12)" in run.err
    assert "cause: known issue minicpm-sala-kv-indptr (configs/known-issues.yaml)" in run.err
    assert run.elapsed < 10  # seconds, not the benchmark's 30 s nor a time limit's hours
    assert_no_leftovers()
