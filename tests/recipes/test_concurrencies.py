"""Sweep expansion: the concurrencies a point runs are the ones InferenceX runs for it (conc-end inclusive),
for every point of InferenceX's own corpus."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from recipes.benchmark import expand_concurrencies
from schemas.config import MasterConfig
from schemas.entries import points
from schemas.yamlio import load_file
from tests.paths import reference


def inferencex_run(start: int, end: int) -> tuple:
    """What InferenceX's sweep generator runs for conc-start..conc-end, stated from its docs and generator:
    start, then doubling while below end, and end itself always (the last step clamped to it)."""
    doublings = [start * 2**k for k in range(64) if start * 2**k < end]
    return tuple(doublings) + (end,)


def space(**conc) -> SimpleNamespace:
    return SimpleNamespace(
        conc_list=conc.get("conc_list"), conc_start=conc.get("start"), conc_end=conc.get("end")
    )


@pytest.mark.parametrize(
    ("start", "end", "runs"),
    [
        (4, 48, (4, 8, 16, 32, 48)),  # the case: 48 is run, not dropped
        (4, 32, (4, 8, 16, 32)),
        (1, 1, (1,)),
        (3, 5, (3, 5)),
        (1, 64, (1, 2, 4, 8, 16, 32, 64)),
    ],
)
def test_conc_end_is_inclusive(start, end, runs):
    assert expand_concurrencies(space(start=start, end=end)) == runs == inferencex_run(start, end)


def test_conc_list_runs_as_written():
    assert expand_concurrencies(space(conc_list=[64, 1, 8])) == (64, 1, 8)


def test_every_point_of_the_inferencex_corpus_expands_as_inferencex_expands_it():
    master = MasterConfig.model_validate(load_file(reference("amd-master.yaml")).data)
    ranges = 0
    for key, entry in master.root.items():
        for pt in points(entry, (key,)):
            sp = pt.space
            if sp.conc_list is not None:
                assert expand_concurrencies(sp) == tuple(sp.conc_list), pt.path
                continue
            ranges += 1
            assert expand_concurrencies(sp) == inferencex_run(sp.conc_start, sp.conc_end), pt.path
    assert ranges > 0  # the corpus has ranges (47 points at 843c6254): this test saw them
