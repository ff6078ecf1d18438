"""A deterministic corpus of distinct master entries made from seed entries (`make bench-corpus` lints and
renders it, and runs InferenceX's validator on it): pure functions, no file or clock read here."""

from __future__ import annotations

import copy
import re

# The sequence-length pairs InferenceX's sweep generator knows (1k1k, 8k1k): a fixed-seq-len entry gets one.
SEQ_LENS = ((1024, 1024), (8192, 1024))
# conc-start/conc-end ranges an entry's sweep may take (start <= end, powers of two as the seeds use).
CONC_RANGES = ((1, 64), (2, 128), (4, 256), (8, 512), (4, 64))
# Settings that name a side's node count: kept equal to that side's num-worker when it changes.
NODE_SETTING = {"prefill": "PREFILL_NODES", "decode": "DECODE_NODES"}


def variant_key(seed_key: str, index: int) -> str:
    """The corpus key of variant `index` of a seed: distinct per index, still led by the seed's name."""
    return f"{seed_key}-c{index:04d}"


def shifted_concs(concs: list[int], index: int) -> list[int]:
    """A conc-list of the same values doubled `index % 3` times plus `index // 3`, one value left out when
    there are several (which one turns with index): a different list for every index, all positive."""
    factor, offset = 2 ** (index % 3), index // 3
    values = [c * factor + offset for c in concs]
    if len(values) > 1:
        del values[index % len(values)]
    return values


def _set_setting(settings: list[str], name: str, value: int) -> list[str]:
    pattern = re.compile(rf"^{name}=")
    return [f"{name}={value}" if pattern.match(s) else s for s in settings]


def _vary_point(point: dict, index: int, workers: bool) -> None:
    """One search-space point: its concurrencies, and (workers) one more decode worker."""
    if "conc-list" in point:
        point["conc-list"] = shifted_concs(point["conc-list"], index)
    elif "conc-start" in point:
        start, end = CONC_RANGES[index % len(CONC_RANGES)]
        point["conc-start"], point["conc-end"] = start, end + index // len(CONC_RANGES)
    decode = point.get("decode")
    if workers and isinstance(decode, dict):
        decode["num-worker"] += 1
        if "additional-settings" in decode:
            decode["additional-settings"] = _set_setting(
                decode["additional-settings"], NODE_SETTING["decode"], decode["num-worker"]
            )


def vary(seed: dict, index: int) -> dict:
    """Variant `index` of a seed entry (the seed is left as it is): concurrencies, sequence lengths and, on
    every fourth variant of a multinode seed, the decode side's worker count."""
    entry = copy.deepcopy(seed)
    workers = bool(entry.get("multinode")) and index % 4 == 3
    for kind, scenarios in entry.get("scenarios", {}).items():
        for n, scenario in enumerate(scenarios):
            if kind == "fixed-seq-len":
                scenario["isl"], scenario["osl"] = SEQ_LENS[(index + n) % len(SEQ_LENS)]
            for point in scenario.get("search-space", []):
                _vary_point(point, index, workers)
    return entry


def corpus(seeds: dict[str, dict], size: int) -> dict[str, dict]:
    """`size` entries, the seeds taken in turn (sorted by key, so the corpus does not depend on the order
    they were read in); the same seeds and size give the same corpus."""
    if not seeds:
        raise ValueError("no seed entries to make a corpus from")
    keys = sorted(seeds)
    out: dict[str, dict] = {}
    for index in range(size):
        seed_key = keys[index % len(keys)]
        round_ = index // len(keys)
        out[variant_key(seed_key, round_)] = vary(seeds[seed_key], round_)
    return out
