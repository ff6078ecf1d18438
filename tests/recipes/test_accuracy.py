"""The graded eval of a launch (recipes/accuracy.py): which jobs run it (InferenceX's selection), at what
threshold (configs/models.yaml), with what answer budget, its question set staged and hashed at submission,
its bound in the job's budget, and its outcome in summary.json and the report."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from recipes import accuracy, budget, report, staging
from recipes.build import timeouts_of
from recipes.plan import Staged
from recipes.render import render_config
from schemas.launch import LaunchProfile
from scripts import inputs
from sim.tokens import known_answer, words

SEED = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"
XPYD = "kimik2.5-fp4-mi355x-vllm-disagg"
LOCAL = "local-sim-vllm-disagg-agentic"


def test_an_agentic_config_runs_one_eval_per_point_at_its_highest_concurrency(rendered):
    """InferenceX runs an agentic deployment's GSM8K at its highest concurrency: of the seed's three
    allocations (conc 8, 16, 32) only conc 32 runs it, at concurrency 32, through the router."""
    by_variant = {v: r.plan for (k, v), r in rendered.items() if k == SEED}
    assert {v: p.accuracy is not None for v, p in by_variant.items()} == {
        "agentic_p1x8_d1x8_conc8": False,
        "agentic_p1x8_d1x8_conc16": False,
        "agentic_p1x8_d1x8_conc32": True,
    }
    a = by_variant["agentic_p1x8_d1x8_conc32"].accuracy
    assert (a.eval, a.threshold, a.concurrency, a.limit, a.eval_set) == ("gsm8k", 0.9, 32, None, "published")
    script = rendered[SEED, "agentic_p1x8_d1x8_conc32"].files["server_vllm.sh"]
    step = script[script.index('step "accuracy"') :]
    assert script.index('step "LMCache proof"') < script.index('step "accuracy"')  # after the sweep
    assert '--url http://"${NODE_ADDR}":30000/v1/chat/completions' in step  # the router: the PD path
    assert "--threshold 0.9000" in step and "--concurrency 32" in step and "--limit" not in step
    assert "lm-eval" in rendered[SEED, "agentic_p1x8_d1x8_conc32"].plan.leader_commands[-1]


def test_a_fixed_seq_point_runs_its_eval_at_its_highest_concurrency(rendered):
    plans = [r.plan for (k, _), r in rendered.items() if k == XPYD]
    assert plans and all(p.accuracy is not None for p in plans)
    for p in plans:
        assert p.accuracy.concurrency == max(b.concurrency for b in p.benchmarks)


def test_every_mi355x_config_of_ours_renders_an_eval_with_the_models_threshold(rendered, configs):
    mi355x = {k for (k, _) in rendered if configs.entries[k].runner.startswith("cluster:mi355x")}
    assert mi355x >= {SEED, XPYD}
    for key in mi355x:
        plans = [r.plan for (k, _), r in rendered.items() if k == key]
        wanted = configs.targets(key)[0].model.accuracy.threshold
        assert [p.accuracy.threshold for p in plans if p.accuracy] and all(
            p.accuracy.threshold == wanted for p in plans if p.accuracy
        ), key


def test_a_runner_that_turns_it_off_runs_none_and_installs_no_client(rendered):
    plans = [r.plan for (k, _), r in rendered.items() if k == "local-container-vllm-disagg-agentic"]
    assert plans and all(p.accuracy is None for p in plans)
    for p in plans:
        assert "eval" not in {s.name for s in p.node_setup.sets}
        assert not any(s.kind == "eval-set" for s in p.staged)


def test_only_a_job_that_runs_the_eval_installs_its_client_and_stages_its_questions(rendered):
    for (key, _), r in rendered.items():
        runs = r.plan.accuracy is not None
        assert any(s.kind == "eval-set" for s in r.plan.staged) == runs, key
        if r.plan.node_setup is not None:
            assert ("eval" in {s.name for s in r.plan.node_setup.sets}) == runs, key


@pytest.mark.parametrize(
    ("context", "budget_tokens"), [(262144, 16384), (10240, 6144), (6000, 1904), (4096, 2048)]
)
def test_the_answer_budget_is_inferencexs_from_the_context(configs, context, budget_tokens):
    """Its context less 4096, or half a context of 4096 or less; at most 16384 (local runners set theirs)."""
    t = configs.targets(SEED)[-1]
    run = t.launch.benchmark.accuracy.model_copy(update={"max_tokens": None})
    bench = t.launch.benchmark.model_copy(update={"accuracy": run})
    t = dataclasses.replace(t, launch=t.launch.model_copy(update={"benchmark": bench}))
    settings = {
        role: (given, {**full, "MAX_MODEL_LEN": context}) for role, (given, full) in t._settings.items()
    }
    t.__dict__["_settings"] = settings
    assert accuracy.max_tokens(t) == budget_tokens


def test_the_eval_is_in_the_jobs_worst_case(configs):
    t = configs.targets(SEED)[-1]
    items = {i.what: i for i in budget.worst_case(t, timeouts_of(t.launch), points=1, flushes=False)}
    assert items["accuracy eval"].seconds == t.launch.benchmark.accuracy.seconds == 3600
    first = configs.targets(SEED)[0]
    assert "accuracy eval" not in {
        i.what for i in budget.worst_case(first, timeouts_of(first.launch), points=1, flushes=False)
    }


def test_the_made_up_questions_are_sums_the_simulator_answers_in_gsm8ks_form(tmp_path):
    """The local runners' set: the simulator answers each of its questions with the set's own final answer
    (lm-eval's strict match: `#### <n>`), and one too high under SIM_FAULT wrong-answers."""
    rows = accuracy.write_made_up_set(tmp_path)
    assert rows == {"train": 8, "test": 64}
    test = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    assert len({r["question"] for r in test}) == len(test)
    for r in test:
        want = r["answer"].split("#### ")[-1]
        prompt = words(f"Question: What is 1 plus 1?\nAnswer: 2\n\nQuestion: {r['question']}\nAnswer:")
        said = " ".join(known_answer(prompt))
        assert re.search(r"#### (\-?[0-9\.\,]+)", said)[1] == want
        assert " ".join(known_answer(prompt, off_by=1)).split("#### ")[-1] == str(int(want) + 1)


def test_staging_writes_the_set_into_the_run_and_hashes_it(tmp_path):
    said: list[str] = []
    made_up = Staged("eval-set", "eval-set", accuracy.EVAL_SET, "made-up")
    entry = staging.stage_eval_set(made_up, tmp_path, said.append)
    assert entry["kind"] == "eval-set" and entry["rows"] == {"train": 8, "test": 64}
    assert inputs.verify(entry, tmp_path).endswith("as staged")  # what rank 0 checks at preflight
    (tmp_path / accuracy.EVAL_SET / "test.jsonl").write_text("{}\n")
    with pytest.raises(inputs.InputError, match="test.jsonl changed since submission"):
        inputs.verify(entry, tmp_path)


def test_staging_the_published_set_without_its_client_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "EVAL_PYTHON", tmp_path / "absent" / "bin" / "python")
    published = Staged("eval-set", "eval-set", accuracy.EVAL_SET, accuracy.PUBLISHED_SET)
    with pytest.raises(staging.StagingError, match="run `make tools`"):
        staging.stage_eval_set(published, tmp_path, print)


def _run(tmp_path, rendered, record) -> dict:
    plan = rendered[LOCAL, "agentic_p2x8_d1x8_conc4"].plan
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "plan.json").write_text(json.dumps(dataclasses.asdict(plan)))
    results = tmp_path / "results"
    (results / "accuracy").mkdir(parents=True)
    bench = plan.benchmarks[0]
    (results / bench.result).write_text(json.dumps({"request_throughput": {"avg": 1.0}}))
    if record is not None:
        (results / "accuracy" / "accuracy.json").write_text(json.dumps(record))
    return report.summarize(tmp_path)


@pytest.mark.parametrize(
    ("record", "said"),
    [
        (
            {"score": 1.0, "samples": 8, "passed": True},
            "accuracy: gsm8k 1.0000 on 8 questions, threshold 0.90: passed",
        ),
        (
            {"score": 0.0, "samples": 8, "passed": False},
            "accuracy: gsm8k 0.0000 on 8 questions, threshold 0.90: BELOW",
        ),
        (
            {"passed": None, "error": "lm-eval exited 1"},
            "accuracy: gsm8k not scored, threshold 0.90: lm-eval exited 1",
        ),
        (
            {"score": "1.0", "samples": True, "passed": "yes"},
            "accuracy: gsm8k not scored",
        ),  # hostile: dropped
        (None, "no accuracy.json (the job ended before the eval)"),
    ],
)
def test_the_outcome_reaches_the_summary_and_the_report(tmp_path, rendered, record, said):
    summary = _run(tmp_path, rendered, record)
    acc = summary["accuracy"]
    assert (acc["eval"], acc["threshold"], acc["eval_set"]) == ("gsm8k", 0.9, "made-up")
    assert said in report.table(summary)
    assert "made-up questions: a pipeline check" in report.table(summary)


@pytest.mark.parametrize("change", [{"run": "off"}, {"eval-set": "made-up"}])
def test_a_runner_of_real_engines_cannot_skip_or_fake_the_eval(configs, change):
    """Off and a made-up set are for the local runners; real engines' answers are graded on the published
    set (the local runners' own settings validate: they are what this module's other tests render)."""
    data = configs.launch.profiles["cluster:mi355x-amds"].model_dump(by_alias=True, exclude_unset=True)
    data.setdefault("benchmark", {})["accuracy"] = change
    with pytest.raises(ValueError, match="a runner of real engines grades their answers"):
        LaunchProfile.model_validate(data)
    local = configs.launch.profiles["cluster:local-sim"].model_dump(by_alias=True, exclude_unset=True)
    local["benchmark"]["accuracy"] = change
    LaunchProfile.model_validate(local)


def test_a_soak_runs_no_graded_eval_and_installs_nothing_for_one(configs):
    """A soak watches the engines for hours instead of a sweep: no eval, no client, no question set."""
    for r in render_config(XPYD, configs, soak_seconds=3600):
        p = r.plan
        assert p.accuracy is None and ("lm-eval",) not in p.leader_commands, p.variant
        assert "eval" not in {s.name for s in p.node_setup.sets}, p.variant
        assert not any(s.kind == "eval-set" for s in p.staged), p.variant
