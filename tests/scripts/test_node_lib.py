"""node.sh played through driver scripts: every failure ends fast, names step/service/node, leaves nothing."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import pytest
from conftest import DRIVER_HEADER, SCRIPTS

from scripts import statefiles

FAST = 6.0  # seconds within which every failure below must end the node script


def health(port: int) -> str:
    return f"http://127.0.0.1:{port}/health"


def test_clean_run_exits_zero_and_tears_down(node, free_port, assert_no_leftovers):
    port = free_port()
    run = node.run(f"""
step start-api
svc api --port {port} --healthy-after 0.3 --body '{{"status": "ok", "engines": {{"prefill": 2}}}}'
wait_http api {health(port)} 10 --expect status=ok --expect engines.prefill=2
supervise
supervise
step bench
run_cmd "$PYTHON" -c 'print("bench ok")'
step done
""")
    assert run.rc == 0, run.text
    assert re.search(r"^\[\d\d:\d\d:\d\d\] sim0 step: start-api$", run.out, re.M)
    assert run.out.index("step: bench") < run.out.index("bench ok") < run.out.index("step: done")
    assert "teardown: stopping api" in run.out
    assert "FAILED" not in run.text
    assert_no_leftovers()


def test_service_never_healthy_times_out(node, free_port, assert_no_leftovers):
    port = free_port()
    run = node.run(f"""
step start-api
svc api --port {port} --never-healthy
wait_http api {health(port)} 1.5
""")
    assert run.rc == 4, run.text
    assert (
        f"FAILED start-api on sim0: api not ready at {health(port)} after 1.5 s (last: HTTP 503)" in run.err
    )
    assert "--- last 20 lines of " in run.err and f"stub: serving on 127.0.0.1:{port}" in run.err
    assert f"cause: ready-timeout (waited 1.5 s for api at {health(port)}: alive but not answering" in run.err
    assert run.elapsed < FAST
    assert_no_leftovers()


def test_service_exiting_at_start_is_caught_while_waiting(node, free_port, assert_no_leftovers):
    port = free_port()
    run = node.run(f"""
step start-lmcache
svc lmcache --port {port} --exit-at-start 42
wait_http lmcache {health(port)} 60
""")
    assert run.rc == 42, run.text
    assert "FAILED start-lmcache on sim0: lmcache exited (code 42)" in run.err
    assert "stub: fatal: bad configuration, exiting with 42" in run.err
    tail_then_cause = "--- end of lmcache log ---\ncause: crashed (lmcache exited with code 42: its log tail"
    assert tail_then_cause in run.err
    assert run.elapsed < FAST  # not the 60 s health timeout
    assert_no_leftovers()


def test_service_crashing_before_health_shows_the_exception(node, free_port, assert_no_leftovers):
    port = free_port()
    run = node.run(f"""
step start-prefill
svc prefill --port {port} --never-healthy --crash-after 0.3
wait_http prefill {health(port)} 60
""")
    assert run.rc == 1, run.text
    assert "FAILED start-prefill on sim0: prefill exited (code 1)" in run.err
    assert "cause: crashed (RuntimeError: engine core died (stub crash))" in run.err
    assert run.err.count("cause: ") == 1, run.err  # the outcome keeps the report's cause, said once
    outcome = _outcome(run)
    assert (outcome["cause"], outcome["detail"]) == ("crashed", "RuntimeError: engine core died (stub crash)")
    assert run.elapsed < FAST
    assert_no_leftovers()


def test_service_port_in_use_is_classified(node, free_port, assert_no_leftovers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = node.run(f"""
step start-router
svc router --port {port}
wait_http router {health(port)} 60
""")
    assert run.rc == 1, run.text
    assert "FAILED start-router on sim0: router exited (code 1)" in run.err
    assert "cause: port-in-use (" in run.err
    assert_no_leftovers()


def test_watcher_treats_a_clean_exit_mid_run_as_fatal(node, free_port, assert_no_leftovers):
    port = free_port()
    run = node.run(f"""
step start-decode
svc decode --port {port} --exit-after 1 --exit-code 0
wait_http decode {health(port)} 10
supervise
step bench
run_cmd "$PYTHON" "$STUB" --marker "$MARKER" --no-server
""")
    assert run.rc == 1, run.text
    assert "FAILED bench on sim0: decode exited (code 0)" in run.err
    assert "stub: exiting with code 0\n--- end of decode log ---" in run.err
    assert "cause: exited (decode ended on its own" in run.err
    assert run.elapsed < FAST
    assert_no_leftovers()  # the foreground benchmark stand-in too


def test_watcher_report_reaches_the_output_while_waiting_for_another_service(
    node, free_port, assert_no_leftovers
):
    lmcache, vllm = free_port(), free_port()
    run = node.run(f"""
step start-lmcache
svc lmcache --port {lmcache} --exit-after 1 --exit-code 3
wait_http lmcache {health(lmcache)} 10
supervise
step start-vllm
svc vllm --port {vllm} --never-healthy
wait_http vllm {health(vllm)} 60
""")
    assert run.rc == 3, run.text
    assert "FAILED start-vllm on sim0: lmcache exited (code 3)" in run.err
    assert "cause: crashed (lmcache exited with code 3" in run.err
    assert run.elapsed < FAST
    assert_no_leftovers()


def test_exit_code_is_the_first_failure(node, free_port, assert_no_leftovers):
    port, other = free_port(), free_port()
    run = node.run(f"""
step serve
svc steady --port {other}
supervise
svc flaky --port {port} --exit-after 0.5 --exit-code 9
run_cmd "$PYTHON" "$STUB" --marker "$MARKER" --no-server
""")
    # Not 143 (the foreground command and steady die of TERM in teardown) nor 1: the service's own code.
    assert run.rc == 9, run.text
    assert run.err.count("FAILED") == 1, run.err
    assert "FAILED serve on sim0: flaky exited (code 9)" in run.err
    assert "teardown: stopping command(pid" in run.out and "steady" in run.out
    assert_no_leftovers()


def test_service_ignoring_sigterm_is_killed_after_the_fail_grace(node, free_port, assert_no_leftovers):
    port = free_port()
    run = node.run(f"""
step start-lmcache
svc lmcache --port {port} --ignore-term
wait_http lmcache {health(port)} 10
step bench
fail "benchmark result missing"
""")
    assert run.rc == 1, run.text
    assert "FAILED bench on sim0: benchmark result missing" in run.err
    assert "still running after 1 s, sending SIGKILL: lmcache" in run.err
    assert 1.0 <= run.elapsed < FAST
    assert_no_leftovers()


def test_a_service_process_outliving_its_session_leader_is_still_stopped(node, assert_no_leftovers):
    """Teardown waits for a service's whole session, not only its leader: here the service's shell dies of
    the TERM and its child, ignoring TERM, lives on in the session until the SIGKILL after the grace."""
    run = node.run("""
step keep
start_service keeper bash -c '"$PYTHON" "$STUB" --marker "$MARKER" --no-server --ignore-term \\
  > "$WORK/keeper.out" & wait'
until [[ -s $WORK/keeper.out ]]; do sleep 0.05; done
fail "stop here"
""")
    assert run.rc == 1, run.text
    assert "FAILED keep on sim0: stop here" in run.err
    assert "still running after 1 s, sending SIGKILL: keeper" in run.err
    assert 1.0 <= run.elapsed < FAST
    assert_no_leftovers()


@pytest.mark.parametrize("command", ["bash -c 'exit 7'", "run_cmd bash -c 'exit 7'"])
def test_err_trap_names_step_command_and_line(node, command, assert_no_leftovers):
    run = node.run(f"step configure\n{command}\necho unreachable\n")
    assert run.rc == 7, run.text
    line = DRIVER_HEADER.count("\n") + 2
    assert f"FAILED configure on sim0: command 'bash -c 'exit 7'' exited (code 7) at line {line}" in run.err
    assert "unreachable" not in run.out


def test_the_foreground_command_s_pid_is_recorded_while_it_runs(node):
    """state/<node>/foreground.pid names the command run_cmd waits for (the bench kills AIPerf by it: AIPerf
    renames its processes), and is gone once it returns."""
    run = node.run(
        "step bench\n"
        'run_cmd bash -c \'[[ $(cat "$1/foreground.pid") == "$$" ]] && echo recorded\' _ "$STATE_DIR"\n'
        "[[ ! -e $STATE_DIR/foreground.pid ]] && echo removed\n"
    )
    assert run.rc == 0, run.text
    assert "recorded\nremoved\n" in run.out


def test_run_cmd_refuses_a_shell_function(node):
    run = node.run("step bench\nbench() { :; }\nrun_cmd bench\n")
    assert run.rc == 1, run.text
    assert "FAILED bench on sim0: run_cmd: 'bench' is a shell function; run_cmd runs programs" in run.err


def test_external_sigterm_tears_down(node, poll, assert_no_leftovers):
    proc, work = node.start("""
step bench
run_cmd "$PYTHON" "$STUB" --marker "$MARKER" --no-server
""")
    try:
        poll(lambda: "stub: starting" in (work / "out.txt").read_text(), 10, "the foreground command")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=FAST)
    finally:
        proc.kill()
    assert rc == 143
    assert "FAILED bench on sim0: received SIGTERM" in (work / "err.txt").read_text()
    assert_no_leftovers()


def test_a_sigterm_during_a_long_preflight_command_is_handled_at_once(node, poll, assert_no_leftovers):
    """A node setup's pip install (minutes) runs captured but interruptible: a TERM (scancel, a failing
    peer) ends the node at once, not when the install ends (CI: a container outlived docker stop's grace)."""
    proc, work = node.start("""
step "node setup"
_node_capture setup-bench "$PYTHON" "$STUB" --marker "$MARKER" --no-server
""")
    try:
        poll(lambda: (work / "state" / "setup-bench.out").is_file(), 10, "the captured command")
        poll(lambda: "stub: starting" in (work / "state" / "setup-bench.out").read_text(), 10, "its output")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=FAST)
    finally:
        proc.kill()
    assert rc == 143
    assert "FAILED node setup on sim0: received SIGTERM" in (work / "err.txt").read_text()
    assert_no_leftovers()


def test_barrier_timeout_names_the_missing_node(node, free_port, secret):
    port = free_port()
    run = node.run(f"""
step start-barrier
barrier start 0 2 127.0.0.1:{port} 1.5 --nodes sim0,sim1 --secret-file {secret}
""")
    assert run.rc == 5, run.text
    expected = "barrier start: timed out after 1.5 s; missing rank(s) 1 (sim1) (code 5)"
    assert f"FAILED start-barrier on sim0: {expected}" in run.err
    assert run.elapsed < FAST


def test_barrier_with_a_secret_open_to_others_fails_the_step_naming_the_file(node, free_port, secret):
    secret.chmod(0o644)
    run = node.run(f"""
step start-barrier
barrier start 1 2 127.0.0.1:{free_port()} 30 --secret-file {secret}
""")
    assert run.rc == 13, run.text
    expected = (
        f"barrier start: secret file {secret}: mode 0644 lets group or others at it (chmod 600) (code 13)"
    )
    assert f"FAILED start-barrier on sim0: {expected}" in run.err
    assert run.elapsed < FAST  # at once, not after its 30 s timeout


def test_arguments_arrive_unchanged_and_execute_nothing(node, tmp_path):
    weird = """a b  "c" 'd' $(touch pwned1) `touch pwned2` ; touch pwned3 \\ * ~ $HOME\t|& >x"""
    run = node.run(
        """
step args
start_service argv printf '%s\\n' "$WEIRD"
run_cmd "$PYTHON" -c 'import sys; open(sys.argv[1], "w").write(sys.argv[2])' "$WORK/run_cmd.out" "$WEIRD"
for _ in $(seq 200); do
  if [[ -s $STATE_DIR/argv.rc ]]; then break; fi
  sleep 0.05
done
""",
        env={"WEIRD": weird},
    )
    assert run.rc == 0, run.text
    code, at = (run.work / "state" / "argv.rc").read_text().split()  # exit code, and when (epoch seconds)
    assert code == "0" and float(at) > 0
    assert (run.work / "logs" / "argv.log").read_text() == weird + "\n"
    assert (run.work / "run_cmd.out").read_text() == weird
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith("pwned") or p.name == "x"]


def test_node_init_requires_its_variables(node):
    header = DRIVER_HEADER.replace("SCRIPTS_DIR=$REPO_SCRIPTS\n", "").replace(
        "$SCRIPTS_DIR/lib", "$REPO_SCRIPTS/lib"
    )
    run = node.run("echo unreachable\n", header=header)
    assert run.rc == 1, run.text
    assert "FAILED init on sim0: node_init: SCRIPTS_DIR is not set" in run.err
    assert "unreachable" not in run.out


TRACEBACK = """\
(EngineCore pid=7) INFO loading weights
(EngineCore pid=7) Traceback (most recent call last):
(EngineCore pid=7)   File "core.py", line 10, in run
(EngineCore pid=7)     raise ValueError("bad model")
(EngineCore pid=7)     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
(EngineCore pid=7) ValueError: bad model
(EngineCore pid=7) INFO shutting down
"""

CAUSES = [
    (
        "OSError: [Errno 98] Address already in use\n",
        "1",
        "port-in-use (OSError: [Errno 98] Address already in use)",
    ),
    (
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2 GiB\n",
        "1",
        "gpu-out-of-memory (torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2 GiB)",
    ),
    ("hipErrorOutOfMemory\n", "134", "gpu-out-of-memory (hipErrorOutOfMemory)"),
    (
        "ConnectionRefusedError: [Errno 111] Connection refused\n",
        "1",
        "peer-unreachable (ConnectionRefusedError: [Errno 111] Connection refused)",
    ),
    (
        "requests.exceptions.ConnectionError: lmcache\n",
        "1",
        "peer-unreachable (requests.exceptions.ConnectionError: lmcache)",
    ),
    (TRACEBACK, "1", "crashed (ValueError: bad model)"),
    ('Traceback (most recent call last):\n  File "x.py", line 1\n', "1", 'crashed (File "x.py", line 1)'),
    ("all good\n", "0", "exited (svc ended on its own (an idle or request limit, a stray stop))"),
    (
        "",
        "137",
        "killed (killed by SIGKILL: the kernel log (dmesg) says whether the out-of-memory killer did it)",
    ),
    (
        "",
        "143",
        "killed (killed by SIGTERM: the kernel log (dmesg) says whether the out-of-memory killer did it)",
    ),
    ("config error\n", "3", "crashed (svc exited with code 3: its log tail above says why)"),
    ("still loading\n", "", "unknown (still loading)"),  # nothing else is known of a service still running
]


def test_causes_are_classified_from_the_log(tmp_path):
    for i, (log, _, _) in enumerate(CAUSES):
        (tmp_path / f"{i}.log").write_text(log)
    codes = " ".join(f"'{code}'" for _, code, _ in CAUSES)
    script = f"""
set -Eeuo pipefail
source {SCRIPTS}/lib/node.sh
codes=({codes})
for i in "${{!codes[@]}}"; do _node_cause "{tmp_path}/$i.log" "${{codes[i]}}" svc; done
"""
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [cause for _, _, cause in CAUSES]


def test_a_stopped_service_fails_the_node_after_the_stopped_grace(node, free_port, assert_no_leftovers):
    """SIGSTOP to a service's whole session while the node waits for its readiness (an hour on a real
    cluster): the watcher names it after STOPPED_GRACE_S, not at the readiness timeout."""
    port = free_port()
    run = node.run(f"""
export STOPPED_GRACE_S=1.5
step start-lmcache
svc lmcache --port {port} --never-healthy
supervise
read -r group < "$STATE_DIR/lmcache.pid"
until kill -0 -- "-$group" 2> /dev/null; do sleep 0.05; done  # its session exists (setsid has run)
kill -STOP -- "-$group"
wait_http lmcache {health(port)} 60
""")
    assert run.rc == 1, run.text
    found = re.search(
        r"FAILED start-lmcache on sim0: lmcache stopped \(process state T, pid (\d+)\) for 1\.5 s", run.err
    )
    assert found, run.err
    assert "cause: service-stopped (" in run.err
    assert run.elapsed < FAST  # not the 60 s readiness wait
    assert_no_leftovers()


def test_a_stopped_process_deep_in_a_service_fails_the_node(node, free_port, assert_no_leftovers):
    """Only a grandchild of the service's leader stopped (an engine's worker under a debugger): the watcher
    reads the service's process tree, not just its leader."""
    port = free_port()
    run = node.run(f"""
export STOPPED_GRACE_S=1.5
step start-api
spawn='import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[2]])
open(sys.argv[1] + ".tmp", "w").write(str(child.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
child.wait()'
start_service api "$PYTHON" -c "$spawn" "$WORK/child.pid" "$MARKER"
supervise
until [[ -s $WORK/child.pid ]]; do sleep 0.05; done
child=$(< "$WORK/child.pid")
kill -STOP "$child"
echo "stopped $child"
wait_http api {health(port)} 60
""")
    assert run.rc == 1, run.text
    child = re.search(r"^stopped (\d+)$", run.out, re.M)
    assert child, run.text
    assert f"api stopped (process state T, pid {child[1]}) for 1.5 s" in run.err
    assert run.elapsed < FAST
    assert_no_leftovers()


def test_a_service_stopped_briefly_and_continued_is_no_failure(node, free_port, assert_no_leftovers):
    port = free_port()
    run = node.run(f"""
export STOPPED_GRACE_S=3
step start-api
svc api --port {port} --healthy-after 0.3
supervise
read -r group < "$STATE_DIR/api.pid"
until kill -0 -- "-$group" 2> /dev/null; do sleep 0.05; done
kill -STOP -- "-$group"
sleep 1.5  # under the grace, while the watcher polls: the service is seen stopped, then running again
kill -CONT -- "-$group"
wait_http api {health(port)} 10
step done
""")
    assert run.rc == 0, run.text
    assert "FAILED" not in run.text
    assert_no_leftovers()


def test_a_refused_result_is_followed_by_the_router_s_last_warnings(node):
    """AIPerf's error summary gives status and body, never the engine: the router's own warnings (our proxy
    names the engine) follow the FAILED line."""
    run = node.run("""
step "benchmark conc2"
mkdir -p "$LOG_DIR"
{
  echo "INFO proxy: started"
  echo "WARNING proxy: request 1: prefill leg failed: prefill http://127.0.0.12:8000 answered HTTP 500"
} > "$LOG_DIR/router.log"
printf '{"records": {}}' > "$WORK/result.json"
collect_result "$WORK/result.json" "$WORK/kept.json" 0.1 5
""")
    assert run.rc == 1, run.text
    failed = run.err.index("FAILED benchmark conc2 on sim0: ")
    warnings = run.err.index("--- the router's last warnings (")
    assert failed < warnings
    assert "prefill http://127.0.0.12:8000 answered HTTP 500\n--- end of router warnings ---" in run.err
    assert "INFO proxy: started" not in run.err


def test_a_silent_stalled_start_fails_before_the_readiness_timeout(node, free_port, assert_no_leftovers):
    """A service that blocks before it listens, writing nothing and using no CPU (a deadlock, a lost peer):
    named after STALL_GRACE_S, not after the 60 s readiness wait."""
    port = free_port()
    run = node.run(f"""
export STALL_GRACE_S=2
step start-prefill
hang='import threading; print("loading", flush=True); threading.Event().wait()'
start_service vllm "$PYTHON" -c "$hang" "$MARKER"
wait_http vllm {health(port)} 60
""")
    assert run.rc == 4, run.text
    assert (
        "FAILED start-prefill on sim0: vllm made no progress for 2 s while starting: nothing answered, its "
        "log did not grow and it used no CPU time" in run.err
    )
    assert "loading" in run.err and "cause: stalled (vllm stalled while starting" in run.err
    assert run.elapsed < FAST
    assert_no_leftovers()


def test_a_server_that_answers_while_starting_is_not_stalled(node, free_port, assert_no_leftovers):
    """Answering HTTP (503 until ready) is alive, whatever its log and CPU do: only its readiness timeout
    ends that wait."""
    port = free_port()
    run = node.run(f"""
export STALL_GRACE_S=1
step start-api
svc api --port {port} --healthy-after 3
wait_http api {health(port)} 30
step done
""")
    assert run.rc == 0, run.text
    assert "FAILED" not in run.text
    assert_no_leftovers()


def _outcome(run) -> dict[str, str]:
    text = (run.work / "state" / statefiles.OUTCOME).read_text()
    return dict(line.split("=", 1) for line in text.splitlines())


def test_the_outcome_names_the_cause_of_a_failure_the_node_said(node, assert_no_leftovers):
    """A failure without a service report (a preflight's own line) is classified from what the node said."""
    run = node.run("""
step preflight
fail "GPUs not drained: card3 (0000:45:00.0): 61.2% of VRAM in use (threshold 10%)"
""")
    assert run.rc == 1, run.text
    assert "cause: gpu-not-drained (FAILED preflight on sim0: GPUs not drained: card3" in run.err
    outcome = _outcome(run)
    assert (outcome["cause"], outcome["step"]) == ("gpu-not-drained", "preflight")
    assert outcome["detail"].startswith("FAILED preflight on sim0: GPUs not drained: card3")
    assert_no_leftovers()


def test_a_node_ended_by_others_names_no_cause(node, assert_no_leftovers):
    run = node.run("""
step wait
kill -TERM "$_NODE_MAIN_PID"
fail "not reached: the TERM trap ends the node first"
""")
    assert run.rc == 143, run.text
    assert "cause: " not in run.err
    assert _outcome(run)["cause"] == ""
    assert_no_leftovers()


def _signal_every_process_of(work, sig: int) -> list[int]:
    """What scancel does to a job step: SIG to every process of it at once (here: every process whose
    environment carries this driver's WORK), services in sessions of their own included."""
    mark, hit = f"WORK={work}\0".encode(), []
    for proc in os.scandir("/proc"):
        if not proc.name.isdigit():
            continue
        try:
            with open(f"/proc/{proc.name}/environ", "rb") as f:
                if mark not in f.read():
                    continue
            os.kill(int(proc.name), sig)
            hit.append(int(proc.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return hit


def test_a_node_ended_by_a_peer_still_reports_the_service_that_died_before(node, poll, assert_no_leftovers):
    """The race of a decode crash: the benchmark on another node fails first and its scancel TERMs this
    node before the watcher's next round (held off here by a 30 s poll). The service that had died already
    is this node's failure, with its exit time -- even though another service, started before it, dies of
    the TERM first (a log watcher: code 143)."""
    proc, work = node.start(
        """
svc watch --no-server
svc decode --never-healthy --crash-after 0.3
supervise
step "finish barrier"
run_cmd "$PYTHON" "$STUB" --marker "$MARKER" --no-server
""",
        env={"POLL_INTERVAL": "30"},
    )
    try:
        poll(lambda: (work / "state" / "decode.rc").is_file(), 10, "the decode's crash")
        poll(lambda: "stub: starting" in (work / "out.txt").read_text(), 10, "the foreground command")
        crashed_at = float((work / "state" / "decode.rc").read_text().split()[1])
        _signal_every_process_of(work, signal.SIGTERM)
        rc = proc.wait(timeout=FAST)
    finally:
        proc.kill()
    err = (work / "err.txt").read_text()
    assert rc == 1, err
    assert "FAILED finish barrier on sim0: decode exited (code 1)" in err
    outcome = dict(
        line.split("=", 1) for line in (work / "state" / statefiles.OUTCOME).read_text().splitlines()
    )
    assert (outcome["kind"], outcome["cause"]) == ("failure", "crashed"), outcome
    assert float(outcome["at"]) == pytest.approx(crashed_at, abs=1e-3)  # when it died, not when TERM came
    assert_no_leftovers()


def test_stopping_the_watcher_at_any_point_of_its_round_is_no_failure(node, free_port, assert_no_leftovers):
    """Teardown TERMs the watcher wherever it is in its round: it must end quietly every time (it once broke
    when the TERM landed while bash parsed a $(...) inside ((...)), and failed a clean node)."""
    port = free_port()
    run = node.run(
        f"""
svc api --port {port} --healthy-after 0
wait_http api {health(port)} 10
for i in $(seq 60); do
  supervise
  sleep "0.0$((RANDOM % 10))"
  _node_stop_watcher
  [[ ! -s $STATE_DIR/$STATE_FAILURE ]] || {{ echo "round $i: $(< "$STATE_DIR/$STATE_FAILURE")"; exit 9; }}
done
echo rounds done
""",
        env={
            "POLL_INTERVAL": "0.01",
            "STOPPED_GRACE_S": "0.05",
        },  # rounds back to back, sessions listed often
        timeout=120,
    )
    assert run.rc == 0 and "rounds done" in run.out, run.text
    assert "FAILED" not in run.text and "unexpected EOF" not in run.text
    assert_no_leftovers()
