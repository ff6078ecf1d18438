"""Verified results for recipe pages: a finished run's headline numbers and provenance, recorded into
docs/results/<config-key>.json (checked in, one latest run per variant) by `make docs RUN=<run folder>`.

A run folder is what `make submit` made and `make report` summarised: lock.json (image, components,
config and rendered-files SHA-256, workarounds), summary.json (per concurrency) and job.out, whose
verdict must say the job succeeded: only a run whose every gate passed counts as verified.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from ..report import COLUMNS

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
SUCCESS = re.compile(r"^job succeeded: .*$", re.M)  # scripts/outcome.py's verdict of a clean run
HEADLINE = tuple(key for _, key, _ in COLUMNS)  # the numbers `make report` prints, no more


class RecordError(Exception):
    """The folder is not a finished, verified, summarised run."""


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordError(f"{path} not found") from None
    except ValueError as exc:
        raise RecordError(f"{path} is not JSON: {exc}") from None


def run_date(run_id: str) -> str | None:
    """A run id starts with its UTC submission time: 20261121-103154-d89d49 -> 2026-11-21 10:31:54 UTC."""
    try:
        return f"{dt.datetime.strptime(run_id[:15], '%Y%m%d-%H%M%S'):%Y-%m-%d %H:%M:%S} UTC"
    except ValueError:
        return None


def record_of(run_dir: Path) -> dict:
    """The record of one verified run, or RecordError saying what is missing."""
    if not (run_dir / "summary.json").is_file():
        raise RecordError(f"{run_dir}/summary.json not found: run `make report RUN={run_dir}` first")
    summary = _read_json(run_dir / "summary.json")
    lock = _read_json(run_dir / "lock.json")
    job_out = run_dir / "job.out"
    if not job_out.is_file() or not SUCCESS.search(job_out.read_text(errors="replace")):
        raise RecordError(
            f"{job_out} has no `job succeeded` verdict: only a run that passed every gate counts"
        )
    return {
        "config_key": lock["config_key"],
        "variant": lock["variant"],
        "run": summary["run"],
        "date": run_date(summary["run"]),
        "gpus": summary["gpus"],
        "nodes": summary.get("lock", {}).get("nodes", []),
        "image": lock["image"],
        "image_digest": lock.get("image_digest"),
        "components": lock["components"],
        "config_sha256": lock["config_sha256"],
        "rendered_sha256": lock.get("rendered_sha256"),
        "workarounds": lock.get("workarounds", []),
        "mode": lock.get("mode", "sweep"),
        "rows": [{k: row.get(k) for k in HEADLINE} for row in summary["rows"]],
        # the graded eval's score, questions and threshold (make report's accuracy line); None: no eval ran
        "accuracy": summary.get("accuracy"),
    }


def path_for(key: str, root: Path = RESULTS) -> Path:
    return root / f"{key}.json"


def load(key: str, root: Path = RESULTS) -> dict:
    """Variant -> its recorded run ({} when none is)."""
    path = path_for(key, root)
    return _read_json(path)["variants"] if path.is_file() else {}


def record(run_dir: Path, root: Path = RESULTS) -> Path:
    """Record the run as its variant's latest verified result; returns the file written."""
    rec = record_of(run_dir)
    variants = load(rec["config_key"], root)
    variants[rec["variant"]] = rec
    path = path_for(rec["config_key"], root)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"config_key": rec["config_key"], "variants": variants}
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path
