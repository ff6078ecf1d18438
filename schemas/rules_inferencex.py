"""InferenceX's own rules for a master-config entry (its utils/matrix_logic/validation.py at 843c6254), one
named function each, yielding Problems. They run under every profile: `inferencex` is exactly these (plus
the refusal of this repository's extension keys), `strict` is these and rules_strict.py.

Facts carried over, not code: what each rule refuses is what InferenceX's validator refuses, said with the
key path and InferenceX's reason.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import settings as reg
from .config import Worker
from .context import Context
from .entries import server_worker
from .findings import Problem
from .yamlio import Path_

CLUSTER_PREFIX = "cluster:"  # agentic entries run on one exact fleet
COMPONENTS = ("router", "kv-p2p-transfer")  # declared at the top or per point, never both
_PER_WORKER = "set it per worker (prefill and decode)"
_AGENTIC_ONLY = "kv offloading is an agentic-coding setting"
# Keys InferenceX's point models do not take, by (scenario, multinode): a fixed-seq-len multinode point is
# its workers and the concurrencies, and a multinode agentic point may not set pp, dcp-size or pcp-size.
NOT_ON_POINT = {
    ("fixed-seq-len", True): {
        "ep": _PER_WORKER,
        "dp-attn": _PER_WORKER,
        "pp": _PER_WORKER,
        "dcp-size": _PER_WORKER,
        "pcp-size": _PER_WORKER,
        "kv-offloading": _AGENTIC_ONLY,
        "kv-offload-backend": _AGENTIC_ONLY,
    },
    ("fixed-seq-len", False): {"kv-offloading": _AGENTIC_ONLY, "kv-offload-backend": _AGENTIC_ONLY},
    ("agentic-coding", True): {"pp": _PER_WORKER, "dcp-size": _PER_WORKER, "pcp-size": _PER_WORKER},
    ("agentic-coding", False): {},
}


def _has_a_scenario(ctx: Context) -> Iterator[Problem]:
    """At least one scenario type (fixed-seq-len or agentic-coding)."""
    sc = ctx.entry.scenarios
    if not (sc.fixed_seq_len or sc.agentic_coding):
        yield Problem(ctx.path + ("scenarios",), "no scenario to run", "add fixed-seq-len or agentic-coding")


def _conc_list_xor_range(ctx: Context) -> Iterator[Problem]:
    """conc-list, or conc-start and conc-end with start <= end; not both forms."""
    for pt in ctx.points():
        sp = pt.space
        has_list, has_start, has_end = (
            sp.conc_list is not None,
            sp.conc_start is not None,
            sp.conc_end is not None,
        )
        if has_list and (has_start or has_end):
            yield Problem(pt.path, "both conc-list and conc-start/conc-end given", "use one of the two forms")
        elif not has_list and not (has_start and has_end):
            yield Problem(pt.path, "no concurrency given", "set conc-list, or both conc-start and conc-end")
        elif sp.conc_start is not None and sp.conc_end is not None and sp.conc_start > sp.conc_end:
            yield Problem(
                pt.path + ("conc-start",),
                f"conc-start {sp.conc_start} exceeds conc-end {sp.conc_end}",
                "conc-start <= conc-end",
            )


def _topology_matches_multinode(ctx: Context) -> Iterator[Problem]:
    """A single-node point is one server of tp GPUs; a disaggregated multinode point is prefill and decode
    workers; an aggregated multinode point (disagg: false) is one worker block on num-nodes nodes. Never
    mixed, and a multinode point has no settings of its own."""
    e = ctx.entry
    for pt in ctx.points():
        sp = pt.space
        roles = [r for r in reg.ROLES if getattr(sp, r) is not None]
        aggregate = [k for k, v in (("worker", sp.worker), ("num-nodes", sp.num_nodes)) if v is not None]
        if not e.multinode:
            for key in roles + aggregate:
                yield Problem(pt.path + (key,), f"{key} on a single-node point", "a single-node point is tp")
            if sp.tp is None:
                yield Problem(pt.path, "single-node entry without tp", "set tp (GPUs per engine)")
        elif e.disagg:
            if len(roles) < 2:
                missing = " and ".join(r for r in reg.ROLES if r not in roles)
                yield Problem(pt.path, f"multinode entry without {missing}", "give prefill and decode blocks")
            for key in aggregate:
                yield Problem(
                    pt.path + (key,),
                    f"{key} on a disaggregated point (disagg: true)",
                    "prefill and decode; worker and num-nodes are an aggregated point's (disagg: false)",
                )
        else:
            for key in roles:
                yield Problem(
                    pt.path + (key,),
                    f"{key} on an aggregated multinode point (disagg: false)",
                    "one worker block and num-nodes, or disagg: true",
                )
            if sp.worker is None:
                yield Problem(
                    pt.path,
                    "aggregated multinode point (disagg: false) without worker",
                    "worker: {num-worker, tp, ep, dp-attn}",
                )
            if sp.num_nodes is None:
                yield Problem(
                    pt.path,
                    "aggregated multinode point (disagg: false) without num-nodes",
                    "num-nodes: <nodes>",
                )
        if sp.tp is not None and (roles or sp.worker is not None):
            yield Problem(
                pt.path + ("tp",),
                "a point is one server (tp) or prefill and decode workers, not both",
                "multinode: prefill and decode; single-node: tp",
            )
        if e.multinode and sp.additional_settings:
            yield Problem(
                pt.path + ("additional-settings",),
                "a multinode point has no server of its own to apply these to",
                "put them under prefill or decode additional-settings",
            )


def _point_keys_fit_its_kind(ctx: Context) -> Iterator[Problem]:
    """Keys a point may carry depend on its scenario and topology: a fixed-seq-len multinode point takes no
    ep, dp-attn, pp, dcp-size or pcp-size (its workers do), a multinode agentic point no pp, dcp-size or
    pcp-size, and only agentic points take kv-offloading."""
    for pt in ctx.points():
        refused = NOT_ON_POINT[(pt.scenario, ctx.entry.multinode)]
        for name in sorted(pt.space.model_fields_set):
            key = name.replace("_", "-")
            if key in refused:
                kind = f"{'multinode' if ctx.entry.multinode else 'single-node'} {pt.scenario}"
                yield Problem(pt.path + (key,), f"{key} is not a key of a {kind} point", refused[key])


def _workers_declare_ep_and_dp_attn(ctx: Context) -> Iterator[Problem]:
    """Every prefill and decode worker says its ep and dp-attn (InferenceX requires both)."""
    engines: list[tuple[Path_, str, Worker]] = [
        (path, role, worker) for path, role, worker, _ in ctx.workers() if role in reg.ROLES
    ]
    engines += [
        (pt.path + ("worker",), "aggregate", pt.space.worker) for pt in ctx.points() if pt.space.worker
    ]
    for path, role, worker in engines:
        missing = [k for k, v in (("ep", worker.ep), ("dp-attn", worker.dp_attn)) if v is None]
        if missing:
            yield Problem(
                path,
                f"{role} worker without {' and '.join(missing)}; InferenceX requires ep and dp-attn on every "
                "worker",
                "ep: 1 and dp-attn: false for a plain tensor-parallel worker",
            )


def _dcp_divides_tp(ctx: Context) -> Iterator[Problem]:
    """dcp-size divides tp, on every worker and single-node server."""
    for pt in ctx.points():
        sp = pt.space
        engines = [(pt.path + (r,), getattr(sp, r)) for r in reg.ROLES if getattr(sp, r) is not None]
        if sp.tp is not None:
            engines.append((pt.path, server_worker(sp)))
        for path, w in engines:
            if w.dcp_size is not None and w.tp % w.dcp_size:
                yield Problem(
                    path + ("dcp-size",),
                    f"dcp-size {w.dcp_size} does not divide tp {w.tp}",
                    "a divisor of tp (decode context parallelism splits the tp ranks)",
                )


def _hardware_on_both_roles_or_neither(ctx: Context) -> Iterator[Problem]:
    """A worker's hardware is given for prefill and decode together, or for neither."""
    for pt in ctx.points():
        p, d = pt.space.prefill, pt.space.decode
        if p is not None and d is not None and bool(p.hardware) != bool(d.hardware):
            only = "prefill" if p.hardware else "decode"
            yield Problem(
                pt.path + (only, "hardware"),
                f"hardware given for {only} only",
                "set hardware on both prefill and decode, or on neither",
            )


def _kv_offloading_consistent(ctx: Context) -> Iterator[Problem]:
    """A kv-offload-backend only with kv-offloading: dram, dram only with a backend, and dram needs the
    scenario's dram-utilization."""
    for pt in ctx.points():
        sp = pt.space
        if sp.kv_offloading == "dram" and sp.kv_offload_backend is None:
            yield Problem(
                pt.path,
                "kv-offloading: dram without kv-offload-backend",
                "kv-offload-backend: {name: lmcache, version: ...}",
            )
        if sp.kv_offload_backend is not None and sp.kv_offloading != "dram":
            yield Problem(
                pt.path + ("kv-offload-backend",),
                "kv-offload-backend given but kv-offloading is not dram",
                "kv-offloading: dram, or drop the backend",
            )
        if sp.kv_offloading == "dram" and pt.scenario == "agentic-coding" and pt.dram_utilization is None:
            yield Problem(
                pt.path[:-2],
                "kv-offloading: dram needs dram-utilization to size the DRAM tier",
                "dram-utilization: 0.8",
            )


def _single_node_agentic_declares_offloading(ctx: Context) -> Iterator[Problem]:
    """A single-node agentic point says its kv-offloading (none or dram)."""
    if ctx.entry.multinode:
        return
    for pt in ctx.points():
        if pt.scenario == "agentic-coding" and pt.space.kv_offloading is None:
            yield Problem(
                pt.path, "single-node agentic point without kv-offloading", "kv-offloading: none or dram"
            )


def _disagg_needs_a_transfer(ctx: Context) -> Iterator[Problem]:
    """disagg: true names its kv-p2p-transfer, at the top or in every search-space point."""
    e = ctx.entry
    if not e.disagg or e.kv_p2p_transfer is not None:
        return
    missing = [pt for pt in ctx.points() if pt.space.kv_p2p_transfer is None]
    if missing or not list(ctx.points()):
        yield Problem(
            ctx.path,
            "disagg entry without kv-p2p-transfer",
            "kv-p2p-transfer: mooncake at the top, or in every search-space point",
        )


def _disagg_only_multinode(ctx: Context) -> Iterator[Problem]:
    """disagg: true only on a multinode entry (prefill and decode run on separate nodes)."""
    if ctx.entry.disagg and not ctx.entry.multinode:
        yield Problem(
            ctx.path + ("disagg",),
            "disagg: true on a single-node entry",
            "multinode: true, or disagg: false",
        )


def _transfer_only_multinode(ctx: Context) -> Iterator[Problem]:
    """kv-p2p-transfer only on a multinode entry, at the top or in its points."""
    if ctx.entry.multinode:
        return
    if ctx.entry.kv_p2p_transfer is not None:
        yield Problem(ctx.path + ("kv-p2p-transfer",), "kv-p2p-transfer on a single-node entry", "drop it")
    for pt in ctx.points():
        if pt.space.kv_p2p_transfer is not None:
            yield Problem(pt.path + ("kv-p2p-transfer",), "kv-p2p-transfer on a single-node entry", "drop it")


def _components_declared_once(ctx: Context) -> Iterator[Problem]:
    """router and kv-p2p-transfer are declared at the top or in search-space points, not both."""
    for key in COMPONENTS:
        attr = key.replace("-", "_")
        if getattr(ctx.entry, attr) is None:
            continue
        if any(getattr(pt.space, attr) is not None for pt in ctx.points()):
            yield Problem(
                ctx.path + (key,),
                f"{key} declared at the top and in search-space points",
                "declare it once: at the top for every point, or in each point",
            )


def _agentic_runner_is_cluster(ctx: Context) -> Iterator[Problem]:
    """An agentic entry runs on a 'cluster:<name>' runner, so every point runs on one exact fleet."""
    runner = ctx.entry.runner
    if ctx.entry.scenarios.agentic_coding and not runner.startswith(CLUSTER_PREFIX):
        yield Problem(
            ctx.path + ("runner",),
            f"agentic entry on runner {runner!r}: agentic points run on one exact fleet, a "
            f"'{CLUSTER_PREFIX}<name>' runner",
            f"runner: {CLUSTER_PREFIX}{runner}",
        )


INFERENCEX = (
    _has_a_scenario,
    _conc_list_xor_range,
    _topology_matches_multinode,
    _point_keys_fit_its_kind,
    _workers_declare_ep_and_dp_attn,
    _dcp_divides_tp,
    _hardware_on_both_roles_or_neither,
    _kv_offloading_consistent,
    _single_node_agentic_declares_offloading,
    _disagg_needs_a_transfer,
    _disagg_only_multinode,
    _transfer_only_multinode,
    _components_declared_once,
    _agentic_runner_is_cluster,
)


# ---------------------------------------------------------------- InferenceX's newer validator only

NEWEST = (
    "07db303e"  # the newest InferenceX validator these rules are held to (tests run it on the same files)
)
# Settings that once chose a point's srt-slurm recipe from a worker's additional-settings -> the point key
# that does now.
RECIPE_SETTINGS = {
    "CONFIG_FILE": "srt-recipe",
    "SRT_RECIPE": "srt-recipe",
    "EVAL_CONFIG_FILE": "eval-srt-recipe",
    "EVAL_SRT_RECIPE": "eval-srt-recipe",
}


def _recipe_chosen_by_its_key(ctx: Context) -> Iterator[Problem]:
    """The srt-slurm recipe a point runs is its srt-recipe (its eval's, eval-srt-recipe): InferenceX's newer
    validator refuses the older CONFIG_FILE=<recipe> in a worker's additional-settings."""
    for pt in ctx.points():
        for role in (*reg.ROLES, "worker"):
            worker = getattr(pt.space, role)
            for i, item in enumerate(worker.additional_settings if worker else ()):
                name, _, value = item.partition("=")
                if name in RECIPE_SETTINGS:
                    key = RECIPE_SETTINGS[name]
                    yield Problem(
                        pt.path + (role, "additional-settings", i),
                        f"{name} in additional-settings: InferenceX's validator since {NEWEST} takes a "
                        f"point's recipe only from its {key}",
                        f"{key}: {value} on the point, without this setting",
                    )


NEWER = (_recipe_chosen_by_its_key,)


# ---------------------------------------------------------------- InferenceX's older validator only

OLDER = "ba3e5976"  # the validator before NEWEST: its multinode points chose their recipe by CONFIG_FILE


def _keys_the_older_validator_lacks(ctx: Context) -> Iterator[Problem]:
    """InferenceX's older validator has no eval-srt-recipe, no srt-recipe on a multinode fixed-seq-len point
    (its recipe is a worker's CONFIG_FILE; an agentic point's may be either) and no require-power on a
    single-node entry."""
    said = f"InferenceX's validator before {NEWEST} ({OLDER}) refuses the key"
    fix = "lint under inferencex, its newer validator, which takes it"
    for pt in ctx.points():
        if pt.space.eval_srt_recipe is not None:
            yield Problem(pt.path + ("eval-srt-recipe",), f"eval-srt-recipe: {said}", fix)
        if ctx.entry.multinode and pt.scenario == "fixed-seq-len" and pt.space.srt_recipe is not None:
            yield Problem(
                pt.path + ("srt-recipe",),
                f"srt-recipe on a multinode fixed-seq-len point: {said}",
                f"CONFIG_FILE={pt.space.srt_recipe} in the prefill's additional-settings; or {fix}",
            )
    if not ctx.entry.multinode:
        for i, group in enumerate(ctx.entry.scenarios.fixed_seq_len or ()):
            if "require_power" in group.model_fields_set:
                where = ctx.path + ("scenarios", "fixed-seq-len", i, "require-power")
                yield Problem(where, f"require-power on a single-node entry: {said}", fix)


OLDER_ONLY = (_keys_the_older_validator_lacks,)


# ---------------------------------------------------------------- this repository's extension keys


def _extension_keys_absent(ctx: Context) -> Iterator[Problem]:
    """Under the inferencex profile only: this repository's two extension keys (known-issue-workarounds on
    an entry, additional-settings on a single-node point), which InferenceX's validator refuses."""
    said = "is this repository's extension; InferenceX's validator refuses the key"
    how = (
        "lint it under strict; without it the entry is what InferenceX's tools read "
        "(docs/guides/validation.md)"
    )
    if ctx.entry.known_issue_workarounds:
        yield Problem(ctx.path + ("known-issue-workarounds",), f"known-issue-workarounds {said}", how)
    if ctx.entry.multinode:
        return
    for pt in ctx.points():
        if pt.space.additional_settings:
            where = pt.path + ("additional-settings",)
            yield Problem(where, f"additional-settings on a single-node point {said}", how)


EXTENSIONS = (_extension_keys_absent,)
