"""srt-slurm recipes are read as srt-slurm reads them: every section of every InferenceX multi-node recipe,
merged by recipes/outside/srt_recipe.py, equals what `srtctl resolve-override` (srt-slurm c88ef731, in
.venv-srt-slurm) prints for it; and a made-up recipe that exercises each merge rule (lists replace, null
deletes, zip broadcast, the name rule) tells a wrong merge apart."""

from __future__ import annotations

import json
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


# srt-slurm's own flag writers (c88ef731: each engine backend's _config_to_cli_args), run in its venv on the
# args given on stdin (a JSON list); prints, per backend, each args' command-line words.
_SRT_CLI = """
import json, sys
from srtctl.backends import sglang, vllm
given = json.load(sys.stdin)
print(json.dumps({name: [m._config_to_cli_args(dict(a)) for a in given] for name, m in
                  (("sglang", sglang), ("vllm", vllm))}))
"""
# Each rule of the writer once: a true and a false switch, a null, a list, '_', numbers, a JSON value.
MADE_UP_ARGS = {
    "tp-size": 8,
    "mem_fraction_static": 0.82,
    "enable-dp-attention": True,
    "disable-radix-cache": False,
    "chunked-prefill-size": None,
    "cuda-graph-bs": [1, 2, 4],
    "kv-transfer-config": '{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}',
}


def _written_by_srtctl(args: list[dict]) -> dict[str, list[list[str]]]:
    python = _srtctl().parent / "python"
    done = subprocess.run(
        [str(python), "-c", _SRT_CLI],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _naive(args: dict) -> list[str]:
    """A wrong writer: every key as written, every value as text (false switches, nulls and lists too)."""
    return [w for key, value in sorted(args.items()) for w in (f"--{key}", str(value))]


def test_flags_are_written_as_srtctl_writes_them():
    """Every role's args of every section of InferenceX's bundles, and a made-up set with each rule, reach the
    engine line as srt-slurm's own SGLang and vLLM backends write them (render puts cli()'s words there)."""
    given = [MADE_UP_ARGS]
    for path in bundles():
        raw = srt_recipe.load(path)
        for section in srt_recipe.sections(raw):
            for role in srt_recipe.variant(raw, section).get("roles", {}).values():
                given.append(role.get("args") or {})
    theirs = _written_by_srtctl(given)
    ours = [srt_recipe.cli(args) for args in given]
    assert len(given) > 40 and theirs["sglang"] == ours and theirs["vllm"] == ours
    # the check can fail: a writer that writes every value as text is told apart on the same args
    assert _naive(MADE_UP_ARGS) != theirs["sglang"][0]
