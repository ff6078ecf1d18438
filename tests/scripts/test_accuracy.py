"""scripts/accuracy.py against a stand-in lm-eval (a console script and an `lm_eval` package of this test's
making): what it asks lm-eval for, and how it judges what lm-eval leaves. Each verdict is seen failing on its
own defect: a score below the threshold (a quality failure, exit 18), and every way there is no score (lm-eval
failing, asking nothing, writing something else, outlasting its bound, missing) as an infrastructure failure
(exit 11). The real lm-eval runs against simulated engines in tests/sim/test_accuracy_eval.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import SCRIPTS

ACCURACY = SCRIPTS / "accuracy.py"
sys.path.insert(0, str(SCRIPTS))
import accuracy  # noqa: E402 (scripts/ is not a package: it runs on the nodes)

# The stand-in's behaviour, from FAKE_LM_EVAL: score=<x>, samples=<n>, exit=<code>, sleep=<s>, results=<json>
FAKE_MAIN = textwrap.dedent(
    """\
    import json, os, sys, time
    args = sys.argv[1:]
    def opt(name):
        return args[args.index(name) + 1] if name in args else None
    with open(os.environ["FAKE_ARGV"], "w") as f:
        json.dump(args, f)
    want = dict(kv.split("=", 1) for kv in os.environ.get("FAKE_LM_EVAL", "").split(";") if kv)
    time.sleep(float(want.get("sleep", 0)))
    if "exit" in want:
        sys.exit(int(want["exit"]))
    task = json.load(open(os.path.join(opt("--include_path"), "gsm8k_staged.yaml")))
    for path in task["dataset_kwargs"]["data_files"].values():
        open(path).close()
    out = os.path.join(opt("--output_path"), "served__name")
    os.makedirs(out, exist_ok=True)
    results = want.get("results") or json.dumps({
        "results": {"gsm8k_staged": {"exact_match,strict-match": float(want.get("score", 1)),
                                     "exact_match,flexible-extract": 0.25}},
        "n-samples": {"gsm8k_staged": {"original": 64, "effective": int(want.get("samples", 8))}},
        "lm_eval_version": "0.4.13",
    })
    open(os.path.join(out, "results_2026-12-02T00-00-00.json"), "w").write(results)
    """
)


@pytest.fixture
def fake(tmp_path: Path) -> dict:
    """A PATH with a stand-in lm-eval whose interpreter imports a stand-in lm_eval; the staged questions."""
    package = tmp_path / "site" / "lm_eval"
    (package / "tasks" / "gsm8k").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tasks" / "__init__.py").write_text("")
    (package / "tasks" / "gsm8k" / "gsm8k.yaml").write_text("task: gsm8k\n")
    (package / "__main__.py").write_text(FAKE_MAIN)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "lm-eval"
    script.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_module('lm_eval', run_name='__main__')\n")
    script.chmod(0o755)
    questions = tmp_path / "questions"
    questions.mkdir()
    for split in ("train", "test"):
        (questions / f"{split}.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(tmp_path / "site"),
        "FAKE_ARGV": str(tmp_path / "argv.json"),
    }
    return {"env": env, "questions": questions, "out": tmp_path / "out", "argv": tmp_path / "argv.json"}


def run(fake: dict, behaviour: str = "", *extra: str, threshold: str = "0.9") -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ACCURACY), "--url", "http://127.0.0.1:9/v1/chat/completions"]
    argv += ["--model", "served/name", "--eval", "gsm8k", "--questions", str(fake["questions"])]
    argv += ["--threshold", threshold, "--concurrency", "4", "--limit", "8", "--max-tokens", "48"]
    argv += ["--out", str(fake["out"]), *extra]
    env = {**fake["env"], "FAKE_LM_EVAL": behaviour}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


def record(fake: dict) -> dict:
    return json.loads((fake["out"] / "accuracy.json").read_text())


def test_a_score_at_the_threshold_passes_and_is_recorded(fake):
    done = run(fake, "score=0.9")
    assert done.returncode == 0, done.stderr
    assert "gsm8k scored 0.9000 on 8 questions through the router (threshold 0.9000)" in done.stdout
    got = record(fake)
    assert (got["passed"], got["score"], got["samples"], got["threshold"]) == (True, 0.9, 8, 0.9)
    assert got["flexible_extract"] == 0.25 and got["lm_eval_version"] == "0.4.13"


def test_a_score_below_the_threshold_is_a_quality_failure(fake):
    done = run(fake, "score=0.5")
    assert done.returncode == accuracy.EXIT_BELOW_THRESHOLD == 18, done.stderr
    assert "accuracy below the model's threshold: gsm8k scored 0.5000 on 8 questions" in done.stderr
    assert (record(fake)["passed"], record(fake)["score"]) == (False, 0.5)


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        ("exit=1", "lm-eval exited 1"),
        ("samples=0", "lm-eval scored no question"),
        ('results={"results": ["not", "a", "mapping"]}', "no exact_match,strict-match score"),
        ('results={"results": {"gsm8k_staged": {"exact_match,strict-match": "0.99"}}}', "no exact_match"),
        ("score=1.5", "no exact_match,strict-match score"),
        ("results=[1, 2", "results_2026-12-02T00-00-00.json"),
    ],
)
def test_no_score_is_an_infrastructure_failure_never_a_verdict(fake, behaviour, said):
    done = run(fake, behaviour)
    assert done.returncode == accuracy.EXIT_PROOF == 11, done.stderr
    assert "accuracy not scored: " in done.stderr and said in done.stderr
    got = record(fake)
    assert got["passed"] is None and said in got["error"]


def test_an_eval_past_its_bound_is_stopped_and_unscored(fake):
    done = run(fake, "sleep=30", "--seconds", "2")
    assert done.returncode == 11
    assert "lm-eval did not finish in 2 s" in done.stderr
    found = subprocess.run(["pgrep", "-f", str(fake["out"])], capture_output=True, text=True, check=False)
    assert found.stdout.strip() == "", "the stopped lm-eval is still running"


def test_missing_client_or_questions_are_named(fake):
    (fake["questions"] / "train.jsonl").unlink()
    done = run(fake)
    assert done.returncode == 11 and "the staged train questions are missing" in done.stderr
    done = run(fake, "", "--lm-eval", "no-such-lm-eval")
    assert done.returncode == 11 and "no-such-lm-eval is not on PATH" in done.stderr


def test_what_lm_eval_is_asked(fake):
    assert run(fake).returncode == 0
    argv = json.loads(fake["argv"].read_text())
    assert argv[:4] == ["run", "--model", "local-chat-completions", "--apply_chat_template"]
    model_args = dict(kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(","))
    assert model_args["base_url"] == "http://127.0.0.1:9/v1/chat/completions"
    assert (model_args["model"], model_args["num_concurrent"]) == ("served/name", "4")
    gen = dict(kv.split("=", 1) for kv in argv[argv.index("--gen_kwargs") + 1].split(","))
    assert (gen["max_tokens"], gen["temperature"]) == ("48", "0")
    assert gen["cache_salt"].startswith("accuracy-")  # nothing it leaves in a cache serves other requests
    assert argv[argv.index("--limit") + 1] == "8" and "--log_samples" in argv
    task = json.loads((Path(argv[argv.index("--include_path") + 1]) / "gsm8k_staged.yaml").read_text())
    assert task["include"].endswith(os.path.join("lm_eval", "tasks", "gsm8k", "gsm8k.yaml"))
    assert task["dataset_kwargs"]["data_files"] == {
        s: str(fake["questions"] / f"{s}.jsonl") for s in ("train", "test")
    }


def test_a_served_name_that_could_split_lm_evals_arguments_is_refused(fake):
    done = run(fake, "", "--model", "m,base_url=http://elsewhere")
    assert done.returncode == 2 and "a served model name" in done.stderr


def test_the_clients_interpreter_is_read_from_either_script_form(tmp_path):
    plain = tmp_path / "plain" / "lm-eval"
    plain.parent.mkdir()
    plain.write_text("#!/opt/env/bin/python\nimport sys\n")
    long = tmp_path / "long" / "lm-eval"
    long.parent.mkdir()
    long.write_text("#!/bin/sh\n'''exec' \"/a/very long/env/bin/python\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    for f in (plain, long):
        f.chmod(0o755)
    old = os.environ["PATH"]
    try:
        os.environ["PATH"] = str(plain.parent)
        assert accuracy.client_python("lm-eval") == "/opt/env/bin/python"
        os.environ["PATH"] = str(long.parent)
        assert accuracy.client_python("lm-eval") == "/a/very long/env/bin/python"
    finally:
        os.environ["PATH"] = old
