"""Fixed-seq-len results say they are not comparable with InferenceX's: its fixed-seq-len client sends random
token ids at lengths drawn from [0.8, 1] of the target, which AIPerf cannot send. The plan carries the label,
summary.json and make report repeat it, and the recipe page states it; agentic results carry none (both run
AIPerf under the same scenario lock)."""

from __future__ import annotations

import json
from pathlib import Path

from recipes import report
from recipes.build import INFERENCEX_FIXED_SEQ_CLIENT, build_plan
from tests.recipes.test_report import run_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
FSL, AGENTIC = "kimik2.5-fp4-mi355x-vllm-disagg", "kimik2.5-fp4-mi355x-vllm-disagg-agentic"


def test_a_fixed_seq_len_plan_is_labelled_and_an_agentic_one_is_not(configs):
    fsl = build_plan(configs.targets(FSL)[0])
    agentic = build_plan(configs.targets(AGENTIC)[0])
    assert fsl.not_comparable_with_inferencex == INFERENCEX_FIXED_SEQ_CLIENT
    assert "random token ids" in fsl.not_comparable_with_inferencex
    assert agentic.not_comparable_with_inferencex is None


def test_summary_json_and_the_report_carry_the_label(run_dir):  # noqa: F811 - the fixture
    plan_file = run_dir / "recipe" / "plan.json"
    plan = json.loads(plan_file.read_text())
    assert report.summarize(run_dir)["comparable_with_inferencex"] is True  # an agentic golden plan
    plan["not_comparable_with_inferencex"] = INFERENCEX_FIXED_SEQ_CLIENT
    plan_file.write_text(json.dumps(plan))
    summary = report.summarize(run_dir)
    assert summary["comparable_with_inferencex"] is False
    assert summary["not_comparable_with_inferencex"] == INFERENCEX_FIXED_SEQ_CLIENT
    assert INFERENCEX_FIXED_SEQ_CLIENT in report.caveats(summary)


def test_the_recipe_page_of_a_fixed_seq_len_config_states_it():
    page = (ROOT / "docs" / "recipes" / f"{FSL}.md").read_text()
    assert "not comparable with InferenceX" in page and "comparable_with_inferencex: false" in page
    agentic = (ROOT / "docs" / "recipes" / f"{AGENTIC}.md").read_text()
    assert "not comparable with InferenceX" not in agentic
