"""The agentic benchmark client (AIPerf), which InferenceX's scripts run from a virtualenv they build at run
time, recorded with the argv and environment the scripts compose, and the installs that build it."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from recipes.outside import sandbox
from recipes.outside.chain import record
from tests.paths import INFERENCEX_REF

KIMI = (INFERENCEX_REF / "checkout-pr1924", "kimik2.5-fp4-mi355x-vllm-disagg-agentic")
DSV4 = (INFERENCEX_REF / "checkout-843c6254", "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp")
JOB = "benchmarks/multi_node/amd_utils/job.slurm"
TIMEOUT = 150.0
# PR #1924's job.slurm forwards none of the offload settings into the container, and the benchmark_lib.sh it
# sources exits before the client without them; 843c6254's job.slurm forwards them (these lines).
FORWARD = (
    "    -e IS_AGENTIC=\\$IS_AGENTIC\n",
    "    -e KV_OFFLOADING=\\${KV_OFFLOADING:-none}\n    -e KV_OFFLOAD_BACKEND=\\${KV_OFFLOAD_BACKEND:-}\n"
    "    -e TOTAL_CPU_DRAM_GB=\\${TOTAL_CPU_DRAM_GB:-}\n",
)


def needed(checkout: Path) -> Path:
    if (checkout / "runners").is_dir():
        return checkout
    message = f"InferenceX checkout missing: {checkout} (set INFERENCEX_REF to the folder that holds it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def run(name: str, tmp: Path) -> dict[str, Any]:
    checkout, key = DSV4 if name == "dsv4" else KIMI
    source = needed(checkout)
    if name == "kimi forwarded":
        source = tmp / "kimi-forwarded"
        shutil.copytree(checkout, source, ignore=shutil.ignore_patterns(".git"))
        job = source / JOB
        text = job.read_text()
        assert text.count(FORWARD[0]) == 1, f"{JOB}: expected one {FORWARD[0]!r}"
        job.write_text(text.replace(FORWARD[0], FORWARD[0] + FORWARD[1]))
    return record(source, key, scratch=tmp / name.replace(" ", "-"), timeout=TIMEOUT)


@pytest.fixture(scope="module")
def launches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    needed(KIMI[0])
    needed(DSV4[0])
    tmp = tmp_path_factory.mktemp("agentic")
    names = ["kimi", "kimi forwarded", "dsv4"]
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(names, pool.map(lambda n: run(n, tmp), names), strict=True))


def clients(launch: dict[str, Any]) -> list[dict[str, Any]]:
    assert launch["exit"] == 0, launch.get("error")
    return [s for n in launch["nodes"] for s in n["services"] if s["kind"] == "client"]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_pr1924_stops_before_the_client_and_says_why(launches: dict[str, Any]) -> None:
    launch = launches["kimi"]
    assert clients(launch) == []
    assert launch["no_client"]["log_errors"] == [
        "server_mia1-p01-g01.log: Error: KV_OFFLOADING must be set for agentic benchmarks"
    ]


def test_the_kimi_client_is_aiperf_as_the_scripts_compose_it(launches: dict[str, Any]) -> None:
    found = clients(launches["kimi forwarded"])
    assert [flag(c["argv"], "--concurrency") for c in found] == ["8", "16", "32"]  # the row's conc list
    client = found[0]
    argv = client["argv"]
    assert argv[:4] == ["aiperf", "profile", "--scenario", "inferencex-agentx-mvp"]
    assert flag(argv, "--benchmark-duration") == "3600"  # the row's duration
    assert flag(argv, "--public-dataset") == "semianalysis_cc_traces_weka_with_subagents_060826_256k"
    assert flag(argv, "--model") == "Kimi-K2.5-MXFP4" and flag(argv, "--tokenizer") == "amd/Kimi-K2.5-MXFP4"
    assert flag(argv, "--url") == "http://localhost:30000"
    assert "--max-context-length" not in argv  # benchmark_lib.sh unsets MAX_MODEL_LEN for agentic runs
    assert client["script"] == "benchmarks/benchmark_lib.sh"
    assert client["venv"] == "/tmp/inferencex-agentic-4242/venv"
    assert client["env"]["AIPERF_DATASET_CONFIGURATION_TIMEOUT"] == "1800"
    assert client["env"]["AIPERF_MODEL"] == "Kimi-K2.5-MXFP4"
    assert client["env"]["CONC"] == "8"


def test_the_clients_build_and_dataset_are_recorded(launches: dict[str, Any]) -> None:
    node = launches["kimi forwarded"]["nodes"][0]
    [venv] = [i for i in node["installs"] if i["into"] == "/tmp/inferencex-agentic-4242/venv"]
    assert venv["argv"][:3] == ["uv", "pip", "install"] and venv["script"] == "benchmarks/benchmark_lib.sh"
    packages = venv["packages"]
    # aiperf is installed editable from the utils/aiperf submodule: no version in the scripts, the
    # submodule's commit pins it (the reference checkouts hold no submodules).
    aiperf = {"editable": "/workspace/utils/aiperf", "present": False, "checkout_path": "utils/aiperf"}
    assert aiperf in packages
    assert {"spec": "datasets>=4.7.0"} in packages and {"spec": "huggingface_hub[cli]>=0.25.0"} in packages
    [download] = node["downloads"]
    assert download["argv"][-1] == "semianalysisai/cc-traces-weka-with-subagents-060826-256k"
    whats = [a["what"] for a in launches["kimi forwarded"]["adjustments"]]
    assert any(w.startswith("`uv venv PATH`") for w in whats)


def test_the_dsv4_client_runs_from_trace_replay(launches: dict[str, Any]) -> None:
    [client] = clients(launches["dsv4"])
    argv = client["argv"]
    assert flag(argv, "--concurrency") == "1" and flag(argv, "--benchmark-duration") == "3600"
    assert flag(argv, "--public-dataset") == "semianalysis_cc_traces_weka_062126"
    assert flag(argv, "--server-metrics") == "http://<node 0 address>:8000/metrics"
    assert "--max-context-length" not in argv
    assert not [r for r in launches["dsv4"]["refused"] if "inferencex-agentic" in str(r["argv"])]
    assert client["venv"].startswith("/tmp/inferencex-agentic-")


@pytest.mark.parametrize(
    ("line", "moved"),
    [
        ('X="${TMPDIR:-/tmp}/inferencex-agentic"', True),
        ("W=${INFMAX_CONTAINER_WORKSPACE:-/workspace}", True),
        ("cp a /tmp/b", True),
        ("cat $(pwd)/models.yaml", False),
        ("x=foo-/tmp", False),
        ("ls /tmpfoo", False),
    ],
)
def test_path_rules_cover_bash_defaults(line: str, moved: bool) -> None:
    assert bool(sandbox.ANY_RULE.search(line)) is moved


def test_a_node_s_container_is_its_engine_s_and_the_client_s_is_a_sidecar(launches: dict[str, Any]) -> None:
    """Node 0 of DSv4's agentic launch runs the engine's container and, after it, the client's: parity holds
    our container against the engine's (its image is the entry's), never the client's."""
    node = launches["dsv4"]["nodes"][0]
    engines = {s["container"] for s in node["services"] if s["kind"] == "engine"}
    assert node["container"]["name"] in engines
    assert node["container"]["image"] == launches["dsv4"]["row"]["image"]
    [client] = clients(launches["dsv4"])
    assert client["container"] in {c["name"] for c in node["sidecars"]}
