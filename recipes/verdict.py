"""One verdict: what `make render` would refuse in a config that passed every lint rule, as lint findings
at the config's file and line. `make lint` (strict) asks this for every valid entry, so a refusal of the
renderer is never first met at render time."""

from __future__ import annotations

from schemas.findings import Problem
from schemas.yamlio import Path_

from .build import build_plan
from .target import Unsupported
from .variants import targets


def refusals(key: str, entry, *, runners, launch, issues: tuple, models, recipes=None) -> list[Problem]:
    """Each variant's refusal, once per place and message (variants of one point share most). recipes: the
    InferenceX checkout the entry's srt-slurm recipes are read from."""
    out: dict[tuple[Path_, str], Problem] = {}
    found = targets(key, entry, runners=runners, launch=launch, issues=issues, models=models, recipes=recipes)
    for target in found:
        try:
            build_plan(target)
        except Unsupported as exc:
            where = exc.at or target.point.path
            out.setdefault((where, str(exc)), Problem(where, f"not renderable: {exc}"))
    return list(out.values())
