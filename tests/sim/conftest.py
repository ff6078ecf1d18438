"""Fixtures for the simulator: a model directory, free ports, simulator processes that are always
cleaned up (a unique marker in every argv; leftovers killed by pid), and a fake LMCache ZMQ port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
VLLM = REPO / "sim" / "bin" / "vllm"
SGLANG = REPO / "sim" / "bin" / "sglang"
VENV_BIN = REPO / ".venv" / "bin"
GOLDEN = REPO / "tests" / "golden"
ZMTP_SIGNATURE = b"\xff" + b"\x00" * 8 + b"\x7f"


def make_model(root: Path, name: str = "model", **config) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config or {"max_position_embeddings": 65536}))
    return path


def sim_env(**extra: str) -> dict[str, str]:
    """PATH as the local runner sets it: sim/bin first, then the venv whose python3 has the deps."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIM_", "VLLM_", "SGLANG_"))}
    env["PATH"] = f"{VLLM.parent}{os.pathsep}{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update({"SIM_DECODE_S_PER_TOKEN": "0.0005", "SIM_PREFILL_S_PER_TOKEN": "0.000001"})
    env.update(extra)
    return env


def _pids_with(word: str) -> list[int]:
    """Processes whose argv or environment (SIM_TEST_MARKER) carries `word`."""
    pids, needle = [], word.encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if needle in (proc / "cmdline").read_bytes() or needle in (proc / "environ").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass  # the process ended while we looked, or is not ours to read
    return pids


@dataclass
class Sim:
    """One simulator process."""

    proc: subprocess.Popen
    log: Path
    port: int
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Poll /health while checking the process is alive (no fixed sleeps)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"simulator exited ({self.proc.returncode}):\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"simulator not ready after {timeout} s:\n{self.output()}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"simulator still running after {timeout} s:\n{self.output()}") from None

    def metrics(self) -> dict[str, float]:
        from sim.metrics import parse

        return parse(httpx.get(f"{self.url}/metrics", timeout=5.0).text)


@dataclass
class Launcher:
    tmp: Path
    marker: str
    started: list[Sim] = field(default_factory=list)

    def model(self) -> Path:
        """A model directory whose path carries the marker, so every argv does."""
        return make_model(self.tmp, f"model-{self.marker}")

    def start(
        self,
        args: list[str],
        *,
        port: int | None = None,
        env: dict[str, str] | None = None,
        ready: bool = True,
    ) -> Sim:
        """`vllm serve <model dir> --host 127.0.0.1 --port <free> args...`."""
        port = port or free_port()
        argv = ["vllm", "serve", str(self.model()), "--host", "127.0.0.1", "--port", str(port), *args]
        return self.run(argv, port=port, env=env, ready=ready)

    def start_sglang(
        self,
        args: list[str],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        ready: bool = True,
    ) -> Sim:
        """`sglang --model-path <model dir> --host <host> --port <free> args...` (the ARGS of
        `python3 -m sglang.launch_server`)."""
        port = port or free_port()
        argv = ["sglang", "--model-path", str(self.model()), "--host", host, "--port", str(port), *args]
        sim = self.run(argv, port=port, env=env, ready=False)
        sim.host = host
        if ready:
            sim.wait_ready()
        return sim

    def run(
        self, argv: list[str], *, port: int, env: dict[str, str] | None = None, ready: bool = True
    ) -> Sim:
        """Any argv, resolved through PATH like the node scripts do (argv[0] is `vllm`)."""
        log = self.tmp / f"sim-{len(self.started)}.log"
        env = dict(env or sim_env(), SIM_TEST_MARKER=self.marker)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        sim = Sim(proc, log, port)
        self.started.append(sim)
        if ready:
            sim.wait_ready()
        return sim

    def stop_all(self) -> None:
        for sim in self.started:
            if sim.proc.poll() is None:
                sim.proc.send_signal(signal.SIGTERM)
        for sim in self.started:
            try:
                sim.proc.wait(5)
            except subprocess.TimeoutExpired:
                sim.proc.kill()
                sim.proc.wait(5)


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    marker = f"mk{uuid.uuid4().hex[:16]}"
    sims = Launcher(tmp_path, marker)
    try:
        yield sims
    finally:
        sims.stop_all()
        for pid in _pids_with(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # ended between the listing and the kill
        assert not _pids_with(marker), "simulator processes left behind"


class FakeZmqPort:
    """Listens like a ZMQ socket as far as the simulator's liveness probe can tell (ZMTP signature)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(ZMTP_SIGNATURE)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def fake_lmcache() -> Iterator[FakeZmqPort]:
    port = FakeZmqPort()
    yield port
    port.close()


@pytest.fixture
def port() -> Callable[[], int]:
    return free_port
