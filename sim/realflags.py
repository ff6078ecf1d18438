"""The real engines' option strings, read from descriptions of their pinned parsers (sim/parity/, written by
`python -m recipes.engines --dump-parsers sim/parity` and kept current by tests/engines): the simulators
resolve abbreviations exactly as the real parsers do (argparse's allow_abbrev: a unique prefix of a real
option stands for it, a prefix of several is an error), and tests/sim/test_parity.py holds their flags,
arities and choices to the real ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

PARITY = Path(__file__).resolve().parent / "parity"
# The parser each simulator is held to: the pinned vLLM; for SGLang the parser that judges the lines of
# the build it stands for (OpenBMB's fork: configs/engine-builds.yaml, sglang-minicpm-sala-fork).
PARSERS = {"vllm": "vllm-0.33.0.json", "sglang": "sglang-0.5.23.json"}


def dump_file(engine: str) -> Path:
    return PARITY / PARSERS[engine]


@cache
def description(engine: str) -> dict:
    return json.loads(dump_file(engine).read_text())


@cache
def vocabulary(engine: str, extra: tuple = ()) -> tuple:
    """Every long option string the real parser accepts (and `extra`: a build's declared flags)."""
    strings = [s for o in description(engine)["options"] for s in o["accepted"] if s.startswith("--")]
    return tuple(dict.fromkeys([*strings, *extra]))


def expand(argv: list[str], vocabulary: tuple, error: Callable[[str], None]) -> list[str]:
    """`argv` with each abbreviated long option written out; `error` (argparse's parser.error) for a
    prefix of several. Unknown options are left for the parser to refuse."""
    out = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if not flag.startswith("--") or flag == "--" or flag in vocabulary:
            out.append(arg)
            continue
        matches = [o for o in vocabulary if o.startswith(flag)]
        if len(matches) > 1:
            error(f"ambiguous option: {arg} could match {', '.join(matches)}")
        out.append(matches[0] + eq + value if matches else arg)
    return out
