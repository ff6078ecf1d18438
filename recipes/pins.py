"""The versions pyproject.toml pins, read from the one place they live (stdlib only: the Makefile reads
them before any virtualenv exists)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(extra: str, only: str | None = None) -> list[str]:
    """An extra's requirements, or just `only`'s (KeyError for an unknown extra)."""
    reqs = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"][extra]
    if only is not None:
        reqs = [r for r in reqs if re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] == only]
    return reqs


def pinned_version(extra: str, package: str) -> str:
    """`aiperf==0.13.0` in extra `bench` -> '0.13.0'."""
    (pin,) = requirements(extra, only=package)
    return pin.split("==", 1)[1]
