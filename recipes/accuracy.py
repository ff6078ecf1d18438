"""The graded eval of a launch: the model's eval (configs/models.yaml accuracy: GSM8K through a pinned
lm-evaluation-harness) sent through the router, so through the disaggregated path, scored against the model's
threshold (scripts/accuracy.py on rank 0). A score below it fails the job as a quality failure, told apart
from an eval that could not score (no samples, transport errors, its bound).

Which jobs run it is InferenceX's selection: one eval per deployment, at its highest concurrency (a fixed-seq
point's job runs every concurrency of the point; an agentic point runs one concurrency per allocation, so only
the highest one's job runs it). It runs after the sweep: GSM8K's shared 5-shot prefix would leave prefix-cache
hits an agentic point must start without (its cold-start proof), and the measured points stay untouched.

Its question set is staged at submission like the traces (recipes/staging.py): written into the run's recipe
folder, hashed into lock.json, checked on rank 0 at preflight; nothing is fetched on a compute node.
"""

from __future__ import annotations

import json

from .benchmark import entry_url, expand_concurrencies
from .plan import Accuracy, Ports, Staged
from .target import Target
from .words import Ref, argv, word

EVAL_SET = "evals/gsm8k"  # under the run's recipe folder: train.jsonl (the few-shot examples), test.jsonl
PUBLISHED_SET = "openai/gsm8k"  # lm-eval's own gsm8k task reads this dataset, config main
CONTEXT_MARGIN = 4096  # InferenceX's answer budget: the context less this, or half a shorter one
MAX_ANSWER_TOKENS = 16384
DEFAULT_CONTEXT = 16384  # InferenceX's eval context where the engines state none


def concurrency(t: Target, *, soak: bool = False) -> int | None:
    """The concurrency this job's eval runs at (lm-eval's concurrent requests); None: this job runs none (a
    soak, which watches the engines instead, runs none either)."""
    if t.launch.benchmark.accuracy.run == "off" or soak:
        return None
    highest = max(expand_concurrencies(t.point.space))
    return highest if t.concurrency in (None, highest) else None


def staged(t: Target) -> Staged | None:
    """The eval's question set, where this job runs the eval."""
    if concurrency(t) is None:
        return None
    run = t.launch.benchmark.accuracy
    return Staged(
        "eval-set", "eval-set", EVAL_SET, PUBLISHED_SET if run.eval_set == "published" else "made-up"
    )


def max_tokens(t: Target) -> int:
    """The answer's token budget: the runner's, else InferenceX's from the engines' context."""
    run = t.launch.benchmark.accuracy
    if run.max_tokens is not None:
        return run.max_tokens
    context = t.settings(t.roles[0])["MAX_MODEL_LEN"] or DEFAULT_CONTEXT
    budget = context - CONTEXT_MARGIN if context > CONTEXT_MARGIN else context // 2
    return min(budget, MAX_ANSWER_TOKENS)


def step(t: Target, engine, ports: Ports, *, soak: bool = False) -> Accuracy | None:
    """The job's accuracy step, where it runs one."""
    conc = concurrency(t, soak=soak)
    if conc is None:
        return None
    run, wanted = t.launch.benchmark.accuracy, t.model.accuracy
    limit = ("--limit", run.limit) if run.limit is not None else ()
    command = argv(
        "python3",
        word(Ref("SCRIPTS_DIR"), "/accuracy.py"),
        "--url",
        word(*entry_url(t, ports), "/v1/chat/completions"),
        "--model",
        engine.served_model(t),
        "--eval",
        wanted.eval,
        "--questions",
        word(Ref("RECIPE_DIR"), f"/{EVAL_SET}"),
        "--threshold",
        f"{wanted.threshold:.4f}",
        "--concurrency",
        conc,
        *limit,
        "--max-tokens",
        max_tokens(t),
        "--seconds",
        run.seconds,
        "--out",
        word(Ref("RESULTS_DIR"), "/accuracy"),
    )
    return Accuracy(
        eval=wanted.eval,
        threshold=wanted.threshold,
        concurrency=conc,
        limit=run.limit,
        eval_set=run.eval_set,
        seconds=run.seconds,
        argv=command,
    )


MADE_UP_ROWS = {"train": 8, "test": 64}  # the few-shot pool, the questions a local runner may ask


def write_made_up_set(folder) -> dict:
    """The local runners' question set, in GSM8K's format (a question; a worked answer ending `#### <n>`):
    sums the simulator answers (sim/tokens.py known_answer), the same every submission."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    for split, rows in MADE_UP_ROWS.items():
        lines = []
        for _ in range(rows):
            n += 1
            a, b = 7 + (n * 37) % 90, 3 + (n * 53) % 97
            answer = f"{a} plus {b} is <<{a}+{b}={a + b}>>{a + b}.\n#### {a + b}"
            lines.append(json.dumps({"answer": answer, "question": f"What is {a} plus {b}?"}, sort_keys=True))
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return dict(MADE_UP_ROWS)
