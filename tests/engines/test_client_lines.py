"""Every rendered benchmark-client line through AIPerf 0.13.0's own configuration resolution (.venv-bench),
as `make check-engines` runs it: its parser, its config conversion, its resolver chain with the scenario
lock, and the lock's outcome held to what the plan expects. A line the client would refuse after an hour of
bring-up on the cluster fails here, in the client's words; so does a plan whose expectation is wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from recipes.engines import clients
from recipes.engines.judge import DEFAULT_CACHE
from recipes.render import load, render_config
from tests.paths import reference

pytestmark = pytest.mark.tools  # needs a tool virtualenv (`make tools`): not run by make test-unit

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# InferenceX's agentic entries that render from its own master file (make render CONFIGS=): their client
# lines take the same resolution.
INFERENCEX_AGENTIC = ("dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp",)


def need_client() -> None:
    if not clients.CLIENT_PYTHON.is_file():
        message = ".venv-bench missing: run `make tools` (it holds the real AIPerf)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def judged(plans: list[dict], tmp_path: Path) -> list[clients.ClientVerdict]:
    lines = [line for plan in plans for line in clients.client_lines(plan, DEFAULT_CACHE / "stubs", tmp_path)]
    return clients.judge_clients(lines, DEFAULT_CACHE)


def test_every_rendered_client_line_passes_the_clients_own_resolution(plans, tmp_path):
    need_client()
    master = reference("amd-master.yaml")
    theirs = [
        json.loads(r.files["plan.json"])
        for key in INFERENCEX_AGENTIC
        for r in render_config(key, load(key, [master]))
    ]
    verdicts = judged([*plans.values(), *theirs], tmp_path)
    assert [clients.verdict_line(v) for v in verdicts if not v.ok] == []
    seed = [v for v in verdicts if v.line.name.startswith("kimik2.5-fp4-mi355x-vllm-disagg-agentic/")]
    assert len(seed) == 3 and all(v.scenario == {"name": "inferencex-agentx-mvp", "submission_valid": True,
                                                 "violations": []} for v in seed)  # fmt: skip
    local = [v for v in verdicts if v.line.name.startswith("local-sim-vllm-disagg-agentic/")]
    assert local and all(v.scenario["violations"] == ["--benchmark-duration"] for v in local)
    assert any(v.line.name.startswith(INFERENCEX_AGENTIC[0]) for v in verdicts)


def test_the_seeds_former_client_line_is_refused_by_the_scenario_lock(tmp_path):
    """The check can fail: the seed's line before it replayed a pinned corpus (a local weka_trace folder and a
    per-trajectory idle-gap cap) is refused at the client's resolution, naming both conflicts."""
    need_client()
    plan = json.loads((FIXTURES / "seed-client-refused.plan.json").read_text())
    verdicts = judged([plan], tmp_path)
    assert len(verdicts) == 3 and not any(v.ok for v in verdicts)
    for v in verdicts:
        assert v.stage == "resolution" and "ScenarioLockError" in v.message
        assert "cannot verify corpus identity for a local weka_trace directory" in v.message
        assert "--trace-idle-gap-cap-seconds" in v.message


def test_an_outcome_the_plan_does_not_expect_is_refused(plans, tmp_path):
    """The check can fail on the plan's side too: a local line (--unsafe-override, 10 s) held to a real
    runner's expectation, and a line whose public dataset is not the one the plan staged."""
    need_client()
    plan = json.loads(json.dumps(plans[("local-sim-vllm-disagg-agentic", "agentic_p2x8_d1x8_conc4")]))
    plan["client_scenario"].update(submission=True, allowed_violations=[])
    (v,) = judged([plan], tmp_path)
    assert not v.ok and v.stage == "scenario outcome"
    assert "submission_valid=false, the plan expects true" in v.message
    assert "violations the plan does not carry knowingly: --benchmark-duration" in v.message
    plan = json.loads(
        json.dumps(plans[("kimik2.5-fp4-mi355x-vllm-disagg-agentic", "agentic_p1x8_d1x8_conc8")])
    )
    plan["client_scenario"]["dataset"] = "semianalysis_cc_traces_weka_062126"
    (v,) = judged([plan], tmp_path)
    assert not v.ok and "does not read --public-dataset semianalysis_cc_traces_weka_062126" in v.message


def test_the_real_aiperf_refuses_what_a_typo_would_render(plans, tmp_path):
    """An unknown flag and a bad value are refused at the client's command line."""
    need_client()
    plan = json.loads(json.dumps(plans[("local-sim-sglang-disagg", "fsl1k64_p2x8_d1x8")]))
    words = plan["benchmarks"][0]["argv"]
    words[words.index("--streaming")] = "--streamming"
    plan["benchmarks"][1]["argv"][plan["benchmarks"][1]["argv"].index("--concurrency") + 1] = "many"
    first, second = judged([plan], tmp_path)
    assert (first.ok, first.stage, second.ok, second.stage) == (False, "command line", False, "command line")
    assert "--streamming" in first.message and "many" in second.message
