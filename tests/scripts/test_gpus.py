"""`sync.py gpu-drain`: the AMD GPU drain gate against a sysfs tree laid out as the amdgpu driver lays it out.

The idle numbers are a real MI300X node's (rocm-smi's "VRAM Total Memory (B): 206141652992" and "VRAM Total
Used Memory (B): 297771008" for every GPU, ROCm/legacy-rocm-build#4750), the figures the driver's
mem_info_vram_total and mem_info_vram_used files give in bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.launch import GpuDrain

SYNC = Path(__file__).resolve().parents[2] / "scripts" / "sync.py"
TOTAL, IDLE = 206141652992, 297771008


def card(sysfs: Path, n: int, used: int = IDLE, *, vendor: str = "0x1002", total: int | str = TOTAL) -> None:
    """/sys/class/drm/cardN -> its PCI device folder, as the kernel links it."""
    device = sysfs.parent / "devices" / f"0000:{0x05 + 0x10 * n:02x}:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"{vendor}\n")
    if vendor == "0x1002":
        (device / "mem_info_vram_total").write_text(f"{total}\n")
        (device / "mem_info_vram_used").write_text(f"{used}\n")
    (sysfs / f"card{n}").mkdir()
    (sysfs / f"card{n}" / "device").symlink_to(device)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "class" / "drm"
    root.mkdir(parents=True)
    (root / "renderD128").mkdir()  # render nodes are no cards
    return root


MAX = ("--max-used", str(GpuDrain().max_vram_used))  # the rendered line always gives the runner's


def drain(sysfs: Path, *extra: str) -> subprocess.CompletedProcess:
    nothing = sysfs.parent.parent / "no-device"  # no process holds it
    return subprocess.run(
        [sys.executable, str(SYNC), "gpu-drain", "--sysfs", str(sysfs), "--device", str(nothing),
         *MAX, *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_eight_idle_gpus_pass_and_say_so(sysfs):
    for n in range(8):
        card(sysfs, n)
    card(sysfs, 8, vendor="0x1a03")  # the board's own display adapter: not a GPU of the job
    done = drain(sysfs)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "GPUs drained: 8 AMD GPUs, at most 0.1 % of VRAM in use (limit 10 %), no process holds a GPU device\n"
    )


def test_a_gpu_an_earlier_job_still_holds_is_named_with_its_bus_and_memory(sysfs):
    for n in range(8):
        card(sysfs, n, used=int(0.59 * TOTAL) if n == 3 else IDLE)
    done = drain(sysfs)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "GPUs not drained: card3 (0000:35:00.0): 113.3 GiB of 192.0 GiB VRAM in use (59 %)"
    )


def test_the_limit_is_the_runner_s(sysfs):
    card(sysfs, 0, used=int(0.05 * TOTAL))
    assert drain(sysfs).returncode == 0
    assert drain(sysfs, "--max-used", "0.02").returncode == 1


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("none", "no AMD GPU under"),
        ("garbage", "card0: VRAM total 'N/A', used '297771008' are not byte counts"),
    ],
)
def test_what_cannot_be_read_fails_by_name(sysfs, setup, message):
    if setup == "garbage":
        card(sysfs, 0, total="N/A")
    done = drain(sysfs)
    assert done.returncode == 1 and message in done.stderr


def test_a_process_holding_a_gpu_device_is_named(sysfs, tmp_path):
    card(sysfs, 0)
    device = tmp_path / "kfd"
    device.write_text("")
    holder = subprocess.Popen(
        [sys.executable, "-c", f"f = open({str(device)!r}); print('open', flush=True); input()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "open\n"  # it holds the file now
        done = subprocess.run(
            [sys.executable, str(SYNC), "gpu-drain", "--sysfs", str(sysfs), "--device", str(device), *MAX],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        holder.communicate("\n", timeout=30)
    assert done.returncode == 1
    assert f"pid {holder.pid} (python" in done.stderr and f"holds {device}" in done.stderr


def test_the_node_s_facts_are_written_for_the_run_s_provenance(sysfs, tmp_path):
    card(sysfs, 0)
    (tmp_path / "amdgpu-version").write_text("6.18.3\n")  # amd-smi's DRIVER VERSION on an MI350X node
    (tmp_path / "rdma" / "rdma0").mkdir(parents=True)
    (tmp_path / "rdma" / "rdma0" / "fw_ver").write_text("1.117.5-a-45\n")
    facts = tmp_path / "facts.json"
    done = drain(
        sysfs, "--facts-out", str(facts), "--driver-version", str(tmp_path / "amdgpu-version"),
        "--rocm-version", str(tmp_path / "absent"), "--rdma", str(tmp_path / "rdma"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(facts.read_text())
    assert doc["amdgpu_driver"] == "6.18.3" and doc["rocm"] is None
    assert doc["rdma_firmware"] == {"rdma0": "1.117.5-a-45"}
    assert doc["gpus"] == [{"card": "card0", "bus": "0000:05:00.0", "total": TOTAL, "used": IDLE}]
    assert os.stat(facts).st_size < 4096


def test_a_gpu_that_drains_while_the_node_waits_passes(sysfs):
    """An earlier job's VRAM still being released when this one starts: waited for (InferenceX waits up to 15
    minutes), each re-check said, and the node goes on once it is free."""
    for n in range(2):
        card(sysfs, n, used=int(0.5 * TOTAL) if n == 1 else IDLE)
    used = sysfs / "card1" / "device" / "mem_info_vram_used"
    nothing = sysfs.parent.parent / "no-device"
    proc = subprocess.Popen(
        [sys.executable, str(SYNC), "gpu-drain", "--sysfs", str(sysfs), "--device", str(nothing), *MAX,
         "--wait", "120", "--interval", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the node says it waits before the memory is released
    assert first.startswith("gpu-drain: not drained yet, re-checking for up to "), first
    assert "card1 (0000:15:00.0): 96.0 GiB of 192.0 GiB VRAM in use (50 %)" in first
    used.write_text(f"{IDLE}\n")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.startswith("GPUs drained: 2 AMD GPUs")


def test_a_gpu_still_held_when_the_wait_ends_fails_saying_how_long_it_waited(sysfs):
    card(sysfs, 0, used=int(0.5 * TOTAL))
    done = drain(sysfs, "--wait", "1", "--interval", "0.2")
    assert done.returncode == 1
    assert done.stderr.count("gpu-drain: not drained yet") >= 2
    assert done.stderr.strip().splitlines()[-1].endswith("(50 %) after waiting 1 s")


def test_the_wait_is_the_runner_s_and_rendered():
    """MI355X's default: 15 minutes, the rendered preflight line carries it."""
    assert GpuDrain().wait == 900
