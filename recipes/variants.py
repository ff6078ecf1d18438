"""Search-space points of a config -> named variants (e.g. agentic_p1x8_d1x8), one launch each."""

from __future__ import annotations

from schemas.rules import Context, points

from .target import Target


def _size(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def variant_name(t_point, params: dict, entry) -> str:
    sp = t_point.space
    head = (
        "agentic"
        if t_point.scenario == "agentic-coding"
        else f"fsl{_size(params['isl'])}{_size(params['osl'])}"
    )
    if sp.prefill is not None and sp.decode is not None:
        name = f"{head}_p{sp.prefill.num_worker}x{sp.prefill.tp}_d{sp.decode.num_worker}x{sp.decode.tp}"
    else:  # a single-node server
        name = f"{head}_tp{sp.tp}"
    if sp.spec_decoding != "none":
        name += f"_{sp.spec_decoding}"
    if sp.router is not None and (entry.router is None or sp.router.name != entry.router.name):
        name += f"_{sp.router.name}"
    return name


def targets(key: str, entry, runners, issues: tuple) -> list[Target]:
    """Every variant of a config, uniquely named in search-space order. issues: the known-issue registry
    lint checked the entry against (its workarounds and log signatures go into each Plan)."""
    out, seen = [], {}
    groups = {"fixed-seq-len": entry.scenarios.fixed_seq_len or (), "agentic-coding": ()}
    for pt in points(Context(key, entry, runners)):
        params = {}
        if pt.scenario == "fixed-seq-len":
            group = groups["fixed-seq-len"][pt.path[3]]
            params = {"isl": group.isl, "osl": group.osl}
        name = variant_name(pt, params, entry)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}_{seen[name]}"
        hardware = runners.hardware[entry.runner]
        out.append(Target(key, name, entry, pt, params, entry.runner, hardware, tuple(issues)))
    return out
