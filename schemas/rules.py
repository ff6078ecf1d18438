"""The lint profiles: which named rules run over a structurally valid entry, and running them.

- `inferencex`: InferenceX's own rules (rules_inferencex.INFERENCEX), and the refusal of this repository's
  two extension keys (EXTENSIONS), so its verdict on an entry is InferenceX's.
- `strict` (this repository's configs): InferenceX's rules and this repository's (rules_strict.STRICT). It
  accepts the two extension keys: the one deliberate difference from InferenceX (docs/guides/validation.md).
"""

from __future__ import annotations

from .context import Context
from .findings import Problem
from .rules_inferencex import EXTENSIONS, INFERENCEX
from .rules_local import LOCAL
from .rules_strict import STRICT

__all__ = ["EXTENSIONS", "INFERENCEX", "LOCAL", "PROFILES", "RULES", "STRICT", "Context", "check_entry"]

PROFILES = {"inferencex": INFERENCEX + EXTENSIONS, "strict": INFERENCEX + STRICT + LOCAL}
RULES = {rule.__name__: rule for rule in INFERENCEX + EXTENSIONS + STRICT + LOCAL}  # every rule, by its name


def check_entry(ctx: Context, profile: str) -> list[Problem]:
    # Entry-level rules that walk every search-space point repeat one problem per point: report it once.
    return list(dict.fromkeys(p for rule in PROFILES[profile] for p in rule(ctx)))
