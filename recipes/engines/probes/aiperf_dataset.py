"""Stage one of AIPerf's public datasets into a Hugging Face cache, the way the client itself loads it.

Runs inside the client's virtualenv (.venv-bench), as a file: standard library, AIPerf and the `datasets`
library AIPerf loads a --public-dataset with. AIPerf's own plugin table names the Hugging Face dataset behind
the name (never a copy of it here); `datasets.load_dataset` fills the cache exactly as the client's offline
read on a node then finds it (the datasets library's own offline path reads its prepared cache, not the
hub's files). Usage:

    aiperf_dataset.py NAME HF_CACHE [--download]

Without --download the cache must hold the dataset already (a made-up corpus, or one staged before). Prints
one JSON object: {name, hf_dataset, split, folder, rows, aiperf}; `folder` is the prepared version the
offline read chose. Exit 1 with one line on stderr when the dataset cannot be had.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _fail(text: str) -> int:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    print(f"aiperf_dataset: {' | '.join(lines[:3])}", file=sys.stderr)
    return 1


def _load(hf_dataset: str, split: str, *, offline: bool):
    os.environ["HF_DATASETS_OFFLINE"] = "1" if offline else "0"
    os.environ["HF_HUB_OFFLINE"] = "1" if offline else "0"
    import datasets  # read after the switches: it takes them at import

    datasets.config.HF_HUB_OFFLINE = offline  # a second load in the same process changes its mind
    return datasets.load_dataset(hf_dataset, split=split)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--download"):
        print(__doc__, file=sys.stderr)
        return 2
    name, cache, download = argv[0], Path(argv[1]), len(argv) == 3
    os.environ["HF_HOME"] = str(cache)
    os.environ["HF_DATASETS_CACHE"] = str(cache / "datasets")
    from importlib.metadata import version

    from aiperf.plugin import plugins

    try:
        meta = plugins.get_public_dataset_loader_metadata(name)
    except Exception as exc:  # AIPerf's own refusal of the name, whatever its type
        return _fail(f"AIPerf {version('aiperf')} has no public dataset {name!r}: {exc}")
    hf_dataset, split = getattr(meta, "hf_dataset_name", None), getattr(meta, "hf_split", None) or "train"
    if not hf_dataset:
        return _fail(f"AIPerf's public dataset {name!r} is not a Hugging Face dataset: nothing to stage")
    try:
        rows = _load(hf_dataset, split, offline=True)
    except Exception as offline_error:
        if not download:
            return _fail(f"{hf_dataset} is not in {cache} ({type(offline_error).__name__}: {offline_error})")
        print(f"aiperf_dataset: downloading {hf_dataset} (split {split}) into {cache}", file=sys.stderr)
        try:
            _load(hf_dataset, split, offline=False)
            rows = _load(hf_dataset, split, offline=True)  # what the nodes will do: it must work offline
        except Exception as exc:
            return _fail(f"{hf_dataset}: {type(exc).__name__}: {exc}")
    files = [f["filename"] for f in rows.cache_files]
    if not files:
        return _fail(f"{hf_dataset}: loaded, but from no cache file (an in-memory dataset cannot be staged)")
    print(
        json.dumps(
            {
                "name": name,
                "hf_dataset": hf_dataset,
                "split": split,
                "folder": str(Path(files[0]).parent),
                "rows": len(rows),
                "aiperf": version("aiperf"),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
