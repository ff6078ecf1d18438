"""The lint profiles: which named rules run over a structurally valid entry, and running them.

- `inferencex`: InferenceX's own rules as its newest validator has them (rules_inferencex.INFERENCEX and
  NEWER), and the refusal of this repository's two extension keys (EXTENSIONS), so its verdict on an entry is
  InferenceX's.
- `inferencex-legacy`: InferenceX's older validators (OLDER_ONLY), which took a multinode point's srt-slurm
  recipe only as a worker's CONFIG_FILE setting, and a runners file in either form: `hardware:` (to the
  August snapshot, 843c6254) or `clusters:` (after it).
- `strict` (this repository's configs): InferenceX's rules and this repository's (rules_strict.STRICT). It
  accepts the two extension keys: the one deliberate difference from InferenceX (docs/guides/validation.md).
"""

from __future__ import annotations

from .context import Context
from .findings import Problem
from .rules_inferencex import EXTENSIONS, INFERENCEX, NEWER, OLDER_ONLY
from .rules_local import LOCAL
from .rules_strict import STRICT

__all__ = [
    "EXTENSIONS",
    "INFERENCEX",
    "LOCAL",
    "NEWER",
    "OLDER_ONLY",
    "PROFILES",
    "RULES",
    "STRICT",
    "Context",
    "check_entry",
]

PROFILES = {
    "inferencex": INFERENCEX + NEWER + EXTENSIONS,
    "inferencex-legacy": INFERENCEX + OLDER_ONLY + EXTENSIONS,
    "strict": INFERENCEX + STRICT + LOCAL,
}
RULES = {
    rule.__name__: rule for rule in INFERENCEX + NEWER + OLDER_ONLY + EXTENSIONS + STRICT + LOCAL
}  # every rule, by name


def check_entry(ctx: Context, profile: str) -> list[Problem]:
    # Entry-level rules that walk every search-space point repeat one problem per point: report it once.
    return list(dict.fromkeys(p for rule in PROFILES[profile] for p in rule(ctx)))
