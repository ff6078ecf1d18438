"""scripts/logwatch.py: a known issue's log signature in an engine log fails the node, naming the issue."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.scripts.conftest import LOAD_SLACK_S, SCRIPTS

LOGWATCH = SCRIPTS / "logwatch.py"
INTERVAL = ("--interval", "1")  # the rendered line always gives the plan's poll interval
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


def test_every_log_given_is_followed_and_the_report_names_where_the_signature_comes_from(tmp_path):
    """A prefill's watcher follows vllm.log and lmcache.log; a signature that is no known issue's (LMCache's
    hang signature) names its own source."""
    hang = signature(issue="lmcache-transfer-mode", regex="No handler registered", source="recipes/vllm.py X")
    (tmp_path / "lmcache.log").write_text("[ERROR] No handler registered for operation register_kv_cache\n")
    args = ["--log", str(tmp_path / "vllm.log"), "--log", str(tmp_path / "lmcache.log"), "--interval", "0.05"]
    done = subprocess.run(
        [sys.executable, str(LOGWATCH), "--plan", str(plan_file(tmp_path, [SIGNATURE, hang])), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 12
    assert "lmcache-transfer-mode: its log signature appeared in lmcache.log line 1" in done.stdout
    assert "(recipes/vllm.py X; the engine is not trusted past this point)" in done.stdout


# A prefill's vllm.log in CI (2026-11-26, mooncake-transfer-engine-non-cuda 0.3.13.post1): the transfer
# stalled, the request failed, and the prefill's next request waited deferred until the stall watchdog.
STALLED_TRANSFER = """\
INFO:     127.0.0.1:54370 - "GET /metrics HTTP/1.1" 200 OK
I1126 09:15:37.988893 23942 transfer_engine_py.cpp:664] Sync batch data transfer timeout after 30000524317ns
(Worker pid=23211) WARNING 11-26 09:15:37 [mooncake_connector.py:1967] Sending to 127.0.0.12:15611 failed \
(ret=-1) after 30.000689813000008 (8 descriptors, 524288 bytes)
E1126 09:15:38.015187 23806 tcp_transport_session_impl.h:518] ClientSession: no transfer progress within \
30s; dropping connection
E1126 09:15:38.015257 23806 tcp_transport_session_impl.h:461] ClientSession: no status frame within 30s \
(peer likely speaks the legacy protocol); dropping connection
"""


def test_a_stalled_mooncake_transfer_fails_the_node_at_its_first_line_as_its_own_cause(tmp_path):
    from recipes.vllm import MOONCAKE_TRANSFER_STALLED
    from scripts import causes

    (tmp_path / "vllm.log").write_text(STALLED_TRANSFER)
    done = subprocess.run(
        [sys.executable, str(LOGWATCH), "--plan", str(plan_file(tmp_path, [MOONCAKE_TRANSFER_STALLED])),
         "--log", str(tmp_path / "vllm.log"), "--interval", "0.05"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 12, done.stderr
    said = re.search(r"KNOWN ISSUE .*", done.stdout)[0]
    assert said.startswith(
        "KNOWN ISSUE mooncake-tcp-transfer-stalled: its log signature appeared in vllm.log line 4"
    )
    found = causes.classify(causes.load(), text=said, code="12", service="known-issues")
    assert found.id == "kv-transfer-stalled"


def test_a_plan_without_signatures_is_a_usage_error_not_a_silent_watcher(tmp_path):
    done = subprocess.run(
        [sys.executable, str(LOGWATCH), "--plan", str(plan_file(tmp_path, ())), "--log", "x.log", *INTERVAL],
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
start_service known-issues "$PYTHON" "$SCRIPTS_DIR/logwatch.py" --plan {plan} --log "$LOG_DIR/engine.log" \\
  --interval "$POLL_INTERVAL"
step "decode engine"
start_service engine bash -c 'echo ready; sleep 0.3; echo "{CRASH}"; exec sleep 60 # $MARKER'
step "benchmark conc8"
run_cmd sleep 30
""",
        timeout=30,
    )
    assert run.rc == 12, run.text
    assert "FAILED benchmark conc8 on sim0: known-issues exited (code 12)" in run.err
    assert "cause: known-issue (minicpm-sala-kv-indptr: its fix and workarounds are in configs/" in run.err
    assert run.elapsed < 10  # seconds, not the benchmark's 30 s nor a time limit's hours
    assert_no_leftovers()


# ---------------------------------------------------------------- big logs, long lines, bad input

FILLER = b"INFO 2026-11-23 12:00:00 [scheduler.py:123] step: batch 64, kv usage 53.1%, 1234.5 tok/s\n"
# Runs the watcher and reports its peak memory (VmHWM: ru_maxrss would count the forking parent's too).
MEASURED = (
    "import os, runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path.insert(0, os.path.dirname(sys.argv[0]))\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "finally:\n"
    "    peak = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
    "    print('peak RSS', peak.split()[1], 'KiB', file=sys.stderr)\n"
)


def watch_once(tmp_path: Path, log: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """The watcher at its production poll interval (1 s), until it exits."""
    args = [
        sys.executable,
        "-c",
        MEASURED,
        str(LOGWATCH),
        "--plan",
        str(plan_file(tmp_path)),
        "--log",
        str(log),
    ]
    start = time.monotonic()
    done = subprocess.run(
        args + ["--interval", "1"], capture_output=True, text=True, timeout=timeout, check=False
    )
    return done, time.monotonic() - start


def peak_rss_mib(done: subprocess.CompletedProcess) -> float:
    return int(re.search(r"peak RSS (\d+) KiB", done.stderr)[1]) / 1024


def test_a_signature_after_30_mb_of_log_is_found_in_seconds(tmp_path):
    """It used to read 1 MiB per poll: 30 polls, 30 s at the 1 s interval, for a log it could read at once."""
    log = tmp_path / "engine.log"
    with log.open("wb") as out:
        out.write(FILLER * (30_000_000 // len(FILLER)))
        out.write(CRASH.encode() + b"\n")
    done, elapsed = watch_once(tmp_path, log)
    print(f"30 MB log: signature found after {elapsed:.2f} s, peak RSS {peak_rss_mib(done):.0f} MiB")
    assert done.returncode == 12 and CRASH in done.stdout
    assert elapsed < 10


def test_a_signature_inside_a_50_mb_line_is_found_in_bounded_memory(tmp_path):
    """A line still being written (no newline yet) of 50 MB: matched in overlapping windows, not held."""
    log = tmp_path / "engine.log"
    with log.open("wb") as out:
        out.write(b"INFO start\n" + b"x" * 30_000_000 + CRASH.encode() + b"y" * 20_000_000)
    done, elapsed = watch_once(tmp_path, log)
    rss = peak_rss_mib(done)
    print(f"50 MB line: signature found after {elapsed:.2f} s, peak RSS {rss:.0f} MiB")
    assert done.returncode == 12 and "appeared in engine.log line 2" in done.stdout
    assert "kv_indptr[i+1] - kv_indptr[i] should be non-negative" in done.stdout
    assert elapsed < 10 and rss < 64  # the line alone is 50 MB


def test_the_watcher_keeps_up_with_a_log_growing_300_mb_a_minute(tmp_path):
    """Three times the 100 MB/min an engine at full debug logging may write; reading 1 MiB a poll fell
    behind by 4 MB every second of it, and would have reported this signature some 15 s late."""
    log = tmp_path / "engine.log"
    log.touch()
    rate = 300e6 / 60  # bytes per second
    written_at: list[float] = []

    def writer() -> None:
        with log.open("ab") as out:
            start = time.monotonic()
            while time.monotonic() - start < 4:
                out.write(FILLER * int(rate * 0.05 / len(FILLER)))
                out.flush()
                time.sleep(0.05)
            out.write(CRASH.encode() + b"\n")
            out.flush()
            written_at.append(time.monotonic())

    args = [
        sys.executable,
        str(LOGWATCH),
        "--plan",
        str(plan_file(tmp_path)),
        "--log",
        str(log),
        "--interval",
        "1",
    ]
    watcher = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        out, _ = watcher.communicate(timeout=30)
        lag = time.monotonic() - written_at[0]
    finally:
        watcher.kill()
        thread.join()
    print(f"log growing at 300 MB/min: signature reported {lag:.2f} s after it was written")
    assert watcher.returncode == 12 and CRASH in out
    assert lag < 1 + LOAD_SLACK_S  # one poll interval


def signature(**over) -> dict:
    return {**SIGNATURE, **over}


@pytest.mark.parametrize(
    "plan, problem",
    [
        ([SIGNATURE], "log_signatures is not a list (or the plan is not a JSON object)"),
        ({"log_signatures": SIGNATURE}, "log_signatures is not a list"),
        (
            {"log_signatures": ["kv_indptr"]},
            "log_signatures[0] is not an object with issue, title, regex, fix",
        ),
        ({"log_signatures": [signature(regex=["a"])]}, "log_signatures[0].regex is not a non-empty string"),
        ({"log_signatures": [signature(regex="(unclosed")]}, "log_signatures[0].regex does not compile"),
        ({"log_signatures": [signature(regex="x*")]}, "log_signatures[0].regex matches an empty line"),
        (
            {"log_signatures": [SIGNATURE, signature(fix=None)]},
            "log_signatures[1].fix is not a non-empty string",
        ),
        ({"log_signatures": [signature(issue=7)]}, "log_signatures[0].issue is not a non-empty string"),
        ({"log_signatures": [signature(source="")]}, "log_signatures[0].source is not a non-empty string"),
        ("[" * 100_000 + "]" * 100_000, "not JSON: nested deeper than 64 levels"),
        ('{"log_signatures": NaN}', "not JSON: log_signatures is NaN"),
        ("directory", "not a regular file"),
        ("fifo", "not a regular file"),  # opened without waiting for a writer
    ],
    ids=lambda value: str(value)[:40],
)
def test_a_plan_it_cannot_use_is_a_usage_error_in_one_line(tmp_path, plan, problem):
    path = tmp_path / "plan.json"
    if plan == "directory":
        path.mkdir()
    elif plan == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(plan if isinstance(plan, str) else json.dumps(plan))
    done = subprocess.run(
        [sys.executable, str(LOGWATCH), "--plan", str(path), "--log", str(tmp_path / "x.log"), *INTERVAL],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"logwatch: cannot use the signatures of {path}: {problem}")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_log_path_that_is_no_file_is_a_usage_error_in_one_line(tmp_path, kind):
    log = tmp_path / "engine.log"
    if kind == "directory":
        log.mkdir()
    else:
        os.mkfifo(log)
    done = subprocess.run(
        [sys.executable, str(LOGWATCH), "--plan", str(plan_file(tmp_path)), "--log", str(log), *INTERVAL],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (2, f"logwatch: cannot read {log}: not a regular file\n")
