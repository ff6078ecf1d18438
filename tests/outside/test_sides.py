"""A recorded launch as parity's InferenceX side (recipes/outside/sides.py): each category from what the
scripts ran (tests/outside/test_parity_mutations.py holds `make parity` against changed scripts)."""

from __future__ import annotations

from recipes.outside.sides import recorded_side

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
        "image": "img:1", "installs at container start": "none",
    }  # fmt: skip
    assert side["router"]["all"] == {"program": "sglang_router.launch_router", "--policy": "random"}
    assert side["client"]["all"] == {  # the concurrency is per point
        "--dataset-name": "random",
        "build": "benchmark_serving.py (the checkout's) on the container image's python3",
    }
    assert side["derived"]["all"] == {
        "time-limit": "08:00:00", "sbatch --gres": "gpu:8", "sbatch --signal": "TERM@30"
    }  # fmt: skip


def test_the_client_s_build_and_the_workers_cache_flush_come_from_what_ran():
    node = RECORDED["nodes"][0]
    client = {
        "kind": "client",
        "argv": ["aiperf", "profile", "--concurrency", "8"],
        "venv": "/tmp/v",
        "env": {"AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID": "true", "SLURM_JOB_ID": "1"},
    }
    install = {
        "into": "/tmp/v",
        "packages": [
            {"editable": "/workspace/utils/aiperf", "checkout_path": "utils/aiperf", "present": False},
            {"requirements": "/workspace/utils/agentic-benchmark/requirements.txt", "present": False},
            {"spec": "datasets>=4.7.0"},
        ],
    }
    flush = {"argv": ["curl", "-sf", "-X", "POST", "http://<node 1 address>:8000/flush_cache"]}
    recorded = {
        **RECORDED,
        "nodes": [
            {**node, "services": [client], "installs": [install], "container_commands": [flush]},
            *RECORDED["nodes"][1:],
        ],
    }
    side = recorded_side(recorded)["client"]["all"]
    assert side["build"] == (
        "utils/aiperf editable (unpinned); -r utils/agentic-benchmark/requirements.txt; datasets>=4.7.0"
    )
    assert side["env AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID"] == "true"
    assert "env SLURM_JOB_ID" not in side
    assert side["--flush-caches-before-each"] == "POST /flush_cache on every worker"
    assert "--flush-caches-before-each" not in recorded_side(RECORDED)["client"]["all"]
