"""The one path setting for reference material that tests and benchmarks read (never copied in)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INFERENCEX_REF = Path(os.environ.get("INFERENCEX_REF", ROOT.parent / "shared" / "reference" / "inferencex"))


# InferenceX as it is now (its newer master files, srt-slurm recipes, validator), beside the August snapshot;
# srt-slurm's source tree (c88ef731): `make tools` installs srtctl from it unless SRT_SLURM_SRC names another.
INFERENCEX_NOW = INFERENCEX_REF.parent / "inferencex-e2e"
SRT_SLURM = Path(os.environ.get("SRT_SLURM_SRC") or INFERENCEX_REF.parent / "srt-slurm")


def reference(name: str) -> Path:
    """A file of the InferenceX reference corpus (copies of InferenceX's own files: amd-master.yaml,
    runners.yaml, perf-changelog.yaml, PR entries), kept outside the repository. Absent (a clone without it),
    a test is skipped with the reason in pytest's summary; under CI=true, or outside pytest (a benchmark), it
    fails."""
    return _present(INFERENCEX_REF / name)


def reference_now(name: str) -> Path:
    """A file of InferenceX as it is now (configs/amd-master.yaml, configs/runners.yaml, infx/matrix/
    validation.py, srt-slurm recipes), beside the reference corpus; absent: as reference()."""
    return _present(INFERENCEX_NOW / name)


def _present(path: Path) -> Path:
    if path.exists():
        return path
    message = (
        f"InferenceX reference corpus missing: {path} (set INFERENCEX_REF to the folder holding InferenceX's "
        "amd-master.yaml, runners.yaml and perf-changelog.yaml, with inferencex-e2e/ beside it)"
    )
    if os.environ.get("CI") == "true" or "pytest" not in sys.modules:
        raise FileNotFoundError(message)
    import pytest

    pytest.skip(message, allow_module_level=True)
