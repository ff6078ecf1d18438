"""What a job reads that is not rendered, staged by `make submit` before sbatch and recorded in lock.json:
a tokenizer shipped with the run, and the agentic corpus (AIPerf's pinned public dataset, in the site's
Hugging Face cache). Each entry is hashed file by file; rank 0 checks them all against the lock at preflight
(scripts/inputs.py), so nothing is fetched on a compute node and a changed or half-copied input fails there,
named, instead of hours later.

The corpus is staged by the client's own code, in its virtualenv (recipes/engines/probes/aiperf_dataset.py):
AIPerf's plugin table names the Hugging Face dataset, the `datasets` library fills the cache (a download only
on this host, for a runner that replays the published corpus) and must then load it offline, as the nodes
will. The run gets a datasets-cache folder of its own holding one link, to the exact prepared version that
was hashed: the client reads through it (HF_DATASETS_CACHE), the site's cache stays read-only, and a newer
version staged later for another run is never picked up by this one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from schemas.images import spelled_for
from scripts import inputs

from . import accuracy
from .benchmark import DATASETS_CACHE
from .plan import Plan, Staged

ROOT = Path(__file__).resolve().parents[1]
CLIENT_PYTHON = ROOT / ".venv-bench" / "bin" / "python"  # make tools builds it (pyproject.toml extra bench)
DATASET_PROBE = ROOT / "recipes" / "engines" / "probes" / "aiperf_dataset.py"
EVAL_PYTHON = ROOT / ".venv-eval" / "bin" / "python"  # make tools builds it (pyproject.toml extra eval)
EVAL_SET_PROBE = ROOT / "recipes" / "engines" / "probes" / "eval_set.py"
MADE_UP_MARKER = "made-up-corpus.txt"  # what sim/corpus.py leaves in a corpus it made
STAGE_TIMEOUT_S = 6 * 3600  # a download of a large corpus over a slow link; this only bounds a hang
INSPECT_TIMEOUT_S = 120


class StagingError(Exception):
    """An input that cannot be staged; the message says which and what to do."""


def stage(plan: Plan, recipe: Path, run_dir: Path, say: Callable[[str], None] | None = None) -> dict:
    """Every staged input of the plan, as lock.json's `inputs` records it."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    corpus = plan.client_scenario.corpus if plan.client_scenario else "pinned"
    out = {}
    for s in plan.staged:
        if s.kind == "shipped":
            out[s.name] = {"kind": "shipped", "path": s.path, **_digest(s, recipe / s.path)}
        elif s.kind == "hf-dataset":
            out[s.name] = stage_dataset(s, corpus, run_dir, say)
        elif s.kind == "eval-set":
            out[s.name] = stage_eval_set(s, recipe, say)
        else:
            raise StagingError(f"staged input {s.name}: unknown kind {s.kind!r}")
    return out


def stage_dataset(s: Staged, corpus: str, run_dir: Path, say: Callable[[str], None]) -> dict:
    """The public dataset S names in the site's cache (downloaded first for a pinned corpus), checked to
    load offline, hashed, and linked from the run's own datasets-cache folder."""
    cache = Path(s.path)
    found = client_dataset(s.source, cache, download=corpus == "pinned", say=say)
    folder = Path(found["folder"])
    made_up = (folder / MADE_UP_MARKER).is_file()
    if made_up != (corpus == "made-up"):
        what = "a corpus made up by sim/corpus.py" if made_up else f"the published {found['hf_dataset']}"
        raise StagingError(
            f"staged input {s.name}: {cache} holds {what} under {s.source!r}, but the runner's "
            f"benchmark.corpus is {corpus!r}: a made-up corpus is for local runners only, and a local "
            "runner's results must say they are no submission (remove the folder, or fix benchmark.corpus "
            "in configs/launch.yaml)"
        )
    # <org>___<name>/<config>/<version>/<commit>: the layout the datasets library's offline read globs
    link = run_dir / DATASETS_CACHE / Path(*folder.parts[-4:])
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(folder, target_is_directory=True)
    return {
        "kind": "hf-dataset",
        "path": str(folder),
        "dataset": s.source,
        "hf_dataset": found["hf_dataset"],
        "split": found["split"],
        "rows": found["rows"],
        "corpus": "made-up" if made_up else "published",
        "staged_with": f"aiperf {found['aiperf']}",
        **_digest(s, folder),
    }


def stage_eval_set(s: Staged, recipe: Path, say: Callable[[str], None]) -> dict:
    """The graded eval's questions written into the run's recipe folder (S.path): the public set through the
    eval client's own datasets library (downloaded on this host), or the local runners' made-up one."""
    folder = recipe / s.path
    if s.source == "made-up":
        rows = accuracy.write_made_up_set(folder)
        found = {"hf_dataset": None, "rows": rows, "made_with": "recipes/accuracy.py"}
    else:
        if not EVAL_PYTHON.is_file():
            raise StagingError(
                f"staged input {s.name}: the question set is written with the eval client's own datasets "
                f"library, and {EVAL_PYTHON.parent.parent.name} is missing: run `make tools` (make submit "
                "builds it itself)"
            )
        say(f"staging: eval set {s.source} into {folder} (downloading it if this host lacks it)")
        done = subprocess.run(
            [str(EVAL_PYTHON), "-E", "-s", str(EVAL_SET_PROBE), str(folder)],
            capture_output=True, text=True, timeout=STAGE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()
            raise StagingError(f"staged input {s.name}: {said[-1] if said else f'exit {done.returncode}'}")
        found = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "kind": "eval-set",
        "path": s.path,
        "set": s.source,
        "rows": found["rows"],
        **{k: v for k, v in found.items() if k not in ("rows", "hf_dataset")},
        **_digest(s, folder),
    }


def client_dataset(name: str, cache: Path, *, download: bool, say: Callable[[str], None]) -> dict:
    """The client's answer for NAME in CACHE: {name, hf_dataset, split, folder, rows, aiperf}."""
    if not CLIENT_PYTHON.is_file():
        raise StagingError(
            "the corpus is staged with the benchmark client's own code, and "
            f"{CLIENT_PYTHON.parent.parent.name} is missing: run `make tools` (make submit builds it itself)"
        )
    if not cache.is_dir():
        raise StagingError(
            f"{cache} (the runner's benchmark.hf-cache) is not a folder here: make submit stages the corpus "
            "into it, so it must be on a file system this host and the nodes share"
            + (
                ""
                if download
                else "; the local runners' made-up corpus: `.venv-bench/bin/python -m sim.corpus`"
            )
        )
    say(f"staging: corpus {name} in {cache}" + (" (downloading it if absent: minutes)" if download else ""))
    argv = [str(CLIENT_PYTHON), "-E", "-s", str(DATASET_PROBE), name, str(cache)]
    done = subprocess.run(
        [*argv, *(["--download"] if download else [])],
        capture_output=True,
        text=True,
        timeout=STAGE_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        why = next(
            (ln for ln in reversed(said) if ln.startswith("aiperf_dataset: ")), said[-1] if said else ""
        )
        hint = (
            "" if download else " (the local runners' made-up corpus: `.venv-bench/bin/python -m sim.corpus`)"
        )
        raise StagingError(f"staged input: corpus {name}: {why.removeprefix('aiperf_dataset: ')}{hint}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _digest(s: Staged, path: Path) -> dict:
    try:
        return inputs.digest(path)
    except (inputs.InputError, OSError) as exc:
        raise StagingError(
            f"staged input {s.name}: {exc} (nothing is fetched on a compute node: stage it first)"
        ) from None


def dry_run_lines(plan: Plan) -> list[str]:
    """What make submit would stage, for --dry-run: without touching the cache or the network."""
    out = []
    c = plan.container
    if c.staging:
        reference = spelled_for(c.image, "docker")
        how = (
            f"saved once into {archive_file(c.image_archive, reference)} (pulled on this host if it lacks "
            "it), loaded by a node that lacks it"
            if c.image_archive
            else "preloaded on every node by the site"
        )
        out.append(f"# staged image {reference}: {how}; its id in lock.json, checked on every node's host "
                   "before any container starts; the containers run it with --pull never")  # fmt: skip
    corpus = plan.client_scenario.corpus if plan.client_scenario else "pinned"
    for s in plan.staged:
        if s.kind == "shipped":
            out.append(f"# staged {s.name}: recipe/{s.path}, shipped with the run and hashed into lock.json")
            continue
        if s.kind == "eval-set":
            how = (
                "a small set of made-up sums in its format (local runners: the score means nothing)"
                if s.source == "made-up"
                else f"{s.source} (config main), downloaded here by the eval client's datasets library"
            )
            out.append(
                f"# staged {s.name}: recipe/{s.path}/{{train,test}}.jsonl: {how}; hashed into lock.json"
            )
            continue
        how = (
            "the corpus made on this machine under that name (python -m sim.corpus; never a submission)"
            if corpus == "made-up"
            else "downloaded on this host by the client's datasets library if absent"
        )
        out.append(
            f"# staged {s.name}: AIPerf --public-dataset {s.source} in {s.path} ({how}), checked to load "
            "offline, hashed into lock.json, read by the nodes read-only and offline"
        )
    return out


def _docker() -> str:
    return os.environ.get("DOCKER", "docker")


def archive_file(archive: str, reference: str) -> Path:
    """Where the image of REFERENCE is saved in the runner's archive folder: one file per reference."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", reference)
    return Path(archive) / f"{safe}.tar"


def _local_image(reference: str) -> dict | None:
    """The submit host's runtime's id and repository digests of REFERENCE; None without it (or without
    docker on this host)."""
    if shutil.which(_docker()) is None:
        return None
    done = subprocess.run(
        [_docker(), "image", "inspect", "--format", "{{json .Id}} {{json .RepoDigests}}", reference],
        capture_output=True, text=True, timeout=INSPECT_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    ident, digests = done.stdout.strip().split(" ", 1)
    return {"id": json.loads(ident), "repo_digests": sorted(json.loads(digests) or [])}


def stage_image(plan: Plan, say: Callable[[str], None] | None = None) -> dict | None:
    """The config's image made ready for nodes that fetch nothing (the runner's image-staging), as lock.json's
    `image_staging` records it: the id every node's host check holds its runtime to. archive: saved once
    into the shared folder (pulled on this host if it lacks it); preloaded: the site's, the id this host
    knows it by when it has it."""
    c = plan.container
    if not c.staging:
        return None
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    reference = spelled_for(c.image, "docker")
    if c.image_archive is None:
        found = _local_image(reference)
        if found is None:
            say(f"# image {reference}: preloaded by the site; this host does not hold it, so lock.json "
                "names no id and each node records the one it runs")  # fmt: skip
        return {"mode": "preloaded", "reference": reference, **(found or {"id": None})}
    target = archive_file(c.image_archive, reference)
    sidecar = target.with_suffix(".json")
    if target.is_file() and sidecar.is_file():
        saved = json.loads(sidecar.read_text())
        if saved.get("reference") == reference and saved.get("size") == target.stat().st_size:
            say(f"image {reference}: already staged in {target}")
            return {"mode": "archive", "archive_file": str(target), **saved}
        raise StagingError(
            f"image {reference}: {target} does not match its record {sidecar} (a half-written or replaced "
            "archive): remove both and submit again"
        )
    if shutil.which(_docker()) is None:
        raise StagingError(
            f"image {reference}: not yet in the runner's archive {c.image_archive}, and this host has no "
            f"{_docker()} to save it with: on a machine with the network, `docker pull {reference}` and "
            f"`docker save -o {target} {reference}`, or submit from a host with docker (DOCKER=podman "
            "works too)"
        )
    if _local_image(reference) is None:
        say(f"image {reference}: pulling on this host (once; the nodes load it from {c.image_archive})")
        _run([_docker(), "pull", reference], f"{_docker()} pull {reference}")
    found = _local_image(reference)
    if found is None:
        raise StagingError(f"image {reference}: {_docker()} holds no such image after pulling it")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    say(f"image {reference}: saving into {target}")
    _run([_docker(), "save", "-o", str(partial), reference], f"{_docker()} save {reference}")
    partial.replace(target)
    saved = {"reference": reference, **found, "size": target.stat().st_size}
    sidecar.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    return {"mode": "archive", "archive_file": str(target), **saved}


def _run(cmd: list[str], what: str) -> None:
    """A long step of staging, its own progress on this terminal; its failure a StagingError."""
    try:
        done = subprocess.run(cmd, timeout=STAGE_TIMEOUT_S, check=False, stdout=sys.stderr)
    except OSError as err:
        raise StagingError(f"{what}: {err}") from None
    if done.returncode != 0:
        raise StagingError(f"{what} exited {done.returncode} (its lines above say why)")
