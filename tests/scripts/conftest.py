"""Fixtures for the node-side scripts: free ports, a node driver built on node.sh, leftover checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
SYNC = SCRIPTS / "sync.py"
STUB = Path(__file__).resolve().parent / "stubs" / "service_stub.py"

# Each driver plays one node: the header is what a rendered node script does before its steps.
DRIVER_HEADER = """\
set -Eeuo pipefail
LOG_DIR=$WORK/logs
STATE_DIR=$WORK/state
SCRIPTS_DIR=$REPO_SCRIPTS
source "$SCRIPTS_DIR/lib/node.sh"
node_init
svc() { start_service "$1" "$PYTHON" "$STUB" --marker "$MARKER" "${@:2}"; }
"""


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique word put in the argv of every process a test starts, to find leftovers.

    Whatever still carries it after the test (a test that failed or hung) is killed by pid, so one
    broken test does not leak services into the next ones."""
    word = f"mk{uuid.uuid4().hex[:16]}"
    yield word
    for line in leftovers(word).splitlines():
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass  # ended between the listing and the kill


def leftovers(marker: str) -> str:
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, check=False)
    return found.stdout.strip()


@pytest.fixture
def assert_no_leftovers(marker: str) -> Callable[[], None]:
    def check() -> None:
        assert leftovers(marker) == "", f"processes left behind:\n{leftovers(marker)}"

    return check


@dataclass
class NodeRun:
    rc: int
    out: str
    err: str
    elapsed: float
    work: Path

    @property
    def text(self) -> str:
        return self.out + self.err


class NodeDriver:
    """Writes a driver script (header + body) and runs it the way srun runs a node script."""

    def __init__(self, tmp_path: Path, marker: str) -> None:
        self.tmp_path = tmp_path
        self.marker = marker
        self.count = 0

    def env(self, work: Path, extra: dict[str, str] | None) -> dict[str, str]:
        # Never a real job step's: a failing driver would scancel it (node.sh tells the job's other nodes).
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env.update(
            WORK=str(work),
            REPO_SCRIPTS=str(SCRIPTS),
            PYTHON=sys.executable,
            STUB=str(STUB),
            MARKER=self.marker,
            NODE_NAME="sim0",
            POLL_INTERVAL="0.2",
            GRACE_S="5",
            FAIL_GRACE_S="1",
        )
        env.update(extra or {})
        return env

    def script(self, body: str, header: str = DRIVER_HEADER) -> tuple[Path, Path]:
        self.count += 1
        work = self.tmp_path / f"node{self.count}"
        work.mkdir()
        driver = work / "driver.sh"
        driver.write_text(header + body)
        return work, driver

    def run(
        self, body: str, env: dict[str, str] | None = None, timeout: float = 30, header: str = DRIVER_HEADER
    ) -> NodeRun:
        work, driver = self.script(body, header)
        start = time.monotonic()
        done = subprocess.run(
            ["bash", str(driver)],
            cwd=work,
            env=self.env(work, env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return NodeRun(done.returncode, done.stdout, done.stderr, time.monotonic() - start, work)

    def start(self, body: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
        """Starts a driver in the background; stdout and stderr go to out.txt and err.txt in its work dir."""
        work, driver = self.script(body)
        with open(work / "out.txt", "w") as out, open(work / "err.txt", "w") as err:
            proc = subprocess.Popen(
                ["bash", str(driver)], cwd=work, env=self.env(work, env), stdout=out, stderr=err
            )
        return proc, work


@pytest.fixture
def node(tmp_path: Path, marker: str) -> NodeDriver:
    return NodeDriver(tmp_path, marker)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Polls condition until true; fails the test naming what never happened."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def poll() -> Callable[[Callable[[], bool], float, str], None]:
    return wait_for
