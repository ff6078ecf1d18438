"""Prometheus text exposition, read the one way every reader here needs: the samples of one metric whose
labels hold given `name="value"` pairs, and their sum. Stdlib only: node-side proofs (proof.py) and the
post-run report (recipes/report.py) share it."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def samples(text: str, name: str, *labels: str) -> list[float]:
    """Values of `name`'s samples whose label set contains every item of `labels` (e.g. 'source="x"')."""
    out = []
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if sample and sample[1] == name and all(label in (sample[2] or "") for label in labels):
            try:
                out.append(float(sample[3]))
            except ValueError:  # not a sample value: a broken line is no sample, not a crash
                continue
    return out


def total(text: str, name: str, *labels: str) -> float | None:
    """The sum of those samples; None when there is none (a metric the engine does not export)."""
    found = samples(text, name, *labels)
    return sum(found) if found else None
