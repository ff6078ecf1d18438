"""What the integration tests share: the tools a job needs, and reading its Prometheus snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.promtext import samples as prom_samples


def require_tools(paths: list[Path]) -> None:
    """`make test` builds the tools first; only a bare pytest run can miss one."""
    missing = [str(t) for t in paths if not t.exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `make tools` (make test does)")


def metric(path: Path, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples whose labels include `labels`; it must have some."""
    values = prom_samples(path.read_text(), name, *(f'{k}="{v}"' for k, v in labels.items()))
    assert values, f"{name}{labels or ''} not in {path.name}"
    return sum(values)
