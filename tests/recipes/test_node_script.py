"""The rendered node script, run for real: three nodes on their own loopback addresses, fake engines.

Each test starts the three node scripts of the local 2P1D recipe the way srun would (SLURM_NODEID,
SLURMD_NODENAME, shared RUN_DIR) with fakes of vllm, lmcache, aiperf, scontrol and the proxy first on
PATH, and ends the others when one fails, as `srun --kill-on-bad-exit=1` does. Readiness timeouts are
3 s so that a fault must end the job in seconds, not in the minutes a real timeout allows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from recipes import accuracy
from recipes.build import build_plan, timeouts_of
from recipes.render import render_plan
from recipes.submit import snapshot
from scripts import statefiles

FAKE = Path(__file__).resolve().parent / "fakes" / "fake_tool.py"
LOCAL = "local-sim-vllm-disagg-agentic"
NODES = ("sim1", "sim2", "sim3")  # ranks 0, 1: prefill (rank 0 also router + benchmark); rank 2: decode
# The start barrier waits for python and bash to start on a loaded 2-core machine: it gets longer.
FAST = {"barrier": 8, "done": 30, "lmcache_ready": 3, "engine_ready": 3, "router_ready": 3}
FAST_TEARDOWN = {"grace": 3, "fail_grace": 1}  # the fakes exit on TERM at once
SRUN_KILL_WAIT_S = 10  # srun's TERM-then-KILL grace for the other tasks
JOB_BOUND_S = 25  # a generous ceiling; a fault costs 3 s of timeout at most plus teardown


@dataclass
class NodeResult:
    rank: int
    rc: int
    text: str


@dataclass
class Job:
    nodes: dict[int, NodeResult]
    elapsed: float
    run_dir: Path

    def log(self, node: str, service: str) -> str:
        return (self.run_dir / "logs" / node / f"{service}.log").read_text()


class Cluster:
    """Plays srun: one node script per rank, the rest terminated once one fails."""

    def __init__(self, root: Path, marker: str, configs, launch: dict | None = None) -> None:
        self.marker = marker
        self.root = root / marker  # every process's command line carries the marker
        base = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}"
        self.addrs = {node: f"{base}.{i + 1}" for i, node in enumerate(NODES)}
        # both concurrencies of the point in one job (as a fixed-seq-len point runs them): how the node script
        # runs, gates and keeps several benchmarks
        first = configs.targets(LOCAL)[0]
        target = dataclasses.replace(first, concurrency=None, variant=first.variant.removesuffix("_conc2"))
        teardown = target.launch.teardown.model_copy(update=FAST_TEARDOWN)
        target = dataclasses.replace(target, launch=target.launch.model_copy(update={"teardown": teardown}))
        if launch:  # past validation on purpose: quoting must hold even for what lint would refuse
            target = dataclasses.replace(target, launch=target.launch.model_copy(update=launch))
        self.plan = build_plan(target, timeouts=dataclasses.replace(timeouts_of(target.launch), **FAST))
        self.run_dir = self.root / "run"
        self.recipe = self.run_dir / "recipe"
        snapshot(render_plan(self.plan), self.run_dir)
        self._fakes()

    def _fakes(self) -> None:
        bin_dir = self.root / "bin"
        bin_dir.mkdir()
        for tool in ("vllm", "scontrol"):
            path = bin_dir / tool
            path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" {tool} {self.marker} "$@"\n')
            path.chmod(0o755)
        # lmcache and aiperf are Python console scripts, as pip installs them: preflight reads their
        # versions through them
        for tool in ("lmcache", "aiperf"):
            script = bin_dir / tool
            script.write_text(f"#!{sys.executable}\n" + self._python_fake(tool))
            script.chmod(0o755)
        self.site = self.root / "site"
        self.install_lmcache(self.plan.roles[0].pinned[0].version)
        # lm-eval is a console script whose interpreter imports lm_eval (scripts/accuracy.py runs it so): a
        # package whose gsm8k task file exists and whose `python -m lm_eval` is the fake; the staged questions
        script = bin_dir / "lm-eval"
        script.write_text(f"#!{sys.executable}\n" + self._python_fake("lm-eval"))
        script.chmod(0o755)
        accuracy.write_made_up_set(self.recipe / accuracy.EVAL_SET)
        proxy = self.recipe / "proxy"
        shutil.rmtree(proxy, ignore_errors=True)
        proxy.mkdir()
        (proxy / "__main__.py").write_text(self._python_fake("proxy"))
        self.path = f"{bin_dir}:{os.environ['PATH']}"

    def _python_fake(self, tool: str) -> str:
        fake = [str(FAKE), tool, self.marker]
        return f"import os, sys\nos.execv(sys.executable, [sys.executable, *{fake!r}, *sys.argv[1:]])\n"

    def install_lmcache(self, version: str) -> None:
        """What `pip install lmcache==version aiperf==<pin>` leaves for importlib.metadata to find."""
        shutil.rmtree(self.site, ignore_errors=True)
        (aiperf,) = self.plan.leader_pinned
        for name, release in (("lmcache", version), ("aiperf", aiperf.version)):
            dist_info = self.site / f"{name}-{release}.dist-info"
            dist_info.mkdir(parents=True)
            (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {release}\n")
        tasks = self.site / "lm_eval" / "tasks"
        (tasks / "gsm8k").mkdir(parents=True)
        for init in (self.site / "lm_eval", tasks):
            (init / "__init__.py").write_text("")
        (tasks / "gsm8k" / "gsm8k.yaml").write_text("task: gsm8k\n")
        (self.site / "lm_eval" / "__main__.py").write_text(self._python_fake("lm-eval"))

    def env(self, rank: int, faults: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "FAKE_"))}
        env.update(
            PATH=self.path,
            PYTHONPATH=str(self.site),
            SLURM_NODEID=str(rank),
            SLURMD_NODENAME=NODES[rank],
            RUN_DIR=str(self.run_dir),
            RECIPE_DIR=str(self.recipe),
            LEADER_ADDR=self.addrs[NODES[0]],
            NODE_NAMES=",".join(NODES),
            FAKE_NODEADDRS=",".join(f"{n}={a}" for n, a in self.addrs.items()),
            **faults,
        )
        return env

    def run(self, faults: dict[int, dict[str, str]] | None = None, ranks=(0, 1, 2)) -> Job:
        faults = faults or {}
        procs, outs = {}, {}
        start = time.monotonic()
        for rank in ranks:
            outs[rank] = self.root / f"rank{rank}.out"
            with open(outs[rank], "w") as out:
                procs[rank] = subprocess.Popen(
                    ["bash", str(self.recipe / "server_vllm.sh")],
                    env=self.env(rank, faults.get(rank, {})),
                    cwd=self.run_dir,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        self._wait(procs, start)
        elapsed = time.monotonic() - start
        nodes = {r: NodeResult(r, p.returncode, outs[r].read_text()) for r, p in procs.items()}
        return Job(nodes, elapsed, self.run_dir)

    def _wait(self, procs: dict[int, subprocess.Popen], start: float) -> None:
        terminated_at = None
        while None in [p.poll() for p in procs.values()]:  # a list: every process polled, every time
            now = time.monotonic()
            if now - start > JOB_BOUND_S * 2:
                for p in procs.values():
                    p.kill()
                pytest.fail(f"node scripts still running after {JOB_BOUND_S * 2} s")
            failed = any(p.returncode not in (None, 0) for p in procs.values())
            if failed and terminated_at is None:
                terminated_at = now
                for p in procs.values():
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
            if terminated_at is not None and now - terminated_at > SRUN_KILL_WAIT_S:
                for p in procs.values():
                    p.kill()
            time.sleep(0.05)


def settled(marker: str, within_s: float = 5.0) -> list[str]:
    """PIDs still carrying MARKER once those already on their way out have gone (polled, bounded): on a
    loaded machine a process the teardown SIGKILLed can still be listed for a moment after the node script
    ended. A real leak outlives the bound."""
    deadline = time.monotonic() + within_s
    while True:
        done = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
        if not done.stdout.split() or time.monotonic() > deadline:
            return done.stdout.split()
        time.sleep(0.1)


@pytest.fixture
def cluster(tmp_path, configs):
    marker = f"mk{uuid.uuid4().hex[:12]}"
    yield Cluster(tmp_path, marker, configs)
    left = settled(marker)
    # what they were, read before they are killed: a leak is fixed from this, not from two PIDs
    shown = (
        left
        and subprocess.run(
            ["ps", "-o", "pid=,ppid=,stat=,etime=,args=", "-p", ",".join(left)],
            capture_output=True,
            text=True,
        ).stdout
    )
    for pid in left:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass  # ended between pgrep and now
    assert not left, f"processes left behind:\n{shown}"


def job_verdict(job: Job, srun_rc: int = 143) -> subprocess.CompletedProcess:
    """What job.sbatch ends with: outcome.py over every node's outcome file."""
    return subprocess.run(
        [
            sys.executable,
            str(job.run_dir / "recipe" / "scripts" / "outcome.py"),
            "--run-dir",
            str(job.run_dir),
            "--nodes",
            ",".join(NODES),
            "--srun-exit",
            str(srun_rc),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def assert_fast_failure(job: Job, rank: int, *expected: str) -> str:
    """The failing node exits non-zero, says what, and the whole job ends in seconds."""
    text = job.nodes[rank].text
    assert job.nodes[rank].rc != 0, text
    for piece in expected:
        assert piece in text, f"{piece!r} not in rank {rank}'s output:\n{text}"
    assert job.elapsed < JOB_BOUND_S, f"the job took {job.elapsed:.1f} s"
    assert all(n.rc != 0 for n in job.nodes.values()), {r: n.rc for r, n in job.nodes.items()}
    return text


def first_reporter(job: Job, ranks: tuple, failed: str) -> int:
    """The rank that reported the failure itself (the others may have been ended by srun first)."""
    for rank in ranks:
        if failed in job.nodes[rank].text and "received SIGTERM" not in job.nodes[rank].text:
            return rank
    pytest.fail(f"no rank of {ranks} reported {failed!r}: " + "".join(job.nodes[r].text for r in ranks))


def test_a_healthy_job_runs_every_step_and_keeps_every_result(cluster):
    job = cluster.run()
    assert {r: n.rc for r, n in job.nodes.items()} == {0: 0, 1: 0, 2: 0}, job.nodes[0].text
    assert job_verdict(job, srun_rc=0).returncode == 0
    leader = job.nodes[0].text
    for step in (
        "preflight",
        "resolve address",
        "ports free",
        "start barrier",
        "prefill lmcache",
        "prefill vllm",
        "ready barrier",
        "router",
        "smoke and KV proof",
        "cold start proof",
        "benchmark conc2",
        "benchmark conc4",
        "LMCache proof",
        "accuracy",
        "finish barrier",
    ):
        assert f"step: {step}" in leader
    assert "step: decode vllm" in job.nodes[2].text
    for b in cluster.plan.benchmarks:
        assert (job.run_dir / "results" / b.result).is_file()
    assert "gsm8k scored 1.0000 on 8 questions through the router (threshold 0.9000)" in leader
    # every node advertised its own address, and the router was given each by rank
    router = job.log("sim1", "router")
    assert (
        f"http://{cluster.addrs['sim2']}:8000" in router and f"http://{cluster.addrs['sim3']}:8000" in router
    )


def test_lmcache_that_never_becomes_healthy(cluster):
    job = cluster.run({1: {"FAKE_LMCACHE": "never-healthy"}})
    text = assert_fast_failure(job, 1, "FAILED prefill lmcache on sim2", "lmcache", "not ready", "after 3 s")
    assert "fake: serving /healthcheck" in text  # the log tail of the service


def test_lmcache_that_exits_at_start(cluster):
    job = cluster.run({0: {"FAKE_LMCACHE": "exit-at-start:3"}})
    text = assert_fast_failure(job, 0, "FAILED prefill lmcache on sim1", "exited (code 3)")
    assert "fake lmcache: fatal: cannot start" in text
    assert job.nodes[0].rc == 3
    verdict = job_verdict(job)  # srun says 143 (a node it ended); the job says what failed first
    assert verdict.returncode == 3
    assert "first failure on sim1 in step 'prefill lmcache' (exit code 3)" in verdict.stderr


@pytest.mark.parametrize(
    ("line", "issue", "fix", "cause"),
    [
        (
            "[ERROR] No handler registered for operation register_kv_cache_engine_driven_context",
            "lmcache-transfer-mode",
            "transfer-mode",
            "lmcache-transfer-mode",  # a cause class of its own (scripts/causes.json)
        ),
        (
            "LMCache WARNING: Reaped non-GPU instance 3550388144183475186: silent for 142.2s (pinged=True)",
            "lmcache-reaped-engine",
            "worker-reap-timeout",
            "known-issue",
        ),
    ],
)
def test_an_lmcache_server_line_that_means_a_hang_fails_the_job_at_that_line(
    cluster, line, issue, fix, cause
):
    """LMCache logs these and the prefill then waits (2 x mq_timeout at start; forever on its next store,
    /health 200); the prefill's log watcher follows lmcache.log too and ends the job at that line."""
    job = cluster.run({0: {"FAKE_LMCACHE": f"say:{line}", "FAKE_VLLM": "never-healthy"}})
    text = assert_fast_failure(job, 0, f"KNOWN ISSUE {issue}:", "lmcache.log", fix, f"cause: {cause} (")
    assert "recipes/vllm.py LMCACHE_HANG_SIGNATURES" in text
    assert job.nodes[0].rc == 12  # EXIT_KNOWN_ISSUE


def test_vllm_that_crashes_before_health(cluster):
    job = cluster.run({2: {"FAKE_VLLM": "crash-before-health"}})
    text = assert_fast_failure(job, 2, "FAILED decode vllm on sim3", "vllm exited (code 1)")
    assert "RuntimeError: fake engine core died" in text
    verdict = job_verdict(job)
    assert (verdict.returncode, verdict.stderr.splitlines()) == (
        1,
        [
            "job failed: first failure on sim3 in step 'decode vllm' (exit code 1)",
            "cause: crashed (RuntimeError: fake engine core died)",
        ],
    )


def test_a_service_that_exits_0_mid_run_is_fatal(cluster):
    job = cluster.run({0: {"FAKE_AIPERF": "hang"}, 1: {"FAKE_VLLM": "exit0-after:2"}})
    text = assert_fast_failure(job, 1, "vllm", "sim2", "exited (code 0)")
    assert "fake vllm: finished quietly" in text
    assert not (job.run_dir / "results" / cluster.plan.benchmarks[0].result).exists()


def test_a_barrier_peer_that_never_arrives(cluster):
    job = cluster.run(ranks=(0, 1))
    text = assert_fast_failure(
        job, 0, "FAILED start barrier on sim1", "timed out after 8 s; missing rank(s) "
    )
    said = text.rstrip().splitlines()
    assert said[-3].endswith("2 (sim3) (code 5)")
    assert said[-1].startswith("cause: barrier-timeout (waited 8 s for rank(s) 2 (sim3): their own lines")


def test_a_benchmark_that_writes_no_result_fails_the_job(cluster):
    job = cluster.run({0: {"FAKE_AIPERF": "no-result"}})
    assert_fast_failure(job, 0, "FAILED benchmark conc2 on sim1", "profile_export_aiperf.json is missing")


def test_a_run_aiperf_cancelled_fails_the_job_and_keeps_earlier_results(cluster):
    """AIPerf exits 0 when its failed-request threshold aborts a run; the result gate must not."""
    first, second = cluster.plan.benchmarks
    job = cluster.run({0: {"FAKE_AIPERF": f"cancelled-at:{second.concurrency}"}})
    text = assert_fast_failure(
        job, 0, f"FAILED benchmark conc{second.concurrency} on sim1", "AIPerf cancelled the run"
    )
    assert "9 of 49 requests failed (more than 10%)" in text
    assert (job.run_dir / "results" / first.result).is_file()
    assert not (job.run_dir / "results" / second.result).exists()


@pytest.mark.parametrize(
    ("fake", "code", "said", "cause"),
    [
        ("score:0.5", 18, "accuracy below the model's threshold: gsm8k scored 0.5000 on 8 questions",
         "cause: accuracy-below-threshold"),
        ("exit-at-start:1", 11, "accuracy not scored: lm-eval exited 1", "cause: accuracy-unscored"),
    ],
)  # fmt: skip
def test_a_graded_eval_below_the_threshold_is_a_quality_failure_told_apart(cluster, fake, code, said, cause):
    """After the sweep, rank 0's eval: a score below the model's threshold fails the job as a quality failure
    (exit 18); an eval that cannot score fails it as an infrastructure one (exit 11). The sweep's results
    stay either way, and the verdict names the cause class."""
    job = cluster.run({0: {"FAKE_LM_EVAL": fake}})
    assert_fast_failure(job, 0, "FAILED accuracy on sim1", f"exited (code {code})", said)
    for b in cluster.plan.benchmarks:
        assert (job.run_dir / "results" / b.result).is_file()
    verdict = job_verdict(job, srun_rc=code)
    assert cause in verdict.stdout + verdict.stderr, verdict.stdout + verdict.stderr


def test_answers_without_kv_transfer_fail_the_smoke_step_before_any_benchmark(cluster):
    """Correct answers with decode recomputing (a router speaking the old contract) are no success."""
    job = cluster.run({2: {"FAKE_VLLM": "no-kv"}})
    text = assert_fast_failure(job, 0, "FAILED smoke and KV proof on sim1", "no KV moved prefill -> decode")
    assert "step: benchmark" not in text


def test_an_engine_that_served_cache_hits_before_the_point_fails_the_cold_start_proof(cluster):
    """An agentic point is measured on empty caches: a prefill whose LMCache hits are not zero at the point's
    start (an engine left warm by something before it) fails the job before any benchmark runs."""
    job = cluster.run({1: {"FAKE_VLLM": "warm"}})
    text = assert_fast_failure(
        job, 0, "FAILED cold start proof on sim1", "the point would not start cold",
        "prefill1 vllm:external_prefix_cache_hits_total = 100",
    )  # fmt: skip
    assert "cause: not-cold" in text and "step: benchmark" not in text


def test_the_benchmark_exit_code_is_the_nodes_exit_code(cluster):
    job = cluster.run({0: {"FAKE_AIPERF": "exit-at-start:7"}})
    assert_fast_failure(job, 0, "FAILED benchmark conc2 on sim1")
    assert job.nodes[0].rc == 7


def test_a_missing_program_fails_preflight_naming_it(cluster):
    (cluster.root / "bin" / "lmcache").unlink()
    job = cluster.run()
    # both prefill nodes lack it; whichever reports first, srun ends the other
    rank = first_reporter(job, (0, 1), "FAILED preflight on sim")
    text = assert_fast_failure(job, rank, "not on PATH: lmcache")
    assert "step: start barrier" not in text


def test_a_port_a_service_will_listen_on_is_found_taken_before_anything_starts(cluster):
    """A leftover listening on the decode's engine port: named by the decode node in its `ports free` step,
    before any barrier or service (the engine would find it only after loading its weights)."""
    with socket.socket() as hog:
        hog.bind((cluster.addrs["sim3"], 8000))
        hog.listen()
        job = cluster.run()
    text = assert_fast_failure(
        job, 2, "FAILED ports free on sim3:", f"{cluster.addrs['sim3']}:8000, where vllm"
    )
    assert "EADDRINUSE" in text and "step: start barrier" not in text
    assert job.nodes[2].rc == 6


def test_an_image_with_another_lmcache_build_fails_preflight(cluster):
    cluster.install_lmcache("0.5.5")
    job = cluster.run()
    rank = first_reporter(job, (0, 1), "FAILED preflight on sim")
    text = assert_fast_failure(job, rank, "lmcache 0.5.5 is installed")
    assert "the recipe pins 0.5.6" in text


def test_hostile_config_values_reach_programs_verbatim_and_execute_nothing(tmp_path, configs):
    pwned = tmp_path / "pwned"
    hostile = f'/opt/m o\'d"e"ls/$(touch {pwned})/`touch {pwned}`;touch {pwned}'
    marker = f"mk{uuid.uuid4().hex[:12]}"
    job = Cluster(tmp_path, marker, configs, launch={"model_root": hostile}).run()
    try:
        assert {r: n.rc for r, n in job.nodes.items()} == {0: 0, 1: 0, 2: 0}, job.nodes[0].text
        argv = json.loads(job.log("sim3", "vllm").splitlines()[0].split("argv ", 1)[1])
        assert argv[1] == f"{hostile}/amd/Kimi-K2.5-MXFP4"
        assert not pwned.exists()
    finally:
        subprocess.run(["pkill", "-KILL", "-f", marker], check=False)


def test_a_service_death_is_the_root_cause_even_when_a_peer_notices_first(cluster):
    """sim2's engine exits; rank 0's next request to it may fail before sim2's watcher polls. The verdict
    orders failures by when they happened (the engine's exit), and sim2, stopped by the job, still names
    its dead engine rather than the stop signal."""
    job = cluster.run({0: {"FAKE_AIPERF": "hang"}, 1: {"FAKE_VLLM": "exit0-after:2"}})
    sim2 = job.nodes[1].text
    assert "FAILED" in sim2 and "vllm exited (code 0)" in sim2 and "received SIGTERM" not in sim2, sim2
    sim2_end = node_outcome(job, "sim2")
    assert sim2_end["kind"] == "failure" and sim2_end["rc"] == "1"
    for node in ("sim1", "sim3"):
        end = node_outcome(job, node)
        if end["kind"] == "failure":  # a peer that failed on its own, because of the dead engine
            assert float(end["at"]) > float(sim2_end["at"]), node


def node_outcome(job: Job, node: str) -> dict[str, str]:
    """The key=value lines a node script writes to state/<node>/outcome as it ends."""
    text = (job.run_dir / statefiles.FOLDER / node / statefiles.OUTCOME).read_text()
    return dict(line.split("=", 1) for line in text.splitlines())
