"""scripts/accuracy.py with the real lm-evaluation-harness (.venv-eval, the pinned one nodes install) against
the golden prefill and decode (simulated engines, processes) behind the real proxy, as the rendered job runs
them: lm-eval's own GSM8K task, offline, on the local runners' made-up question set, through the router. The
simulator adds the sums right, so the pipeline scores them (1.0, passing the seed model's 0.90); with every
engine answering them wrongly the same way (SIM_FAULT wrong-answers: the KV path carries the wrong answers
faithfully, so the same-answers check passes) the eval scores 0.0 and fails the job as a quality failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import accuracy
from tests.paths import ROOT

from .test_same_answers import MODEL, _pd, _proof

LM_EVAL = ROOT / ".venv-eval" / "bin" / "lm-eval"
pytestmark = pytest.mark.tools


def _eval(tmp_path: Path, router: str, threshold: str = "0.9") -> tuple[subprocess.CompletedProcess, dict]:
    if not LM_EVAL.exists():
        pytest.fail(f"missing {LM_EVAL} (make tools)")
    questions, out = tmp_path / "questions", tmp_path / "out"
    accuracy.write_made_up_set(questions)
    env = {**os.environ, "PATH": f"{LM_EVAL.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/accuracy.py"), "--url", f"{router}/v1/chat/completions",
         "--model", MODEL, "--eval", "gsm8k", "--questions", str(questions), "--threshold", threshold,
         "--concurrency", "4", "--limit", "8", "--max-tokens", "24", "--seconds", "240", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    found = out / "accuracy.json"
    return done, json.loads(found.read_text()) if found.is_file() else {}


def test_gsm8k_through_the_pd_path_scores_the_answers(launcher, fake_lmcache, tmp_path):
    _, router = _pd(launcher, fake_lmcache)
    done, got = _eval(tmp_path, router)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "gsm8k scored 1.0000 on 8 questions through the router (threshold 0.9000)" in done.stdout
    assert (got["passed"], got["samples"], got["lm_eval_version"]) == (True, 8, "0.4.13")
    samples = list((tmp_path / "out").rglob("samples_*.jsonl"))
    assert samples, "lm-eval kept no samples"


def test_answers_wrong_on_every_engine_pass_the_kv_check_and_fail_the_eval(launcher, fake_lmcache, tmp_path):
    direct, router = _pd(launcher, fake_lmcache, SIM_FAULT="wrong-answers")
    assert _proof(direct, router).returncode == 0  # the KV path carries the wrong answers faithfully
    done, got = _eval(tmp_path, router)
    assert done.returncode == 18, done.stdout[-2000:] + done.stderr[-2000:]
    assert "accuracy below the model's threshold: gsm8k scored 0.0000 on 8 questions" in done.stderr
    assert (got["passed"], got["score"], got["samples"]) == (False, 0.0, 8)
