"""Search-space points of a config -> named variants (e.g. agentic_p1x8_d1x8_conc8), one launch each."""

from __future__ import annotations

import dataclasses

from schemas.entries import points, splits_experts

from .benchmark import expand_concurrencies
from .target import Target

# Scenarios whose every concurrency runs in an allocation of its own: an agentic point measured after another
# one would start with its prefix cache and LMCache L1 warm (InferenceX's matrix: one job per agentic point).
ONE_POINT_PER_ALLOCATION = ("agentic-coding",)


def _size(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def _workers(w) -> str:
    """<workers>x<tp>, and ep<n> when experts are split (ep 1 is left unsaid); a worker running DP attention
    <workers>xdep<n> (split experts) or <workers>xdp<n>, as the field names them (DEP8)."""
    split = splits_experts(w)
    if w.dp_attn:
        return f"{w.num_worker}x{'dep' if split else 'dp'}{w.tp}"
    return f"{w.num_worker}x{w.tp}" + (f"ep{w.ep}" if split else "")


def variant_name(t_point, params: dict, entry) -> str:
    sp = t_point.space
    head = (
        "agentic"
        if t_point.scenario == "agentic-coding"
        else f"fsl{_size(params['isl'])}{_size(params['osl'])}"
    )
    if sp.prefill is not None and sp.decode is not None:
        name = f"{head}_p{_workers(sp.prefill)}_d{_workers(sp.decode)}"
    else:  # a single-node server
        name = f"{head}_tp{sp.tp}"
    if sp.spec_decoding != "none":
        name += f"_{sp.spec_decoding}"
    if sp.router is not None and sp.router.name != _usual_router(entry):
        name += f"_{sp.router.name}"
    return name


def _usual_router(entry) -> str | None:
    """The router a variant name leaves unsaid: the entry's, else (routers only per point, as InferenceX
    allows) the first point's."""
    if entry.router is not None:
        return entry.router.name
    first = next(points(entry, ()), None)
    return first.space.router.name if first is not None and first.space.router is not None else None


def targets(key: str, entry, *, runners, launch, issues: tuple, models=None, recipes=None) -> list[Target]:
    """Every variant of a config, uniquely named in search-space order. runners, launch, issues, models:
    what lint checked the entry against (node shape, launch profile, the known-issue registry whose
    workarounds and log signatures go into each Plan, the models file; None: the repository's). recipes:
    the InferenceX checkout its srt-slurm recipes are read from (None: none holds its master file)."""
    out: list[Target] = []
    seen: dict[str, int] = {}
    groups = entry.scenarios.fixed_seq_len or ()
    runner = launch.label_of(entry.runner)  # an alias: the profile it names
    hardware, profile = runners.shape(runner), launch.profiles[runner]
    assert hardware is not None  # lint's _runner_exists: a config reaching the planner has its node shape
    for pt in points(entry, (key,)):
        params = {}
        if pt.scenario == "fixed-seq-len":
            params = {"isl": groups[pt.group].isl, "osl": groups[pt.group].osl}
        name = variant_name(pt, params, entry)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}_{seen[name]}"
        t = Target(
            key, name, entry, pt, params, runner, hardware, profile, tuple(issues), models, None, recipes
        )
        if pt.scenario not in ONE_POINT_PER_ALLOCATION:
            out.append(t)
            continue
        concs = expand_concurrencies(pt.space)
        out += [dataclasses.replace(t, variant=f"{name}_conc{c}", concurrency=c) for c in concs]
    return out
