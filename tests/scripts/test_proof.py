"""scripts/proof.py: answers alone prove nothing; the KV must have moved and LMCache must have served."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS

PROOF = SCRIPTS / "proof.py"
sys.path.insert(0, str(SCRIPTS))
from proof import metric_sum  # noqa: E402 (scripts/ is not a package: it runs on the nodes)

SNAPSHOT = """\
# HELP vllm:prompt_tokens_by_source_total Prompt tokens by source.
vllm:prompt_tokens_by_source_total{model_name="m",engine="0",source="local_compute"} 10.0
vllm:prompt_tokens_by_source_total{model_name="m",engine="0",source="external_kv_transfer"} 608.0
vllm:external_prefix_cache_hits_total{model_name="m",engine="0"} 512.0
"""


def test_metric_sum_reads_only_the_labelled_samples():
    assert metric_sum(SNAPSHOT, "vllm:prompt_tokens_by_source_total", 'source="external_kv_transfer"') == 608
    assert metric_sum(SNAPSHOT, "vllm:external_prefix_cache_hits_total", "") == 512
    assert metric_sum(SNAPSHOT, "vllm:nothing", "") is None


def l2(tmp_path: Path, **snapshots: str) -> subprocess.CompletedProcess:
    for name, text in snapshots.items():
        (tmp_path / f"{name}.prom").write_text(text)
    return subprocess.run(
        [sys.executable, str(PROOF), "l2", "--metrics-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_l2_proof_passes_when_any_prefill_node_served_hits(tmp_path):
    done = l2(tmp_path, prefill0=SNAPSHOT, prefill1="", decode0=SNAPSHOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LMCache hits: prefill0 512 tokens, prefill1 0 tokens"


@pytest.mark.parametrize("snapshots", [{"prefill0": "", "prefill1": ""}, {"decode0": SNAPSHOT}])
def test_l2_proof_fails_without_hits_or_snapshots(tmp_path, snapshots):
    done = l2(tmp_path, **snapshots)
    assert done.returncode == 11
    assert "proof failed" in done.stderr
