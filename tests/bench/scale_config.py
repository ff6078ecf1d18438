"""The configs of `make bench-scale`: one xPyD entry (N/2 prefill x N/2 decode nodes per N) written as data,
a master file in InferenceX's format, so the bench goes through the render/submit path users use."""

from __future__ import annotations

from pathlib import Path

import yaml

KEY = "local-sim-vllm-disagg-scale"
ISL, OSL = 1024, 64
CONCURRENCY = 2  # low on purpose: the bench measures the job around the engines, not serving
# The simulated engine's start (sim/settings.py SIM_LOAD_DELAY_S): short and known, so what the job adds
# on top stands out; passed in the job's environment (sbatch --export=ALL) as bench-failfast's faults are.
ENGINE_LOAD_S = 2.0


def shape(nodes: int) -> tuple[int, int]:
    """(prefill, decode) nodes of an N-node job: half and half, one tp8 engine per node."""
    if nodes < 2 or nodes % 2:
        raise ValueError(f"a scale job needs an even number of nodes >= 2, got {nodes}")
    return nodes // 2, nodes // 2


def _point(nodes: int) -> dict:
    prefill, decode = shape(nodes)
    worker = {"tp": 8, "ep": 1, "dp-attn": False, "additional-settings": ["MC_PROTOCOL=tcp"]}
    return {
        "spec-decoding": "none",
        "conc-list": [CONCURRENCY],
        "prefill": {"num-worker": prefill, **worker},
        "decode": {"num-worker": decode, **worker},
    }


def entry(node_counts: list[int]) -> dict:
    """The master-file entry: vLLM PD over the simulated Mooncake, no LMCache, behind our proxy."""
    return {
        KEY: {
            "image": "vllm/vllm-openai-rocm:v0.33.0",
            "model": "amd/Kimi-K2.5-MXFP4",
            "model-prefix": "kimik2.5",
            "runner": "cluster:local-sim-wide",
            "precision": "fp4",
            "framework": "vllm-disagg",
            "router": {"name": "pd-proxy", "version": "0.1.0"},
            "kv-p2p-transfer": "mooncake",
            "multinode": True,
            "disagg": True,
            "scenarios": {
                "fixed-seq-len": [
                    {"isl": ISL, "osl": OSL, "search-space": [_point(n) for n in node_counts]},
                ]
            },
        }
    }


def write_master(path: Path, node_counts: list[int]) -> Path:
    """The master file under out/bench/ (written each run: the node counts are the bench's arguments)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Written by `make bench-scale` (tests/bench/scale_config.py); regenerated on every run.\n"
    path.write_text(header + yaml.safe_dump(entry(node_counts), sort_keys=False))
    return path


def variant_of(nodes: int) -> str:
    """The variant name the renderer gives an N-node point (recipes/variants.py)."""
    prefill, decode = shape(nodes)
    return f"fsl{ISL // 1024}k{OSL}_p{prefill}x8_d{decode}x8"
