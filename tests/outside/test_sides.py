"""A recorded launch as parity's InferenceX side (recipes/outside/sides.py), and `make parity RECORDED=`
holding our launch against what InferenceX's scripts ran: a value changed in InferenceX's launcher shows as a
new difference, which a transcription could never show."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.outside.sides import recorded_side

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = ROOT.parent / "shared" / "reference" / "inferencex" / "checkout-843c6254"
RECORDED = {
    "sbatch": {"options": {"--time": "08:00:00", "--gres": "gpu:8", "--signal": "TERM@30"}},
    "nodes": [
        {
            "container": {
                "argv": ["docker", "run", "--init", "--device=/dev/kfd", "--device", "/dev/dri", "-e", "X=1",
                         "--name", "n0", "-v", "/sys:/sys", "img:1", "bash", "-c", "server.sh"],
                "image": "img:1",
            },
            "services": [
                {"kind": "engine", "role": "prefill",
                 "argv": ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m",
                          "--tp-size", "4"],
                 "env": {"MORI_RDMA_TC": "104", "SLURM_JOB_ID": "1", "BENCH_INPUT_LEN": "8192",
                         "PATH": "/x"}},
                {"kind": "router",
                 "argv": ["python3", "-m", "sglang_router.launch_router", "--policy", "random"]},
                {"kind": "client", "argv": ["python3", "benchmark_serving.py", "--max-concurrency", "8",
                                            "--dataset-name", "random"]},
            ],
        },
        {"services": [{"kind": "engine", "role": "decode", "argv": ["python3", "-m", "sglang.launch_server",
                                                                    "--tp-size", "8"], "env": {}}]},
    ],
}  # fmt: skip


def test_each_category_comes_from_what_the_scripts_ran():
    side = recorded_side(RECORDED)
    assert side["engine-args"]["prefill"] == {"--model-path": "/models/m", "--tp-size": "4"}
    assert side["engine-args"]["decode"] == {"--tp-size": "8"}
    # what the engine's libraries read; not the scheduler's bookkeeping or the scripts' own variables
    assert side["engine-env"]["prefill"] == {"MORI_RDMA_TC": "104"}
    assert side["container"]["all"] == {
        "--init": True, "--device /dev/kfd": True, "--device /dev/dri": True, "-v /sys:/sys": True,
        "image": "img:1",
    }  # fmt: skip
    assert side["router"]["all"] == {"program": "sglang_router.launch_router", "--policy": "random"}
    assert side["client"]["all"] == {"--dataset-name": "random"}  # the concurrency is per point
    assert side["derived"]["all"] == {
        "time-limit": "08:00:00", "sbatch --gres": "gpu:8", "sbatch --signal": "TERM@30"
    }  # fmt: skip


def _checkout() -> Path:
    if CHECKOUT.is_dir():
        return CHECKOUT
    if os.environ.get("CI") == "true":
        raise FileNotFoundError(f"InferenceX checkout missing: {CHECKOUT}")
    pytest.skip(f"InferenceX checkout missing: {CHECKOUT} (the reference corpus is not in this clone)")


def parity(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipes.parity", "qwen3.5-fp8-mi355x-sglang-disagg", "--variant",
         "fsl8k1k_p1x4_d1x8", "--recorded", str(checkout)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_launcher_value_changed_in_inferencex_is_a_new_difference(tmp_path):
    """TIME_LIMIT is set by InferenceX's per-entry launcher (amd_utils only has a fallback): changed in a
    scratch copy of the checkout, parity against the recorded chain shows it."""
    checkout = _checkout()
    baseline = parity(checkout)
    assert baseline.returncode in (0, 1), baseline.stderr
    assert "derived     all     time-limit" not in baseline.stdout
    mutated = tmp_path / "checkout"
    shutil.copytree(checkout, mutated)
    launcher = mutated / "benchmarks" / "multi_node" / "qwen3.5_fp8_mi355x_sglang-disagg.sh"
    launcher.write_text(launcher.read_text().replace('TIME_LIMIT="08:00:00"', 'TIME_LIMIT="03:30:00"'))
    changed = parity(mutated)
    assert changed.returncode == 1, changed.stderr
    assert "derived     all     time-limit: ours '08:00:00', InferenceX '03:30:00'" in changed.stdout
