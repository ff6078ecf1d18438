"""The real SGLang parser judges the engine lines of InferenceX's newest MI355X SGLang+MoRI entries rendered
from their srt-slurm recipes (recipes/srt.py): `make check-engines` on each, as one judge() run."""

from __future__ import annotations

import dataclasses

import pytest

from recipes import render
from recipes.engines.judge import judge
from recipes.engines.lines import engine_lines
from tests.paths import reference_now
from tests.recipes.test_srt_points import SGLANG_MORI

from .conftest import need_tools

pytestmark = pytest.mark.tools


def test_every_sglang_mori_recipe_line_passes_the_real_parser(builds, tmp_path):
    tools = need_tools(builds)
    master = reference_now("configs/amd-master.yaml")
    lines = []
    for key in SGLANG_MORI:
        for r in render.render_config(key, render.load(key, [master])):
            lines += engine_lines(r.plan.to_json(), builds, tmp_path)
    assert len(lines) >= 2 * len(SGLANG_MORI)
    # the check can fail: the first line again with a flag this SGLang does not have
    bad = dataclasses.replace(
        lines[0], name="mutated", argv=(*lines[0].argv, "--moe-a2a-backend-typo", "mori")
    )
    verdicts = judge([*lines, bad], tools=tools, say=lambda text: None)
    refused = [v.line.name for v in verdicts if not v.ok]
    assert refused == ["mutated"], [f"{v.line.name}: {v.message}" for v in verdicts if not v.ok]
