#!/usr/bin/env python3
"""The model's graded eval through the router, judged against its threshold; stdlib only.

GSM8K (`--eval gsm8k`): lm-evaluation-harness's own gsm8k task (its prompt, 5 few-shot examples, greedy
answers, its strict-match score of the `#### <number>` line) run by the `lm-eval` on PATH (the run's node
setup installs the pinned one) against the router's chat completions, so through the disaggregated path.
Its questions are the run's staged set (--questions: train.jsonl, the few-shot examples; test.jsonl, the
questions asked), read offline: lm-eval's task is included as it ships, only its dataset is pointed at the
staged files. Every request carries one cache_salt, so nothing the eval leaves in a prefix cache or LMCache
can serve a later request of another kind.

Exit 0: the score reached the threshold; EXIT_BELOW_THRESHOLD: a quality failure (the answers are wrong);
EXIT_PROOF: no score (lm-eval failed, asked nothing, or outlasted --seconds): an infrastructure failure, no
verdict on the answers. Either way <out>/accuracy.json says what was measured, and lm-eval's own results and
samples stay beside it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import safejson
from failures import EXIT_BELOW_THRESHOLD, EXIT_PROOF, line, one_line
from nodeargs import http_url

TASK = "gsm8k_staged"  # the run's task: lm-eval's gsm8k with the staged questions
METRIC, OTHER_METRIC = "exact_match,strict-match", "exact_match,flexible-extract"  # lm-eval's result keys
SPLITS = ("train", "test")
# Where pip and uv put a console script's interpreter: its #! line, or for a path too long for one, the
# exec line of the /bin/sh trampoline they write instead.
_TRAMPOLINE = re.compile(r"""^'''exec' ['"]?([^'"]+?)['"]? "\$0" "\$@"$""")
# lm-eval's --model_args is KEY=VALUE,... with no quoting: a served name is refused if it could split it
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,255}")
MAX_RESULTS_BYTES = 64 << 20
KILL_GRACE_S = 10


class EvalError(Exception):
    """No score: what was missing, one line."""


class BelowThreshold(Exception):
    """A score below the threshold: the answers are wrong."""


def client_python(command: str) -> str:
    """The interpreter the client's console script runs (its lm_eval package is that interpreter's)."""
    path = shutil.which(command)
    if path is None:
        raise EvalError(f"{command} is not on PATH (the run's node setup installs it on rank 0)")
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8", "replace").splitlines()
    if head and head[0].startswith("#!") and "/bin/sh" not in head[0]:
        return head[0][2:].strip().split()[0]
    found = _TRAMPOLINE.match(head[1]) if len(head) > 1 else None
    if found is None:
        raise EvalError(f"{path}: not a console script whose interpreter can be read (#! or sh exec line)")
    return found.group(1)


def task_file(python: str, questions: str, folder: str) -> str:
    """The run's task: lm-eval's own gsm8k.yaml included as it ships, the staged files as its dataset."""
    code = "import os, lm_eval.tasks as t; print(os.path.join(os.path.dirname(t.__file__), 'gsm8k', "
    code += "'gsm8k.yaml'))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EvalError(f"{python}: cannot ask it for lm-eval's gsm8k task ({one_line(err)})") from None
    shipped = done.stdout.strip()
    if done.returncode != 0 or not os.path.isfile(shipped):
        raise EvalError(f"lm-eval's gsm8k task not found by {python}: {one_line(done.stderr or shipped)}")
    files = {}
    for split in SPLITS:
        path = os.path.join(os.path.abspath(questions), f"{split}.jsonl")
        if not os.path.isfile(path):
            raise EvalError(f"{path}: the staged {split} questions are missing")
        files[split] = path
    os.makedirs(folder, exist_ok=True)
    task: dict = {
        "include": shipped,
        "task": TASK,
        "tag": [],
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": files},
    }
    path = os.path.join(folder, f"{TASK}.yaml")
    with open(path, "w") as f:
        json.dump(task, f, indent=2, sort_keys=True)  # JSON is YAML: the loader reads it as written
    return path


def run_eval(args: argparse.Namespace, python: str, tasks: str) -> None:
    """lm-eval, bounded by --seconds; its own lines go to this step's log."""
    model_args = ",".join(
        f"{k}={v}"
        for k, v in (
            ("model", args.model),
            ("base_url", args.url),
            ("num_concurrent", args.concurrency),
            ("max_retries", 3),
            ("timeout", args.seconds),
            ("tokenized_requests", False),
        )
    )
    salt = "accuracy-" + os.urandom(8).hex()
    cmd = [python, "-m", "lm_eval", "run", "--model", "local-chat-completions", "--apply_chat_template"]
    cmd += ["--tasks", TASK, "--include_path", tasks, "--model_args", model_args]
    cmd += ["--gen_kwargs", f"max_tokens={args.max_tokens},temperature=0,cache_salt={salt}"]
    cmd += ["--output_path", args.out, "--log_samples", "--seed", "0"]
    cmd += ["--limit", str(args.limit)] if args.limit else []
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.update(
        HF_HOME=os.path.join(args.out, "hf"), HF_DATASETS_CACHE=os.path.join(args.out, "hf", "datasets")
    )
    env.update(OPENAI_API_KEY="EMPTY", PYTHONUNBUFFERED="1")  # lm-eval's API models ask for a key
    print(f"accuracy: lm-eval gsm8k at concurrency {args.concurrency} through {args.url}", flush=True)
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        code = proc.wait(timeout=args.seconds)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise EvalError(f"lm-eval did not finish in {args.seconds} s (the eval's bound)") from None
    except BaseException:
        _stop(proc)  # TERM from the job: lm-eval and its workers go with this step
        raise
    if code != 0:
        raise EvalError(f"lm-eval exited {code} (its lines above say why)")


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def score(out: str) -> dict:
    """lm-eval's results file in OUT: the task's scores and how many questions it asked."""
    found = sorted(glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True))
    if not found:
        raise EvalError(f"lm-eval wrote no results_*.json under {out}")
    try:
        results = safejson.loads(safejson.read_regular(found[-1], MAX_RESULTS_BYTES))
    except (OSError, ValueError) as err:
        raise EvalError(f"{found[-1]}: {one_line(err)}") from None
    value, other = _at(results, "results", TASK, METRIC), _at(results, "results", TASK, OTHER_METRIC)
    samples = _at(results, "n-samples", TASK, "effective")
    if not _number(value):
        raise EvalError(f"{found[-1]}: no {METRIC} score for {TASK}")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise EvalError(f"{found[-1]}: lm-eval scored no question (n-samples {one_line(repr(samples), 80)})")
    version = _at(results, "lm_eval_version")
    return {
        "score": float(value),  # type: ignore[arg-type]
        "flexible_extract": float(other) if _number(other) else None,  # type: ignore[arg-type]
        "samples": samples,
        "results_file": os.path.relpath(found[-1], out),
        "lm_eval_version": version[:64] if isinstance(version, str) else "",
    }


def _at(doc: object, *keys: str) -> object:
    """DOC[k1][k2]... through mappings only; None where a step is missing or not a mapping."""
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def judge(args: argparse.Namespace) -> str:
    record = {
        "eval": args.eval,
        "metric": METRIC,
        "threshold": args.threshold,
        "concurrency": args.concurrency,
        "limit": args.limit,
    }
    started = time.monotonic()
    try:
        python = client_python(args.lm_eval)
        run_eval(
            args, python, os.path.dirname(task_file(python, args.questions, os.path.join(args.out, "task")))
        )
        record.update(score(args.out))
    except EvalError as err:
        _write(args.out, {**record, "passed": None, "error": one_line(err, 1000)})
        raise
    record.update(passed=record["score"] >= args.threshold, seconds=round(time.monotonic() - started, 1))
    _write(args.out, record)
    said = line(
        "accuracy-scored",
        eval=args.eval,
        score=f"{record['score']:.4f}",
        samples=record["samples"],
        threshold=f"{args.threshold:.4f}",
    )
    if not record["passed"]:
        raise BelowThreshold(said)
    return said


def _write(out: str, record: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "accuracy.json"), "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: a score between 0 and 1")
    return value


def _model(text: str) -> str:
    if not _MODEL_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: a served model name of letters, digits and ._/:-")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="accuracy.py", description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, type=http_url, help="the router's /v1/chat/completions URL")
    p.add_argument("--model", required=True, type=_model, help="served model name")
    p.add_argument("--eval", required=True, choices=["gsm8k"])
    p.add_argument("--questions", required=True, help="the staged set: a folder of train.jsonl, test.jsonl")
    p.add_argument("--threshold", required=True, type=_fraction, help="the lowest passing score")
    p.add_argument("--concurrency", type=int, default=1, choices=range(1, 4097), metavar="N")
    p.add_argument("--limit", type=int, default=0, choices=range(0, 1 << 20), metavar="N", help="0: all")
    p.add_argument("--max-tokens", type=int, default=2048, choices=range(1, 1 << 20), metavar="N")
    p.add_argument("--seconds", type=int, default=3600, choices=range(1, 86401), metavar="S")
    p.add_argument("--out", required=True, help="folder for accuracy.json and lm-eval's own files")
    p.add_argument("--lm-eval", default="lm-eval", help="the eval client's command")
    args = p.parse_args(argv)
    if "," in args.url:  # lm-eval's --model_args splits at commas
        p.error(f"--url {args.url!r}: a URL with a comma cannot be passed to lm-eval")
    try:
        print(judge(args), flush=True)
    except BelowThreshold as low:
        print(line("accuracy-below", scored=str(low)), file=sys.stderr)
        return EXIT_BELOW_THRESHOLD
    except EvalError as err:
        print(line("accuracy-unscored", reason=one_line(err, 1000)), file=sys.stderr)
        return EXIT_PROOF
    return 0


if __name__ == "__main__":
    sys.exit(main())
