"""srt-slurm recipes are read as srt-slurm reads them: every section of every InferenceX multi-node recipe,
merged by recipes/outside/srt_recipe.py, equals what `srtctl resolve-override` (srt-slurm c88ef731, in
.venv-srt-slurm) prints for it; and a made-up recipe that exercises each merge rule (lists replace, null
deletes, zip broadcast, the name rule) tells a wrong merge apart."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from recipes.outside import srt_recipe
from tests.paths import ROOT, reference_now

pytestmark = pytest.mark.tools

SRTCTL = ROOT / ".venv-srt-slurm" / "bin" / "srtctl"
TREE = "benchmarks/multi_node/srt-slurm-recipes"


def _srtctl() -> Path:
    if SRTCTL.exists():
        return SRTCTL
    message = "missing .venv-srt-slurm (make tools builds it from SRT_SLURM_SRC, srt-slurm's source tree)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def resolved_by_srtctl(path: Path) -> dict[str, dict]:
    """suffix -> the merged recipe `srtctl resolve-override -f <file> --stdout` prints, for every section."""
    done = subprocess.run(
        [str(_srtctl()), "resolve-override", "-f", str(path), "--stdout"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(path.parent), "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    chunks = re.split(r"^# --- (\S+) ---$", done.stdout, flags=re.M)
    if len(chunks) == 1:  # one section: printed without a header
        return {"": yaml.safe_load(chunks[0])}
    return {suffix: yaml.safe_load(text) for suffix, text in zip(chunks[1::2], chunks[2::2], strict=True)}


def _suffix(selector: str) -> str:
    zipped = re.fullmatch(r"zip_override_([\w-]+)\[(\d+)\]", selector)
    return f"{zipped[1]}_{zipped[2]}" if zipped else selector.removeprefix("override_")


def bundles() -> list[Path]:
    tree = reference_now(TREE)
    return sorted(p for p in tree.rglob("*.yaml") if "base" in (yaml.safe_load(p.read_text()) or {}))


def test_every_bundle_of_inferencex_is_collected():
    names = {str(p.relative_to(reference_now(TREE))) for p in bundles()}
    assert {
        "dsr1/sglang/mi355x-fp4/8k1k/disagg-variants.yaml",
        "dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml",
        "dsv4/atom/mi355x-fp4/agentx/disagg-lmcache-dspark.yaml",
        "dsv4/sglang/mi355x-fp4/agentx/disagg-umbp-dspark.yaml",
    } <= names


@pytest.mark.parametrize("path", bundles(), ids=lambda p: "/".join(p.parts[-5:]))
def test_each_section_merges_as_srtctl_merges_it(path):
    theirs = resolved_by_srtctl(path)
    raw = srt_recipe.load(path)
    ours = {_suffix(s): srt_recipe.variant(raw, s) for s in srt_recipe.sections(raw)}
    assert set(ours) == set(theirs)
    for suffix, merged in ours.items():
        assert merged == theirs[suffix], suffix


# Each rule of srt-slurm's merge, once: a list replaced, a null deleting, a mapping merged, a named and an
# unnamed section, a zip group with a one-item list broadcast.
MADE_UP = """\
base:
  name: made-up
  roles:
    prefill:
      args: {tp-size: 8, cuda-graph-bs: [1, 2, 4], disable-radix-cache: true}
      env: {A: '1', B: '2'}
override_lists_and_nulls:
  roles:
    prefill:
      args: {cuda-graph-bs: [8], disable-radix-cache: null}
      env: {B: '3'}
override_named:
  name: given
  slurm: {time_limit: '01:00:00'}
zip_override_sweep:
  roles:
    prefill:
      args: {max-running-requests: [64, 128, 256], chunked-prefill-size: [16384]}
"""


def _appending(base: dict, override: dict) -> dict:
    """A wrong merge: lists appended, nulls kept."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _appending(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = out[key] + value
        else:
            out[key] = value
    return out


def test_each_merge_rule_against_srtctl(tmp_path, monkeypatch):
    path = tmp_path / "made-up.yaml"
    path.write_text(MADE_UP)
    theirs = resolved_by_srtctl(path)
    raw = srt_recipe.load(path)
    ours = {_suffix(s): srt_recipe.variant(raw, s) for s in srt_recipe.sections(raw)}
    assert ours == theirs
    assert set(theirs) == {"lists_and_nulls", "named", "sweep_0", "sweep_1", "sweep_2"}
    # the check can fail: a merge that appends lists and keeps nulls differs from srtctl's
    monkeypatch.setattr(srt_recipe, "merge", _appending)
    wrong = {_suffix(s): srt_recipe.variant(raw, s) for s in srt_recipe.sections(raw)}
    assert wrong["lists_and_nulls"] != theirs["lists_and_nulls"]


def test_pointer_forms_lead_to_the_same_file():
    checkout = srt_recipe.checkout_of(reference_now("configs/amd-master.yaml"))
    assert checkout is not None
    older = "recipes/dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml:override_stp_1p2d_tp8"
    newer = f"{TREE}/dsr1/sglang/mi355x-fp8/8k1k/disagg-variants.yaml:override_stp_1p2d_tp8"
    assert srt_recipe.resolve(older, checkout) == srt_recipe.resolve(newer, checkout)
