"""`sync.py setup-env`: a pinned set installed from a wheelhouse with no network, verified by hash, reused by
lock hash, and every refusal named (real pip, real venv, a wheel made here)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.wheels import make_wheel

SYNC = Path(__file__).resolve().parents[2] / "scripts" / "sync.py"
PYTHON = "{}.{}".format(*sys.version_info[:2])


def lock_for(wheel: Path, path: Path, *, digest: str | None = None) -> Path:
    digest = digest or hashlib.sha256(wheel.read_bytes()).hexdigest()
    version = wheel.name.split("-")[1]
    path.write_text(f"demo-tool=={version} \\\n    --hash=sha256:{digest}\n")
    return path


def setup_env(
    tmp: Path, lock: Path, *, python: str = PYTHON, command: str = "demotool", extra: tuple = ()
) -> subprocess.CompletedProcess:
    """The node tool as a node runs it; the node's PIP_* settings (an index, find-links) must not matter."""
    env = os.environ | {"PIP_INDEX_URL": "http://192.0.2.1/simple", "PIP_FIND_LINKS": str(tmp / "nowhere")}
    return subprocess.run(
        [sys.executable, str(SYNC), "setup-env", "--lock", str(lock), "--wheelhouse", str(tmp / "wheelhouse"),
         "--root", str(tmp / "envs"), "--python", python, "--bin-dir", str(tmp / "bin"),
         "--command", command, *extra],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip


def test_installs_from_the_wheelhouse_and_links_only_the_sets_commands(tmp_path):
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "bench.txt")
    done = setup_env(tmp_path, lock)
    assert done.returncode == 0, done.stderr
    assert "node setup bench: 1 pinned wheels installed" in done.stdout
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["demotool"]
    ran = subprocess.run([str(tmp_path / "bin" / "demotool")], capture_output=True, text=True, check=True)
    assert ran.stdout == "demotool 1.0\n"
    # the environment is isolated from the one that made it: only the set's distribution is in it
    envs = [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]
    assert len(envs) == 1 and envs[0].name.startswith("bench-")


def test_python3_goes_on_path_by_another_name_and_runs_in_the_environment(tmp_path):
    """The proxy set's interpreter: a link would start the base Python, outside the environment."""
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "proxy.txt")
    done = setup_env(tmp_path, lock, command="proxy-python3=python3")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["proxy-python3"]
    probe = (
        "import sys, importlib.metadata as m; print(sys.prefix != sys.base_prefix, m.version('demo-tool'))"
    )
    ran = subprocess.run(
        [str(tmp_path / "bin" / "proxy-python3"), "-c", probe], capture_output=True, text=True, check=True
    )
    assert ran.stdout == "True 1.0\n"
    other = setup_env(tmp_path, lock, command="tool=demotool")
    assert other.returncode != 0 and "only python3 is given another name" in other.stderr


def test_a_second_job_with_the_same_lock_reuses_the_environment(tmp_path):
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "bench.txt")
    assert setup_env(tmp_path, lock).returncode == 0
    again = setup_env(tmp_path, lock)
    assert again.returncode == 0, again.stderr
    assert "1 pinned wheels reused" in again.stdout


def test_a_wheel_whose_hash_is_not_the_pinned_one_is_refused(tmp_path):
    make_wheel(tmp_path / "wheelhouse")
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "bench.txt", digest="0" * 64)
    done = setup_env(tmp_path, lock)
    assert done.returncode == 9
    assert done.stderr.startswith("node setup bench: pip install of bench.txt from")
    assert "HASHES" in done.stderr or "hash" in done.stderr.lower()
    assert not (tmp_path / "bin" / "demotool").exists()


def test_a_half_built_environment_is_built_again(tmp_path):
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "bench.txt")
    assert setup_env(tmp_path, lock).returncode == 0
    (env,) = [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]
    (env / ".complete").unlink()  # as if a job was killed mid-install
    done = setup_env(tmp_path, lock)
    assert done.returncode == 0 and "1 pinned wheels installed" in done.stdout


@pytest.mark.parametrize("python", ["3.9", "3.99"])
def test_another_python_than_the_wheelhouse_s_is_named_before_anything_installs(tmp_path, python):
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "bench.txt")
    done = setup_env(tmp_path, lock, python=python)
    assert done.returncode == 9
    assert (
        f"the image's python3 is {PYTHON}" in done.stderr and f"the wheelhouse is for {python}" in done.stderr
    )
    assert not (tmp_path / "envs").exists() or not any((tmp_path / "envs").iterdir())


def test_a_set_without_the_command_it_promises_is_refused(tmp_path):
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "bench.txt")
    done = setup_env(tmp_path, lock, command="aiperf")
    assert done.returncode == 9
    assert "node setup bench: bench.txt installs no command aiperf" in done.stderr


def test_a_library_is_layered_onto_python3_s_path_not_into_an_environment(tmp_path):
    """A site wheel the engine imports (LMCache): installed with --target next to nothing else, reachable
    through the link the node puts on PYTHONPATH, and the pinned-version check finds it there."""
    lock = lock_for(make_wheel(tmp_path / "wheelhouse"), tmp_path / "lmcache.txt")
    link = tmp_path / "state" / "site-lmcache"
    link.parent.mkdir()
    done = setup_env(tmp_path, lock, extra=("--layer-link", str(link)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"on PATH: demotool; on python3's path as {link}")
    assert {p.name for p in link.iterdir()} - {"__pycache__"} == {
        "bin",
        "demo_tool-1.0.dist-info",
        "demo_tool.py",
    }
    env = os.environ | {"PYTHONPATH": str(link), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    ran = subprocess.run(["demotool"], capture_output=True, text=True, env=env, check=True)
    assert ran.stdout == "demotool 1.0\n"
    check = subprocess.run(
        [sys.executable, str(SYNC), "dist-version", "--command", "demotool", "--dist", "demo-tool",
         "--expect", "1.0"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert check.returncode == 0 and check.stdout.startswith("demotool: demo-tool 1.0 ("), check.stderr
