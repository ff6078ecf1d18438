"""InferenceX's own chain run under the recorder: the recorded launch holds the values the scripts set, and
follows a change made in any one of them (launcher, runner script, server script, matrix)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from recipes.outside import actions
from recipes.outside.chain import record
from tests.paths import INFERENCEX_REF

CHECKOUT = INFERENCEX_REF / "checkout-843c6254"
KEY = "qwen3.5-fp8-mi355x-sglang-disagg"
LAUNCHER = "benchmarks/multi_node/qwen3.5_fp8_mi355x_sglang-disagg.sh"
TIMEOUT = 150.0  # the chain takes seconds alone; a CI run on the same machine can slow every process


def checkout() -> Path:
    if (CHECKOUT / "runners").is_dir():
        return CHECKOUT
    message = f"InferenceX checkout missing: {CHECKOUT} (set INFERENCEX_REF to the folder that holds it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def edit(relative: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(copy: Path) -> None:
        path = copy / relative
        text = path.read_text()
        assert text.count(old) == 1, f"{relative}: expected one {old!r} to change"
        path.write_text(text.replace(old, new))

    return apply


MUTATIONS: dict[str, Callable[[Path], None]] = {
    "launcher": edit(LAUNCHER, 'export TIME_LIMIT="08:00:00"', 'export TIME_LIMIT="03:30:00"'),
    "runner": edit("runners/launch_mi355x-amds.sh", "export MORI_RDMA_TC=104", "export MORI_RDMA_TC=96"),
    "server": edit(
        "benchmarks/multi_node/amd_utils/server_sglang.sh",
        "--model-path $MODEL_DIR/$MODEL_NAME \\",  # node 0's prefill only
        "--model-path $MODEL_DIR/$MODEL_NAME --enable-mutation-probe \\",
    ),
    "matrix": edit(
        "configs/amd-master.yaml", "conc-list: [ 8, 16, 32, 64, 128 ]", "conc-list: [ 8, 16, 256 ]"
    ),
    "unknown command": edit(
        "benchmarks/multi_node/amd_utils/job.slurm",
        "USER_NAME=$(whoami)",
        "USER_NAME=$(whoami)\nnvidia-smi -L",
    ),
}


def run(name: str, tmp: Path) -> dict[str, Any]:
    source = checkout()
    if name != "baseline":
        copy = tmp / name / "inferencex"
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(".git"))
        MUTATIONS[name](copy)
        source = copy
    return record(source, KEY, scratch=tmp / name / "scratch", timeout=TIMEOUT)


@pytest.fixture(scope="module")
def launches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The unchanged chain and one run per mutation, side by side (each is a chain of subprocesses)."""
    checkout()
    tmp = tmp_path_factory.mktemp("outside")
    names = ["baseline", *MUTATIONS]
    with ThreadPoolExecutor(max_workers=3) as pool:  # a CI run may share the machine
        results = dict(zip(names, pool.map(lambda n: run(n, tmp), names), strict=True))
    return results


def engine(launch: dict[str, Any], role: str) -> dict[str, Any]:
    found = [s for n in launch["nodes"] for s in n["services"] if s["kind"] == "engine" and s["role"] == role]
    assert len(found) == 1, f"expected one {role} engine, found {len(found)}"
    return found[0]


def test_the_unchanged_chain_runs_to_its_end_with_nothing_unrecorded(launches: dict[str, Any]) -> None:
    launch = launches["baseline"]
    assert launch["exit"] == 0, launch.get("error")
    assert launch["unrecorded"] == []
    assert [n["name"] for n in launch["nodes"]] == ["mia1-p01-g01", "mia1-p01-g02"]


def test_the_recorded_launch_holds_the_values_the_scripts_set(launches: dict[str, Any]) -> None:
    launch = launches["baseline"]
    assert launch["sbatch"]["options"]["--time"] == "08:00:00"  # the per-entry launcher's TIME_LIMIT
    assert launch["sbatch"]["options"]["--gres"] == "gpu:8"  # job.slurm's own #SBATCH line
    assert launch["sbatch"]["env"]["MORI_RDMA_TC"] == "104"  # the runner script's export
    prefill, decode = engine(launch, "prefill"), engine(launch, "decode")
    assert prefill["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert {"--tp-size", "4", "--disaggregation-transfer-backend", "mori", "--disable-radix-cache"} <= set(
        prefill["argv"]
    )  # composed by server_sglang.sh from models.yaml and the row's prefill tp
    assert (
        "--prefill-round-robin-balance" in decode["argv"]
        and decode["argv"][decode["argv"].index("--tp-size") + 1] == "8"
    )
    assert prefill["env"]["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "8192"  # inline, from env.sh
    assert launch["nodes"][0]["container"]["image"] == launch["row"]["image"]
    assert launch["nodes"][0]["container"]["env"]["BENCH_MAX_CONCURRENCY"] == "8x16x32x64x128"


def test_mori_rdma_tc_reaches_the_engine_from_nicctl_not_from_the_runner(launches: dict[str, Any]) -> None:
    """job.slurm forwards no MORI_RDMA_TC into the container: env.sh derives it from nicctl (DSCP 26 x 4)."""
    assert launches["runner"]["sbatch"]["env"]["MORI_RDMA_TC"] == "96"
    assert "MORI_RDMA_TC" not in launches["runner"]["nodes"][0]["container"]["env"]
    assert engine(launches["runner"], "prefill")["env"]["MORI_RDMA_TC"] == "104"
    assert engine(launches["runner"], "prefill")["env"]["MORI_RDMA_SL"] == "3"


def test_a_launcher_value_reaches_sbatch(launches: dict[str, Any]) -> None:
    assert launches["launcher"]["sbatch"]["options"]["--time"] == "03:30:00"


def test_a_flag_added_in_server_sglang_reaches_the_engine(launches: dict[str, Any]) -> None:
    assert "--enable-mutation-probe" in engine(launches["server"], "prefill")["argv"]
    assert "--enable-mutation-probe" not in engine(launches["baseline"], "prefill")["argv"]


def test_a_matrix_setting_reaches_the_clients(launches: dict[str, Any]) -> None:
    def concurrencies(launch: dict[str, Any]) -> list[str]:
        clients = [s for n in launch["nodes"] for s in n["services"] if s["kind"] == "client"]
        return [c["argv"][c["argv"].index("--max-concurrency") + 1] for c in clients]

    assert launches["matrix"]["row"]["conc"] == [8, 16, 256]
    assert concurrencies(launches["matrix"]) == ["8", "16", "256"]
    assert concurrencies(launches["baseline"]) == ["8", "16", "32", "64", "128"]


def test_an_unknown_command_is_named_with_its_script_and_line(launches: dict[str, Any]) -> None:
    [unknown] = launches["unknown command"]["unrecorded"]
    assert unknown["argv"] == ["nvidia-smi", "-L"]
    assert unknown["script"] == "benchmarks/multi_node/amd_utils/job.slurm"
    assert unknown["line"] == 269


@pytest.mark.parametrize(
    ("expression", "context", "expected"),
    [
        ("matrix.config['recipe-fingerprint'] || ''", {"matrix": {"config": {}}}, ""),
        ("toJson(matrix.config.conc)", {"matrix": {"config": {"conc": [8, 16]}}}, "[\n  8,\n  16\n]"),
        ("join(fromJson(inputs.c), ' ')", {"inputs": {"c": "[1, 2]"}}, "1 2"),
        (
            "inputs.s == 'agentic-coding' && 'agentic/' || 'fixed_seq_len/'",
            {"inputs": {"s": "x"}},
            "fixed_seq_len/",
        ),
        ("inputs.a && '1' || '0'", {"inputs": {"a": True}}, "1"),
        ("matrix.config.conc[0]", {"matrix": {"config": {"conc": [4, 8]}}}, 4),
    ],
)
def test_workflow_expressions(expression: str, context: dict[str, Any], expected: Any) -> None:
    assert actions.evaluate(expression, context) == expected
