"""`make parity` against what InferenceX's own scripts run: one named change per place InferenceX sets a
value (its per-entry launcher, its runner script, its server script, its matrix generator), made in a scratch
copy of the checkout, is reported as a new unexplained difference. A transcription of InferenceX could never
show these; the recorded chain must."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.paths import INFERENCEX_REF, reference

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = INFERENCEX_REF / "checkout-843c6254"
KEY, VARIANT = "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp", "agentic_p1x8_d1x8_mtp_conc1"
LAUNCHER = "benchmarks/multi_node/agentic/dsv4_fp4_mi355x_sglang-disagg.sh"
# name -> (file, text, replacement, what parity must then print)
MUTATIONS = {
    "launcher HICACHE_RATIO": (
        LAUNCHER, 'export HICACHE_RATIO="${HICACHE_RATIO:-3}"', 'export HICACHE_RATIO="${HICACHE_RATIO:-4}"',
        "--hicache-ratio: ours '3.0', InferenceX '4'",
    ),
    "launcher TIME_LIMIT": (
        LAUNCHER, 'TIME_LIMIT="${TIME_LIMIT:-08:00:00}"', 'TIME_LIMIT="${TIME_LIMIT:-06:00:00}"',
        "time-limit: ours '08:00:00', InferenceX '06:00:00'",
    ),
    "runner-script SLURM_PARTITION": (
        "runners/launch_mi355x-amds.sh", 'SLURM_PARTITION="compute"', 'SLURM_PARTITION="gpu-long"',
        "sbatch --partition: ours 'compute', InferenceX 'gpu-long'",
    ),
    "server_sglang.sh engine flag": (
        "benchmarks/multi_node/amd_utils/server_sglang.sh", "--trust-remote-code \\",
        "--trust-remote-code --enable-mixed-chunk \\", "--enable-mixed-chunk: ours (absent), InferenceX true",
    ),
    "matrix agentic duration": (
        "utils/matrix_logic/validation.py", "DEFAULT_AGENTIC_DURATION_SECONDS = 3600",
        "DEFAULT_AGENTIC_DURATION_SECONDS = 1800", "--benchmark-duration: ours '3600', InferenceX '1800'",
    ),
}  # fmt: skip
# Runner-script exports that never reach an engine: job.slurm forwards neither MORI_RDMA_TC nor IBDEVICES
# into the container, where env.sh reads the class from the NICs (nicctl) and the devices from ibv_devinfo. A
# transcription would call them the launch's values; the recorded chain shows changing them has no effect.
NO_EFFECT = {
    "runner-script MORI_RDMA_TC": (
        "runners/launch_mi355x-amds.sh",
        "export MORI_RDMA_TC=104",
        "export MORI_RDMA_TC=96",
        "",
    ),
    "runner-script IBDEVICES": (
        "runners/launch_mi355x-amds.sh",
        'export IBDEVICES="rdma0,rdma1,rdma2,rdma3,rdma4,rdma5,rdma6,rdma7"',
        'export IBDEVICES="rdma0,rdma1"',
        "",
    ),
}


def _checkout() -> Path:
    reference("checkout-843c6254/benchmarks/multi_node/amd_utils/job.slurm")  # skips loudly; fails under CI
    return CHECKOUT


def make_parity(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "parity", f"CONFIG={KEY}", f"VARIANT={VARIANT}", f"INFERENCEX={checkout}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def mutated(source: Path, scratch: Path, name: str) -> Path:
    path, old, new, _ = (MUTATIONS | NO_EFFECT)[name]
    copy = scratch / name.replace(" ", "-")
    shutil.copytree(source, copy, symlinks=True)
    target = copy / path
    text = target.read_text()
    assert old in text, f"{path}: {old!r} is gone; the mutation needs a new anchor"
    target.write_text(text.replace(old, new))
    return copy


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    source = _checkout()
    scratch = tmp_path_factory.mktemp("mutated")
    checkouts = {"as it is": source} | {name: mutated(source, scratch, name) for name in MUTATIONS}
    checkouts |= {name: mutated(source, scratch, name) for name in NO_EFFECT}
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = pool.map(make_parity, checkouts.values())
        return dict(zip(checkouts, done, strict=True))


def test_the_checkout_as_it_is_has_no_unexplained_difference(runs):
    baseline = runs["as it is"]
    assert baseline.returncode == 0, baseline.stdout + baseline.stderr
    assert "unexplained" not in baseline.stdout.split("category", 1)[0]


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_change_in_inferencex_s_scripts_is_a_new_unexplained_difference(runs, name):
    run, expected = runs[name], MUTATIONS[name][3]
    # make reports the recipe's exit 1 (unexplained) as its own failure
    assert run.returncode != 0 and "parity] Error 1" in run.stderr, run.stdout + run.stderr
    unexplained = run.stdout.split("its reason and evidence, or remove it):", 1)[-1]
    assert expected in unexplained, run.stdout


@pytest.mark.parametrize("name", list(NO_EFFECT))
def test_a_runner_script_export_the_container_never_sees_changes_nothing(runs, name):
    run = runs[name]
    assert run.returncode == 0, run.stdout + run.stderr
    assert runs["as it is"].stdout == run.stdout


def test_a_checkout_that_is_not_one_is_said_with_what_to_point_at(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "recipes.parity", KEY, "--variant", VARIANT, "--inferencex", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2
    assert "neither an InferenceX checkout" in run.stderr and "843c6254" in run.stderr
