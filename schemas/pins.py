"""The versions pyproject.toml pins, read from the one place they live. Stdlib only: the Makefile reads
them (sim/cluster/extras.py) before any virtualenv exists, and submit writes them into lock files."""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


@cache
def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(PYPROJECT.read_text())["project"]
    return project


def requirements(extra: str, only: str | None = None) -> list[str]:
    """An extra's requirements, or just `only`'s (KeyError for an unknown extra)."""
    reqs: list[str] = _project()["optional-dependencies"][extra]
    if only is not None:
        reqs = [r for r in reqs if re.split(r"[ \t<>=!~;\[]", r, maxsplit=1)[0] == only]
    return reqs


def pinned_version(extra: str, package: str) -> str:
    """`aiperf==0.13.0` in extra `bench` -> '0.13.0'."""
    (pin,) = requirements(extra, only=package)
    return pin.split("==", 1)[1]


def project_version() -> str:
    """This repository's version: its proxy (pd-proxy) is released with it."""
    return str(_project()["version"])
