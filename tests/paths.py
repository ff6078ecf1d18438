"""The one path setting for reference material that tests and benchmarks read (never copied in)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INFERENCEX_REF = Path(os.environ.get("INFERENCEX_REF", ROOT.parent / "shared" / "reference" / "inferencex"))


def reference(name: str) -> Path:
    """A file of the InferenceX reference corpus (copies of InferenceX's own files: amd-master.yaml,
    runners.yaml, perf-changelog.yaml, PR entries), kept outside the repository. Absent (a clone without it),
    a test is skipped with the reason in pytest's summary; under CI=true, or outside pytest (a benchmark), it
    fails."""
    path = INFERENCEX_REF / name
    if path.is_file():
        return path
    message = (
        f"InferenceX reference corpus missing: {path} (set INFERENCEX_REF to the folder holding InferenceX's "
        "amd-master.yaml, runners.yaml and perf-changelog.yaml)"
    )
    if os.environ.get("CI") == "true" or "pytest" not in sys.modules:
        raise FileNotFoundError(message)
    import pytest

    pytest.skip(message, allow_module_level=True)
