"""Fixtures for the node-side scripts: free ports, a node driver built on node.sh, leftover checks."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from schemas.launch import FailureReport, Timeouts

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
SYNC = SCRIPTS / "sync.py"
STUB = Path(__file__).resolve().parent / "stubs" / "service_stub.py"
# What a loaded 2-core machine may add to a tool's own deadline before the test sees it end (process start,
# scheduling): the bounds tested are the tools' deadlines plus this, against "never" or "30 s" before.
LOAD_SLACK_S = 6.0
# SYNC_PYTHON runs sync.py under another interpreter (it must work on Python 3.8 in old containers).
SYNC_PYTHON = os.environ.get("SYNC_PYTHON", sys.executable)

# What a rendered node script sets from the plan, here the schema's defaults (node.sh defaults nothing).
RUNNER_DEFAULTS = {
    "STOPPED_GRACE_S": str(Timeouts().stopped),
    "STALL_GRACE_S": str(Timeouts().stall),
    "LOG_TAIL_LINES": str(FailureReport().log_lines),
    "ROUTER_WARNING_LINES": str(FailureReport().router_warning_lines),
}

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
            **RUNNER_DEFAULTS,
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


# ---------------------------------------------------------------- sync.py, as the node script runs it


def sync(*args: str, timeout: float = 20, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SYNC_PYTHON, str(SYNC), *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def stub_squeue(folder: Path, body: str = "echo RUNNING") -> Path:
    """FOLDER with an `squeue` whose shell BODY answers (default: every job still runs); put it first on
    PATH. The real one prints a job's state, or "Invalid job id specified" and exit code 1 once SLURM
    forgot the job."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "squeue").write_text(f"#!/bin/sh\n{body}\n")
    (folder / "squeue").chmod(0o755)
    return folder


def hostcheck(env: dict[str, str], *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """scripts/hostcheck.sh as srun runs it on a node's host, ENV its job's; its python3 is this one."""
    env = {**env, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', os.environ['PATH'])}"}
    return subprocess.run(
        ["bash", str(SCRIPTS / "hostcheck.sh"), *map(str, args)],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def start_sync(*args: str, stderr: Path, **popen: object) -> subprocess.Popen:
    with open(stderr, "w") as err:
        return subprocess.Popen(
            [SYNC_PYTHON, str(SYNC), *args], stdout=subprocess.DEVNULL, stderr=err, **popen
        )


def write_secret(path: Path, text: str | None = None, mode: int = 0o600) -> Path:
    """A secret file as `make submit` writes it (64 hex digits and a newline, mode 0600) unless told."""
    path.write_text(secrets.token_hex(32) + "\n" if text is None else text)
    path.chmod(mode)
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    return write_secret(tmp_path / "job.secret")


def barrier_args(
    port: int, rank: int, size: int, secret: Path, timeout: float = 10, name: str = "start"
) -> list[str]:
    return [
        *("barrier", "--name", name, "--rank", str(rank), "--size", str(size)),
        *("--leader", f"127.0.0.1:{port}", "--timeout", str(timeout)),
        *("--secret-file", str(secret), "--node", f"sim{rank}"),
    ]


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    """Background processes of a test; killed if the test fails before they end."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def listening(port: int) -> bool:
    """Whether something listens on the port (checked without connecting, which could self-connect)."""
    with open("/proc/net/tcp") as table:
        return any(line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A" for line in table)


# ---------------------------------------------------------------- HTTP servers that misbehave

Respond = Callable[[socket.socket], None]


def http_answer(body: bytes, status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body


def drip(data: bytes, every: float = 0.1) -> Respond:
    """An answer sent one byte every EVERY seconds: each byte resets a per-operation socket timeout."""

    def respond(conn: socket.socket) -> None:
        for byte in data:
            conn.sendall(bytes([byte]))
            time.sleep(every)

    return respond


def send(data: bytes) -> Respond:
    return lambda conn: conn.sendall(data)


@pytest.fixture
def raw_http() -> Iterator[Callable[[Respond], str]]:
    """serve(respond) -> the http://127.0.0.1:PORT of a server that reads each request, then runs respond."""
    listeners: list[socket.socket] = []

    def answer(conn: socket.socket, respond: Respond) -> None:
        with conn:
            try:
                conn.recv(65536)  # the request: small, one read
                respond(conn)
            except OSError:
                pass  # the client gave up: what the tests want it to do

    def serve(respond: Respond) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def accept_all() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=answer, args=(conn, respond), daemon=True).start()

        threading.Thread(target=accept_all, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield serve
    for listener in listeners:
        listener.close()
