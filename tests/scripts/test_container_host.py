"""scripts/container.sh's host options against a recording `docker`: what only the node's host knows (the
submitting user and the groups owning its device files, the verbs devices of the runner's RDMA NICs, the
host's RDMA userspace) is decided there, and a missing one fails the node before its container starts, named,
with its outcome written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from scripts import statefiles

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "container.sh"
# Records its arguments (one a line) for `run`; lists no container for `ps`.
FAKE_DOCKER = """#!/usr/bin/env bash
if [[ $1 == run ]]; then printf '%s\\n' "$@" > "$DOCKER_RECORD"; fi
exit 0
"""


@pytest.fixture
def host(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    sysfs = tmp_path / "infiniband"
    for n in range(2):  # two ionic NICs whose verbs devices are not numbered as their names
        verbs = sysfs / f"ionic_{n}" / "device" / "infiniband_verbs" / f"uverbs{5 - n}"
        verbs.mkdir(parents=True)
    libs = tmp_path / "lib"
    libs.mkdir()
    (libs / "libibverbs").mkdir()  # the providers' folder, as on the host
    for name in ("libionic.so.1.1.54.0", "libibverbs/libionic-rdmav34.so"):
        (libs / name).write_text("")
    (libs / "libionic.so").symlink_to("libionic.so.1.1.54.0")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURMD_NODENAME": "ns-mi355x-01", "RUN_DIR": str(run_dir), "CONTAINER_STOP_S": "5",
           "DOCKER_RECORD": str(tmp_path / "docker-run.args")}  # fmt: skip
    return {
        "env": env,
        "sysfs": sysfs,
        "libs": libs,
        "run_dir": run_dir,
        "record": tmp_path / "docker-run.args",
    }


def run(host: dict, *options: str) -> subprocess.CompletedProcess:
    argv = ["bash", str(SCRIPT), "run", *options, "--", "--pull", "never", "image:1", "bash", "node.sh"]
    return subprocess.run(argv, env=host["env"], capture_output=True, text=True, timeout=60)


def recorded(host: dict) -> list[str]:
    return host["record"].read_text().splitlines()


def outcome(host: dict) -> str:
    return (host["run_dir"] / statefiles.FOLDER / "ns-mi355x-01" / statefiles.OUTCOME).read_text()


def test_the_submitting_user_and_the_groups_of_the_device_files(host):
    done = run(host, "--as-submitter")
    assert done.returncode == 0, done.stderr
    args = recorded(host)
    assert args[args.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    home = host["run_dir"] / "home" / "ns-mi355x-01"
    assert f"HOME={home}" in args and home.is_dir()
    assert any(a.startswith("USER=") for a in args) and any(a.startswith("LOGNAME=") for a in args)
    # the host options come before the runner's own words, the image last
    assert args[-4:] == ["--pull", "never", "image:1", "bash", "node.sh"][-4:]


def test_root_is_the_declared_fallback_and_names_the_owner_to_hand_back_to(host):
    done = run(host, "--as-root")
    assert done.returncode == 0, done.stderr
    args = recorded(host)
    assert "--user" not in args
    assert f"RUN_OWNER={os.getuid()}:{os.getgid()}" in args


def test_verbs_devices_come_from_the_nics_named(host):
    done = run(host, "--as-submitter", "--rdma-sysfs", str(host["sysfs"]),
               "--rdma-device", "ionic_0", "--rdma-device", "ionic_1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    devices = [a for i, a in enumerate(recorded(host)) if i and recorded(host)[i - 1] == "--device"]
    assert devices == ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs5", "/dev/infiniband/uverbs4"]


def test_a_nic_without_a_verbs_device_fails_the_node_before_its_container(host):
    done = run(host, "--rdma-sysfs", str(host["sysfs"]), "--rdma-device", "ionic_7")
    assert done.returncode == 1
    assert not host["record"].exists()  # no container started
    assert "RDMA device ionic_7 (the runner's nic-devices) has no verbs device under" in done.stderr
    assert "cause=nic-not-ready" in outcome(host)


def test_host_rdma_userspace_is_mounted_read_only_where_the_runner_says(host):
    libs = host["libs"]
    done = run(host, "--host-file", f"{libs}/libionic*.so=/usr/lib/x86_64-linux-gnu/",
               "--host-file", f"{libs}/libibverbs/libionic-rdmav*.so=")  # fmt: skip
    assert done.returncode == 0, done.stderr
    mounts = [a for i, a in enumerate(recorded(host)) if i and recorded(host)[i - 1] == "-v"]
    assert mounts == [
        # the file, at the link's name
        f"{libs}/libionic.so.1.1.54.0:/usr/lib/x86_64-linux-gnu/libionic.so:ro",
        f"{libs}/libibverbs/libionic-rdmav34.so:{libs}/libibverbs/libionic-rdmav34.so:ro",
    ]


def test_a_missing_host_library_fails_the_node_naming_it(host):
    done = run(host, "--host-file", "/usr/lib/x86_64-linux-gnu/libibverbs/libnothing-rdmav*.so=")
    assert done.returncode == 1
    assert not host["record"].exists()
    assert "libnothing-rdmav*.so (the runner's container.rdma-userspace) is not on this host" in done.stderr
    assert "cause=rdma-userspace-missing" in outcome(host)


def test_a_pattern_of_several_files_cannot_mount_at_one_path(host):
    libs = host["libs"]
    done = run(host, "--host-file", f"{libs}/libionic*=/usr/lib/libionic.so")
    assert done.returncode == 1
    assert "matches 2 files; it mounts at one path" in done.stderr


def test_an_unknown_host_option_is_a_usage_error(host):
    done = run(host, "--as-nobody")
    assert done.returncode == 2 and "unknown option --as-nobody" in done.stderr
