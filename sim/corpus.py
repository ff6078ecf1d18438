"""A made-up agentic corpus under a pinned AIPerf public-dataset name, in the Hugging Face cache layout the
client reads offline: the local runners replay it with the same client line, scenario lock and staging as
the MI355X runner, which needs the published corpus.

    .venv-bench/bin/python -m sim.corpus [--hf-cache DIR] [--name SET ...]

Runs in the client's virtualenv (AIPerf and the `datasets` library): AIPerf's own plugin table names the
Hugging Face dataset behind each set, and the `datasets` library prepares the cache exactly as its offline
read expects it (datasets/<org>___<name>/default/0.0.0/<commit>/). The traces are AIPerf's Weka trace format,
deterministic, small enough for CPU engines (512-3,456 tokens a request), with each trace's turns sharing a
growing prefix; a marker file says the corpus is made up, and make submit refuses it on a runner that states
corpus: pinned. Nothing of the published corpus is in it: every number comes from SEED.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

SEED = "disagg-recipes/made-up-weka/v1"
DEFAULT_CACHE = Path("/tmp/disagg-recipes-hf")  # the local runners' benchmark.hf-cache (configs/launch.yaml)
DEFAULT_SETS = ("semianalysis_cc_traces_weka_062126_256k",)  # their default-trace-sets
MARKER = "made-up-corpus.txt"  # in the prepared folder: hashed into lock.json with the data
TRACES, TURNS, BLOCK = 24, (4, 6), 64
# a trajectory's prompt: 512 to 1,536 tokens at first, 128 to 384 more a turn (at most 3,456 tokens: under a
# 4,096-token context with room for the answer and for tokenizers that count the text a little longer)
FIRST_BLOCKS, GROWTH_BLOCKS, OUTPUT = (8, 24), (2, 6), (16, 48)
THINK_S = (1.0, 4.0)
MODEL = "made-up"


def traces() -> list[dict]:
    """Weka traces (AIPerf's weka_trace_models): streaming requests only, every turn resending the trace's
    earlier blocks (hash ids local to the trace) and adding a few."""
    out = []
    for i in range(TRACES):
        rng = random.Random(f"{SEED}:{i}")
        blocks, t, requests = rng.randint(*FIRST_BLOCKS), 0.0, []
        for _ in range(rng.randint(*TURNS)):
            requests.append(
                {
                    "t": round(t, 3),
                    "type": "s",
                    "model": MODEL,
                    "in": blocks * BLOCK,
                    "out": rng.randint(*OUTPUT),
                    "hash_ids": list(range(blocks)),
                    "input_types": ["text"],
                    "output_types": ["text"],
                    "stop": "end_turn",
                }
            )
            t += rng.uniform(*THINK_S)
            blocks += rng.randint(*GROWTH_BLOCKS)
        out.append(
            {
                "id": f"made-up-{i:02d}",
                "models": [MODEL],
                "block_size": BLOCK,
                "hash_id_scope": "local",
                "tool_tokens": 0,
                "system_tokens": 0,
                "requests": requests,
            }
        )
    return out


def hf_dataset_of(name: str) -> tuple[str, str]:
    """(Hugging Face dataset, split) AIPerf itself loads for this public dataset name."""
    from aiperf.plugin import plugins

    meta = plugins.get_public_dataset_loader_metadata(name)
    return meta.hf_dataset_name, meta.hf_split or "train"


def prepare(name: str, cache: Path) -> Path:
    """The prepared folder of the made-up corpus under NAME's dataset in CACHE (made once; the same bytes
    every time)."""
    from datasets.naming import camelcase_to_snakecase
    from datasets.packaged_modules.json.json import Json

    hf_dataset, split = hf_dataset_of(name)
    lines = "".join(json.dumps(tr, sort_keys=True) + "\n" for tr in traces())
    commit = hashlib.sha1(lines.encode()).hexdigest()  # the folder's name: a commit hash's shape
    org, short = hf_dataset.split("/")
    target = cache / "datasets" / f"{org}___{camelcase_to_snakecase(short)}" / "default" / "0.0.0" / commit
    if (target / MARKER).is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / f"{split}.jsonl"
        data.write_text(lines)
        builder = Json(
            cache_dir=str(Path(tmp) / "build"),
            dataset_name=short,
            hash=commit,
            data_files={split: [str(data)]},
            config_name="default",
        )
        builder.download_and_prepare()
        built = Path(builder.cache_dir)
        for stray in built.glob("*.lock"):
            stray.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(built, target)
    (target / MARKER).write_text(
        f"Made up by sim/corpus.py ({SEED}) under {name}'s name for the local runners: not {hf_dataset}.\n"
    )
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sim.corpus", description=__doc__.splitlines()[0])
    p.add_argument("--hf-cache", type=Path, default=DEFAULT_CACHE, help=f"default: {DEFAULT_CACHE}")
    p.add_argument(
        "--name", action="append", help=f"AIPerf public dataset (default: {', '.join(DEFAULT_SETS)})"
    )
    args = p.parse_args(argv)
    for name in args.name or DEFAULT_SETS:
        folder = prepare(name, args.hf_cache)
        print(f"made-up corpus {name}: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
