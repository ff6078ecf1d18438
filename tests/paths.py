"""The one path setting for reference material that tests and benchmarks read (never copied in)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INFERENCEX_REF = Path(os.environ.get("INFERENCEX_REF", ROOT.parent / "shared" / "reference" / "inferencex"))


def reference(name: str) -> Path:
    """A file of the InferenceX reference corpus; fails loudly (never skips) when the corpus is absent."""
    path = INFERENCEX_REF / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: set INFERENCEX_REF to the InferenceX reference folder")
    return path
