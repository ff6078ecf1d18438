"""`sync.py rdma-register`: Mooncake registering GPU memory over the runner's RDMA devices before any engine
loads, in a child of the engine's Python. The image's torch and mooncake are stood in for by modules whose
behaviour is each way the registration goes on real sites: it works; ibv_reg_mr of HIP memory is refused
(EINVAL on ionic NICs: batch_register_memory returns non-zero); the dma-buf path crashes in the HIP runtime
(SIGSEGV); it hangs. Each failure names the way it was tried and the other one to try."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SYNC = Path(__file__).resolve().parents[2] / "scripts" / "sync.py"
TORCH = """
class _Buffer:
    def data_ptr(self):
        return 0x7f0000000000
def empty(size, dtype=None, device=None):
    assert device == "cuda"
    return _Buffer()
uint8 = "uint8"
"""
MOONCAKE_ENGINE = """
import os, signal, time
BEHAVIOUR = os.environ["FAKE_REGISTRATION"]
class TransferEngine:
    def initialize(self, host, metadata, protocol, devices):
        assert (metadata, protocol) == ("P2PHANDSHAKE", "rdma")
        return -1 if BEHAVIOUR == "no-device" else 0
    def batch_register_memory(self, ptrs, lengths):
        if BEHAVIOUR == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if BEHAVIOUR == "hang":
            time.sleep(600)
        return -1 if BEHAVIOUR == "refused" else 0
"""


@pytest.fixture
def image_python(tmp_path: Path) -> Path:
    (tmp_path / "torch.py").write_text(TORCH)
    (tmp_path / "mooncake").mkdir()
    (tmp_path / "mooncake" / "__init__.py").write_text("")
    (tmp_path / "mooncake" / "engine.py").write_text(MOONCAKE_ENGINE)
    return tmp_path


def probe(path: Path, behaviour: str, *extra: str, dmabuf: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(path), "FAKE_REGISTRATION": behaviour}
    env.pop("MOONCAKE_DISABLE_HIP_DMABUF", None)
    if not dmabuf:
        env["MOONCAKE_DISABLE_HIP_DMABUF"] = "1"
    return subprocess.run(
        [sys.executable, str(SYNC), "rdma-register", "--host", "10.0.0.5", "--devices", "ionic_0,ionic_1",
         "--python", sys.executable, *extra],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_registration_that_works_passes_and_says_how(image_python):
    done = probe(image_python, "ok", dmabuf=False)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout
        == "rdma registration (ibv-reg-mr): registered 64 MiB of GPU memory over ionic_0,ionic_1\n"
    )


def test_a_refused_registration_names_the_other_way(image_python):
    done = probe(image_python, "refused", dmabuf=False)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "Mooncake cannot register GPU memory: batch_register_memory of 64 MiB of GPU memory returned -1 "
        "(ibv-reg-mr registration); if the other way works on this site, set the runner's "
        "mooncake-registration: dmabuf (configs/launch.yaml)"
    )


def test_a_crash_in_the_dmabuf_path_is_a_named_failure_not_a_dead_node(image_python):
    done = probe(image_python, "crash")
    assert done.returncode == 1
    assert "the probe crashed with SIGSEGV registering with dmabuf" in done.stderr
    assert "mooncake-registration: ibv-reg-mr" in done.stderr


def test_no_rdma_device_is_said(image_python):
    done = probe(image_python, "no-device")
    assert done.returncode == 1
    assert "TransferEngine.initialize(rdma, ionic_0,ionic_1) returned -1 (dmabuf registration)" in done.stderr


def test_a_hang_is_bounded(image_python):
    done = probe(image_python, "hang", "--timeout", "2")
    assert done.returncode == 1
    assert "the probe (dmabuf registration) did not finish in 2 s" in done.stderr
