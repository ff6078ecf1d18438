"""Write the graded eval's public question set as the run ships it: GSM8K (openai/gsm8k, config main, the
dataset lm-eval's own gsm8k task reads), its train and test splits as JSON lines of {question, answer}.

Runs inside the eval's virtualenv (.venv-eval), as a file: standard library and the `datasets` library
lm-eval loads its tasks with; a download only here, where you submit. Usage:

    eval_set.py FOLDER

Prints one JSON object: {hf_dataset, config, rows: {train, test}, datasets}. Exit 1 with one line on stderr
when the set cannot be had.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HF_DATASET, CONFIG, SPLITS, FIELDS = "openai/gsm8k", "main", ("train", "test"), ("question", "answer")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("eval_set: usage: eval_set.py FOLDER", file=sys.stderr)
        return 1
    folder = Path(argv[0])
    try:
        import datasets

        rows = {}
        folder.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:
            data = datasets.load_dataset(HF_DATASET, CONFIG, split=split)
            with open(folder / f"{split}.jsonl", "w") as f:
                for row in data:
                    f.write(json.dumps({k: row[k] for k in FIELDS}, sort_keys=True) + "\n")
            rows[split] = len(data)
    except Exception as err:  # the download, the cache, a changed schema: one line, the caller names it
        print(
            f"eval_set: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", file=sys.stderr
        )
        return 1
    print(
        json.dumps(
            {"hf_dataset": HF_DATASET, "config": CONFIG, "rows": rows, "datasets": datasets.__version__}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
