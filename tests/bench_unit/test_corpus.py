"""The corpus generator of `make bench-corpus` (tests/bench/corpus.py): deterministic, distinct."""

from __future__ import annotations

import copy

import pytest

from tests.bench.corpus import CONC_RANGES, SEQ_LENS, corpus, shifted_concs, variant_key, vary

SINGLE = {
    "model-prefix": "m",
    "multinode": False,
    "scenarios": {
        "fixed-seq-len": [
            {"isl": 8192, "osl": 1024, "search-space": [{"tp": 4, "conc-start": 4, "conc-end": 64}]}
        ]
    },
}
MULTI = {
    "model-prefix": "m",
    "multinode": True,
    "scenarios": {
        "agentic-coding": [
            {
                "search-space": [
                    {
                        "conc-list": [8, 16, 32],
                        "prefill": {"num-worker": 1, "additional-settings": ["PREFILL_NODES=1"]},
                        "decode": {"num-worker": 1, "additional-settings": ["DECODE_NODES=1", "X=2"]},
                    }
                ]
            }
        ]
    },
}


def test_variant_keys_are_distinct_and_keep_the_seed_name():
    keys = {variant_key("dsr1-fp8", i) for i in range(1000)}
    assert len(keys) == 1000
    assert all(k.startswith("dsr1-fp8-c") for k in keys)


@pytest.mark.parametrize("index", range(7))
def test_shifted_concs_are_positive_and_one_shorter(index):
    out = shifted_concs([1, 2, 4], index)
    assert len(out) == 2
    assert all(isinstance(c, int) and c > 0 for c in out)


def test_shifted_concs_keeps_a_single_value():
    assert shifted_concs([8], 1) == [16]
    assert shifted_concs([8], 4) == [17]


def test_vary_leaves_the_seed_alone():
    seed = copy.deepcopy(MULTI)
    vary(seed, 3)
    assert seed == MULTI


def test_vary_moves_seq_lens_and_conc_range():
    point = vary(SINGLE, 1)["scenarios"]["fixed-seq-len"][0]
    assert (point["isl"], point["osl"]) in SEQ_LENS
    space = point["search-space"][0]
    assert (space["conc-start"], space["conc-end"]) == CONC_RANGES[1]
    assert (
        vary(SINGLE, 6)["scenarios"]["fixed-seq-len"][0]["search-space"][0]["conc-end"]
        == CONC_RANGES[1][1] + 1
    )
    assert space["conc-start"] <= space["conc-end"]


def test_every_fourth_multinode_variant_adds_a_decode_worker_and_its_node_setting():
    for index in range(8):
        decode = vary(MULTI, index)["scenarios"]["agentic-coding"][0]["search-space"][0]["decode"]
        want = 2 if index % 4 == 3 else 1
        assert decode["num-worker"] == want
        assert decode["additional-settings"] == [f"DECODE_NODES={want}", "X=2"]


def test_single_node_variants_keep_their_shape():
    assert "decode" not in vary(SINGLE, 3)["scenarios"]["fixed-seq-len"][0]["search-space"][0]


def test_corpus_is_deterministic_sized_and_independent_of_seed_order():
    a = corpus({"a": SINGLE, "b": MULTI}, 100)
    b = corpus({"b": MULTI, "a": SINGLE}, 100)
    assert a == b
    assert list(a) == list(b)
    assert len(a) == 100


def test_corpus_entries_differ_beyond_their_keys():
    entries = corpus({"a": SINGLE, "b": MULTI}, 100).values()
    assert len({repr(e) for e in entries}) == 100


def test_corpus_needs_seeds():
    with pytest.raises(ValueError, match="no seed"):
        corpus({}, 10)
