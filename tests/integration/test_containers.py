"""The demo job with every node script in a real container (runner cluster:local-container): the `docker run`
line the MI355X runner renders, run by scripts/container.sh through podman behind `docker`, with an image
made on this machine (sim/containers.py). What a reviewer would check by hand: the nodes really ran in
containers (podman started one per node, named for the job), the job passed its proofs, and neither a
finished nor a cancelled job leaves a container behind.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from recipes.render import load, render_config
from recipes.submit import pick, submit
from sim import containers, demo
from sim.cluster.layout import ROOT

from .conftest import require_tools, run_demo

CONFIG = "local-container-vllm-disagg-agentic"
TOOLS = [ROOT / ".venv-lmcache/bin/lmcache", ROOT / ".venv-bench/bin/aiperf"]
NODES = ("sim1", "sim2", "sim3")
DOCKER = demo.CLUSTER / "containers" / "bin" / "docker"
GONE_WITHIN_S = 60  # scancel to no container: SIGTERM, container.sh's `docker stop --time 20`, removal


@pytest.fixture(scope="module")
def tools():
    require_tools(TOOLS)
    if not containers.obtainable():
        pytest.skip("podman is not installed and we are not root to apt-get install it")


def ours() -> list[str]:
    """Every container of this repository on the local cluster's nodes, running or not."""
    return [name for node in NODES for name in containers.containers_of(DOCKER.parent, node)]


def started_containers(since: str) -> list[str]:
    """Names of the containers podman started since SINCE (its own event log: the nodes ran in them)."""
    events = subprocess.run(
        [str(DOCKER), "events", "--stream=false", "--since", since, "--filter", "event=start"]
        + ["--format", "{{.Name}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    # a node container of the local cluster (disagg-<job>-sim<N>); the second before SINCE may hold the end of
    # an earlier test's own containers (other node names), which this job did not start
    return sorted({n for n in events.stdout.split() if re.fullmatch(r"disagg-[0-9]+-sim[0-9]+", n)})


def test_the_demo_runs_every_node_in_its_own_container_and_leaves_none(cluster, tools, tmp_path):
    since = str(int(time.time()) - 1)  # podman takes a Unix time
    done, run_dir = run_demo(CONFIG, tmp_path)
    job_out = (run_dir / "job.out").read_text()
    assert "job succeeded: every node ended cleanly" in job_out
    assert "sim1 step: LMCache proof" in job_out
    job_id = re.search(r"^submitted job (\d+)", done.stdout, re.M)[1]
    assert started_containers(since) == [f"disagg-{job_id}-{n}" for n in NODES]
    assert ours() == []
    assert "removed disagg-" not in job_out  # nothing was left to sweep: each container ended with its node
    # AIPerf came from the run's wheelhouse, installed inside sim1's container (the runner's node-setup),
    # and preflight found exactly the pinned version there
    # and so did the proxy's server stack, which the router ran on
    lock = json.loads((run_dir / "lock.json").read_text())["node_setup"]
    files = {w["file"] for s in lock["sets"].values() for w in s["wheels"]}  # the sets share some wheels
    assert len(files) == len(list((run_dir / "recipe" / "wheelhouse").iterdir())) > 100
    for name, s in lock["sets"].items():
        assert f"sim1 node setup {name}: {len(s['wheels'])} pinned wheels installed in" in job_out
    assert "proxy-python3=python3" in job_out and sorted(lock["sets"]) == ["bench", "proxy"]
    env = re.search(r"sim1 aiperf: aiperf 0\.13\.0 \((\S+)/bin/python\)", job_out)
    assert env and env[1].startswith(f"{run_dir}/setup-env/bench-"), job_out
    # before the containers: every host's NICs checked (the simulated nicctl); then what the image reference
    # was on each node, recorded by the real runtime, is the summary's digest
    for node in NODES:
        assert f"host preflight on {node}: NICs ready: lo up; QoS DSCP" in job_out
    summary = json.loads((run_dir / "summary.json").read_text())["lock"]
    ids = {summary["node_facts"][n]["image"]["id"] for n in NODES}
    assert len(ids) == 1 and summary["image_digest"].startswith("sha256:"), summary["node_facts"]


def test_a_cancelled_job_leaves_no_container(cluster, tools, tmp_path):
    loaded = load(CONFIG)
    variants = render_config(CONFIG, loaded)
    rendered = pick(variants, variants[0].plan.variant)
    profile = loaded.launch.profiles[rendered.plan.runner]
    env = demo.container_env(demo.job_env(), profile)
    demo.simulated_host(rendered.plan)
    job = submit(rendered, tmp_path, env=env)
    try:
        deadline = time.monotonic() + 300
        while len(ours()) < len(NODES):  # polled: every node's container is up
            state = demo.job_state(job.job_id, env)
            assert not state.ended, f"job {job.job_id} ended {state.state} before its containers were seen"
            assert time.monotonic() < deadline, f"job {job.job_id}: containers {ours()} after 300 s"
            time.sleep(0.5)
    finally:
        subprocess.run(["scancel", job.job_id], env=env, check=True)
    deadline = time.monotonic() + GONE_WITHIN_S
    while (ours() or not demo.job_state(job.job_id, env).ended) and time.monotonic() < deadline:
        time.sleep(0.5)  # polled: the nodes' own teardown runs inside first
    assert ours() == [], f"left {GONE_WITHIN_S} s after scancel: {ours()} ({job.run_dir}/job.out)"
    assert demo.job_state(job.job_id, env).state == "CANCELLED"
