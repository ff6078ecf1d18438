"""scripts/container.sh against real containers (podman behind `docker`, sim/containers.py): a container is
named per job and node, its code is the node's, a stop signal reaches the node script inside, and what a
SIGKILLed client leaves running is removed by the sweep after the step or by the next job on the node."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from scripts import statefiles
from sim import containers
from tests.scripts.conftest import hostcheck, stub_squeue

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "container.sh"
# The node script's stand-in inside the container: says it started, tears down on TERM like server.sh.
NODE = 'trap "echo teardown inside; exit 143" TERM; echo node started; sleep 600 & wait'
RUN_TIMEOUT_S = 60  # a container starts in under a second here; this bounds a hang, it is not a wait


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[Path, str]:
    if not containers.obtainable():
        pytest.skip("podman is not installed and we are not root to apt-get install it")
    containers.ensure_podman()
    work = tmp_path_factory.mktemp("containers")
    bin_dir = containers.docker_command(work)
    return bin_dir, containers.rootfs_image(bin_dir, ("bash", "sleep", "cat"), work)


class Node:
    """One SLURM node's view: its name (unique per test, so tests never see each other's containers)."""

    def __init__(self, image: tuple[Path, str], tmp_path: Path) -> None:
        self.bin_dir, self.image = image
        self.name = f"n{uuid.uuid4().hex[:10]}"
        self.run_dir = tmp_path / "run"
        self.run_dir.mkdir()

    def env(self, job: str) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{self.bin_dir}:{os.environ['PATH']}",
            "SLURM_JOB_ID": job,
            "SLURMD_NODENAME": self.name,
            "RUN_DIR": str(self.run_dir),
            "CONTAINER_STOP_S": "5",
        }

    def start(self, job: str, command: str = NODE, image: str | None = None) -> subprocess.Popen:
        argv = ["bash", str(SCRIPT), "run", "--as-submitter", "--", "--init", "--network", "host",
                image or self.image, "bash", "-c"]  # fmt: skip
        return subprocess.Popen(
            [*argv, command], env=self.env(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def sweep(self, job: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), "sweep"], env=self.env(job), capture_output=True, text=True, timeout=60
        )

    def containers(self) -> list[str]:
        return containers.containers_of(self.bin_dir, self.name)

    def outcome(self) -> str:
        return (self.run_dir / statefiles.FOLDER / self.name / statefiles.OUTCOME).read_text()

    def remove_all(self) -> None:
        for name in self.containers():
            subprocess.run([str(self.bin_dir / "docker"), "rm", "--force", name], capture_output=True)


@pytest.fixture
def node(image, tmp_path):
    n = Node(image, tmp_path)
    yield n
    left = n.containers()
    n.remove_all()
    assert not left, f"containers left behind: {left}"


def started(proc: subprocess.Popen) -> None:
    """Until the node inside says it started (its first line), bounded."""
    line = proc.stdout.readline()
    assert line == "node started\n", (
        f"{line!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
    )


def killed_client(proc: subprocess.Popen) -> None:
    """Once its node started: slurmstepd's SIGKILL at the end of KillWait, to the wrapper and its docker
    client (not to the container, which is not the step's process)."""
    started(proc)
    subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=True)
    proc.kill()
    proc.communicate(timeout=RUN_TIMEOUT_S)


def test_the_node_scripts_code_is_the_steps_and_a_failure_leaves_an_outcome(node):
    done = node.start("101", "echo node started; exit 7")
    out, err = done.communicate(timeout=RUN_TIMEOUT_S)
    assert (done.returncode, out) == (7, "node started\n"), err
    assert node.containers() == []
    # the node script inside writes its own outcome; one that never ran (here: none written) gets this one
    assert node.outcome().startswith("rc=7\nkind=failure\nat=") and node.outcome().endswith(
        "step=container\ncause=container-failed\ndetail=docker run exited 7 before the node script reported\n"
    )


def test_a_clean_node_leaves_no_outcome_of_ours_and_no_container(node):
    done = node.start("102", "echo node started")
    out, err = done.communicate(timeout=RUN_TIMEOUT_S)
    assert (done.returncode, out, err) == (0, "node started\n", "")
    assert node.containers() == [] and not (node.run_dir / statefiles.FOLDER).exists()


def test_the_steps_stop_signal_reaches_the_node_script_inside(node):
    proc = node.start("103")
    started(proc)
    assert node.containers() == [f"disagg-103-{node.name}"]
    proc.send_signal(signal.SIGTERM)  # what srun sends a step's tasks when another node failed
    out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 143 and out == "teardown inside\n", err
    assert f"received SIGTERM: stopping disagg-103-{node.name}" in err
    assert node.containers() == []


def test_a_killed_client_leaves_its_container_running_and_the_sweep_removes_it(node):
    killed_client(node.start("104"))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while node.containers() != [f"disagg-104-{node.name}"] and time.monotonic() < deadline:
        time.sleep(0.1)  # polled: the container is listed as soon as podman has its state
    assert node.containers() == [f"disagg-104-{node.name}"], "the container outlives its SIGKILLed client"
    swept = node.sweep("104")
    assert swept.returncode == 0, swept.stderr
    assert swept.stderr == f"container on {node.name}: removed disagg-104-{node.name} (left by job 104)\n"
    assert node.containers() == []


def test_the_next_job_on_the_node_removes_what_an_earlier_one_left(node):
    killed_client(node.start("105"))
    later = node.start("106", "echo node started")
    out, err = later.communicate(timeout=RUN_TIMEOUT_S)
    assert (later.returncode, out) == (0, "node started\n"), err
    assert f"removed disagg-105-{node.name} (left by job 105)" in err
    assert node.containers() == []


def test_a_missing_image_fails_the_node_at_once_naming_it(node):
    done = node.start("107", "true", image="localhost/disagg-recipes-missing:0")
    _, err = done.communicate(timeout=RUN_TIMEOUT_S)
    assert done.returncode == 125 and "localhost/disagg-recipes-missing:0" in err
    assert node.outcome().startswith("rc=125\n")


def test_a_node_without_a_working_docker_fails_before_anything_starts(node):
    env = {**node.env("108"), "DOCKER": str(node.run_dir / "no-docker")}
    done = subprocess.run(
        ["bash", str(SCRIPT), "run", "--", node.image, "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert (
        f"container on {node.name}: cannot list containers with {env['DOCKER']} ps (exit code 127)"
        in done.stderr
    )
    assert (
        node.outcome().startswith("rc=1\n") and "step=container\ncause=container-leftover\n" in node.outcome()
    )


def test_what_the_images_reference_is_on_the_node_is_recorded_before_the_run(node):
    """job.sbatch exports CONTAINER_IMAGE; the real runtime's image id and repository digest are written."""
    env = {**node.env("109"), "CONTAINER_IMAGE": node.image}
    done = subprocess.run(
        ["bash", str(SCRIPT), "run", "--", node.image, "bash", "-c", "exit 0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fields = dict(
        x.split("=", 1)
        for x in (node.run_dir / statefiles.FOLDER / node.name / statefiles.IMAGE).read_text().splitlines()
    )
    inspected = subprocess.run(
        [str(node.bin_dir / "docker"), "image", "inspect", "--format", "{{.Id}}", node.image],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    assert fields["image"] == node.image and fields["id"] == inspected
    assert all("@sha256:" in d for d in fields["digests"].split(",") if d)


def test_an_image_that_cannot_be_inspected_is_said_and_docker_run_says_why(node):
    missing = "localhost/disagg-recipes-missing:0"
    env = {**node.env("110"), "CONTAINER_IMAGE": missing}
    done = subprocess.run(
        ["bash", str(SCRIPT), "run", "--", missing, "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 125
    assert f"container on {node.name}: cannot inspect {missing} before the run:" in done.stderr
    assert not (node.run_dir / statefiles.FOLDER / node.name / statefiles.IMAGE).exists()


def test_the_host_preflight_removes_what_an_earlier_job_left_before_anything_starts(node, tmp_path):
    """hostcheck.sh --sweep-containers (docker runners, job.sbatch's first step), with an `squeue` that says
    every job still runs (its leftover-process check is tests/scripts/test_leftovers.py's)."""
    killed_client(node.start("111"))
    env = node.env("112")
    done = hostcheck(
        {**env, "PATH": f"{stub_squeue(tmp_path / 'slurm')}:{env['PATH']}"}, "--sweep-containers"
    )
    assert done.returncode == 0, done.stderr
    assert f"container on {node.name}: removed disagg-111-{node.name} (left by job 111)" in done.stderr
    assert done.stdout == f"host preflight on {node.name}: no process of an earlier job left\n"
    assert node.containers() == []


def test_the_container_runs_as_the_submitting_user_with_a_home_in_the_run(node):
    """--as-submitter through the real runtime: the host's uid and gid, HOME a folder of the run (the user's
    own), USER set (an uid the image does not know has no name, and Python's getpass would fail)."""
    done = node.start("120", 'echo node started; echo "$HOME $USER"; cat /proc/self/status')
    out, err = done.communicate(timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, err
    home = node.run_dir / "home" / node.name
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    assert out.splitlines()[1] == f"{home} {user}"
    status = dict(line.split(":", 1) for line in out.splitlines()[2:] if ":" in line)
    assert status["Uid"].split()[:2] == [str(os.getuid())] * 2  # real and effective
    assert status["Gid"].split()[:2] == [str(os.getgid())] * 2
    assert set(status["Groups"].split()) >= {str(g) for g in os.getgroups() if g != os.getgid()}
    assert home.is_dir() and home.stat().st_uid == os.getuid()
