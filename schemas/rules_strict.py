"""This repository's rules over a structurally valid entry, on top of InferenceX's (rules_inferencex.py):
what InferenceX misses (docs/upstream-facts.md#inferencex). One named function per rule, each yielding
Problems; they run under the strict profile.
"""

from __future__ import annotations

from collections.abc import Iterator

from scripts import PYTHON_FLOOR

from . import engine_builds as eb
from . import known_issues as ki
from . import settings as reg
from .config import ENGINE_BACKENDS, Router, Worker
from .context import Context
from .entries import (
    Point,
    dram_budget,
    kv_transfer,
    offloading_worker,
    parsed_settings,
    recipe_pointers,
    role_gpus,
    role_nodes,
)
from .findings import Problem, did_you_mean, format_path, one_of
from .images import (
    VENDOR_WORDS,
    engine_version,
    image_problems,
    image_vendor,
    vendor_counterpart,
    vendor_families,
)
from .kv_path import kv_connectors
from .models import NoRecipe, model_facts
from .routers import IMAGE_ROUTERS, PD_PROXY, PD_PROXY_VERSION, ROUTERS
from .runners import Hardware
from .versions import VERSION_HINT, is_real_version
from .yamlio import Path_

KV_TRANSFERS = ("mooncake", "nixl", "mori", "moriio")
MOONCAKE_MIN_VLLM = (0, 16)  # the bootstrap + transfer_id contract (docs/upstream-facts.md#mooncake-pd)


def _image_public_and_pinned(ctx: Context) -> Iterator[Problem]:
    for problem, fix in image_problems(ctx.entry.image):
        yield Problem(ctx.path + ("image",), problem, fix)


def _image_fits_gpu_vendor(ctx: Context) -> Iterator[Problem]:
    """The image is built for the GPUs of the runner's gpu-vendor (configs/launch.yaml): a CUDA image on an
    AMD runner finds no GPU and fails at engine start, after the allocation's start-up. Its vendor is read
    from its name (schemas/images.py IMAGE_VENDORS); an image whose name does not say is not judged."""
    profile = ctx.launch.profiles.get(ctx.runner) if ctx.launch else None
    if profile is None or profile.engine_build != "image" or profile.gpu_vendor == "none":
        return  # a simulator or CPU runner runs no image's engines: the image is only recorded
    image, wanted = ctx.entry.image, profile.gpu_vendor
    found = image_vendor(image)
    if found is None or found == wanted:
        return
    build = eb.build_of(image, ctx.builds or ())
    counterpart = vendor_counterpart(image, wanted, build.images if build else ())
    families = f"images for {VENDOR_WORDS[wanted]}: {vendor_families(wanted)}"
    runner = ctx.entry.runner if ctx.entry.runner == ctx.runner else f"{ctx.entry.runner} ({ctx.runner})"
    yield Problem(
        ctx.path + ("image",),
        f"image {image} is built for {VENDOR_WORDS[found]}, and runner {runner} has gpu-vendor {wanted} "
        "(configs/launch.yaml): its engines would find no GPU they can use",
        f"use {counterpart}; {families}" if counterpart else f"use one of the {families}",
    )


def _settings_known_and_typed(ctx: Context) -> Iterator[Problem]:
    for path, role, worker, _ in ctx.workers():
        seen: dict[str, int] = {}
        for i, item in enumerate(worker.additional_settings):
            where = path + ("additional-settings", i)
            try:
                key, raw = reg.split_setting(item)
                setting = reg.lookup(key)
            except reg.SettingError as exc:
                yield Problem(where, str(exc))
                continue
            try:
                setting.parse(raw)
            except reg.SettingError as exc:
                yield Problem(where, f"{key}: {exc}", setting.help)
                continue
            if role not in setting.roles:
                yield Problem(where, f"{key} is not a {role} setting", reg.role_note(setting))
            if key in seen:
                yield Problem(where, f"{key} is set twice", f"first at additional-settings[{seen[key]}]")
            seen.setdefault(key, i)


def _settings_fit_engine(ctx: Context) -> Iterator[Problem]:
    """A setting means something to one engine only (GPU_MEMORY_UTILIZATION is vLLM's, DISABLE_CUDA_GRAPH
    SGLang's): given to the other, it would be dropped or refused at launch, so lint refuses it."""
    engine = reg.engine_of(ctx.entry.framework)
    if engine is None:
        return
    for path, _, worker, _ in ctx.workers():
        for i, item in enumerate(worker.additional_settings):
            try:
                key, _raw = reg.split_setting(item)
                setting = reg.lookup(key)
            except reg.SettingError:
                continue  # reported by _settings_known_and_typed
            if engine not in setting.engines:
                yield Problem(
                    path + ("additional-settings", i),
                    f"{key} is a {'/'.join(setting.engines)} setting; framework {ctx.entry.framework} runs "
                    f"{engine}",
                    f"{engine} settings: {', '.join(_engine_settings(engine))}",
                )


def _engine_settings(engine: str) -> list[str]:
    return [n for n, s in reg.REGISTRY.items() if engine in s.engines and s.kind != "derived"]


def _shared_settings_agree(ctx: Context) -> Iterator[Problem]:
    for pt in ctx.points():
        if pt.space.prefill is None or pt.space.decode is None:
            continue
        values = {r: ctx.settings(r, getattr(pt.space, r), pt) for r in reg.ROLES}
        for name, setting in reg.REGISTRY.items():
            if setting.shared and values["prefill"].get(name) != values["decode"].get(name):
                yield Problem(
                    pt.path,
                    f"{name} differs between prefill ({values['prefill'][name]}) and decode "
                    f"({values['decode'][name]})",
                    "both roles must use the same value",
                )


def _routers(ctx: Context) -> Iterator[tuple[Path_, Router]]:
    if ctx.entry.router is not None:
        yield ctx.path + ("router",), ctx.entry.router
    for pt in ctx.points():
        if pt.space.router is not None:
            yield pt.path + ("router",), pt.space.router


def _router_known_and_versioned(ctx: Context) -> Iterator[Problem]:
    for path, router in _routers(ctx):
        if router.name not in ROUTERS:
            hint = did_you_mean(router.name, ROUTERS) or one_of(ROUTERS)
            yield Problem(path + ("name",), f"unknown router {router.name!r}", hint)
        if router.name == PD_PROXY and router.version != PD_PROXY_VERSION:
            yield Problem(
                path + ("version",),
                f"{PD_PROXY} is this repository's proxy, version {PD_PROXY_VERSION}",
                f'version: "{PD_PROXY_VERSION}"',
            )
        elif not is_real_version(router.version):
            yield Problem(
                path + ("version",),
                f"router version {router.version!r} is not a release or commit",
                VERSION_HINT,
            )


def _router_fits_topology(ctx: Context) -> Iterator[Problem]:
    entry_router = ctx.entry.router
    for pt in ctx.points():
        router = pt.space.router or entry_router
        spec = ROUTERS.get(router.name) if router else None
        if router is None or spec is None or not ctx.entry.multinode:
            continue
        for role, limit in (("prefill", spec.max_prefill), ("decode", spec.max_decode)):
            worker = getattr(pt.space, role)
            if limit is not None and worker is not None and worker.num_worker > limit:
                yield Problem(
                    pt.path + (role, "num-worker"),
                    f"router {router.name} serves at most {limit} {role} worker(s), got {worker.num_worker}",
                    spec.note or "use pd-proxy or vllm-router",
                )
        if ctx.entry.framework not in spec.frameworks:
            yield Problem(
                ctx.path + ("framework",),
                f"router {router.name} cannot front {ctx.entry.framework}",
                one_of(spec.frameworks),
            )
        transfer = kv_transfer(ctx.entry, pt.space)
        if transfer and transfer not in spec.transfers:
            where = pt.path if pt.space.kv_p2p_transfer else ctx.path
            yield Problem(
                where + ("kv-p2p-transfer",),
                f"router {router.name} does not speak the {transfer} PD contract",
                one_of(spec.transfers),
            )


def _transfers(ctx: Context) -> Iterator[tuple[Path_, str]]:
    if ctx.entry.kv_p2p_transfer is not None:
        yield ctx.path + ("kv-p2p-transfer",), ctx.entry.kv_p2p_transfer
    for pt in ctx.points():
        if pt.space.kv_p2p_transfer is not None:
            yield pt.path + ("kv-p2p-transfer",), pt.space.kv_p2p_transfer


def _disagg_is_complete(ctx: Context) -> Iterator[Problem]:
    """A disaggregated entry names a known KV transfer and a router for every point."""
    for path, transfer in _transfers(ctx):
        if transfer not in KV_TRANSFERS:
            yield Problem(
                path,
                f"unknown kv-p2p-transfer {transfer!r}",
                did_you_mean(transfer, KV_TRANSFERS) or one_of(KV_TRANSFERS),
            )
    e = ctx.entry
    unrouted = e.router is None and any(pt.space.router is None for pt in ctx.points())
    if e.disagg and unrouted and e.framework not in IMAGE_ROUTERS:  # else its image's own router runs
        yield Problem(ctx.path, "disagg entry without router", 'router: {name: pd-proxy, version: "0.1.0"}')


def _prefill_workers_serve(ctx: Context) -> Iterator[Problem]:
    """A multinode point has prefill workers: a decode num-worker of 0 is InferenceX's aggregated run (the
    prefill workers serve both), a prefill num-worker of 0 serves nothing."""
    for pt in ctx.points():
        p = pt.space.prefill
        if ctx.entry.multinode and p is not None and p.num_worker == 0:
            yield Problem(
                pt.path + ("prefill", "num-worker"),
                "no prefill worker: nothing would serve the requests",
                "prefill num-worker >= 1 (an aggregated run writes decode num-worker: 0)",
            )


def _offload_backend_versioned(ctx: Context) -> Iterator[Problem]:
    for pt in ctx.points():
        backend = pt.space.kv_offload_backend
        if backend is None:
            continue
        where = pt.path + ("kv-offload-backend",)
        if backend.name in ENGINE_BACKENDS:
            continue  # the engine's own: its version is the image's
        if backend.version is None:
            yield Problem(where, f"{backend.name} backend without a version", f"version: {VERSION_HINT}")
        elif not is_real_version(backend.version):
            yield Problem(
                where + ("version",),
                f"backend version {backend.version!r} is not a release or commit",
                VERSION_HINT,
            )


def _runner_exists(ctx: Context) -> Iterator[Problem]:
    if ctx.runners is None:
        return
    known = set(ctx.runners.labels) | set(ctx.runners.hardware)
    labels = [(ctx.path + ("runner",), ctx.entry.runner)]
    labels += [(path + ("hardware",), w.hardware) for path, _, w, _ in ctx.workers() if w.hardware]
    for path, label in labels:
        if ctx.label(label) not in known:
            yield Problem(path, f"runner {label!r} is not in runners.yaml", did_you_mean(label, known))
        elif ctx.hardware(label) is None:
            yield Problem(
                path,
                f"runner {label!r} has no node shape in runners.yaml",
                "add hardware.<label> (for a cluster:<id> label: its clusters.<id> record) with "
                "gpus-per-node (and available-cpu-dram-mib where KV offloads to DRAM)",
            )


def _runner_launchable(ctx: Context) -> Iterator[Problem]:
    """A runner a config uses needs its launch facts (configs/launch.yaml): nothing else says how a job
    starts there."""
    label = ctx.runner
    if ctx.launch is None or ctx.hardware(label) is None or label in ctx.launch.profiles:
        return
    yield Problem(
        ctx.path + ("runner",),
        f"runner {label!r} has no launch profile in configs/launch.yaml",
        did_you_mean(label, ctx.launch.profiles)
        or "add profiles.<label> with gpu-vendor, partition, container-runtime and model-root",
    )


def _node_tools_run_on_the_runners_python(ctx: Context) -> Iterator[Problem]:
    """The runner's image Python (launch profile node-setup python) runs the node tools (scripts/*.py): it
    is scripts.PYTHON_FLOOR or newer, the oldest they support (`make check` holds them to it)."""
    profile = ctx.launch.profiles.get(ctx.runner) if ctx.launch else None
    if profile is None or profile.node_setup is None:
        return
    python = profile.node_setup.python
    if _version(python) < _version(PYTHON_FLOOR):
        yield Problem(
            ctx.path + ("runner",),
            f"the image Python {python} of runner {ctx.runner!r} (configs/launch.yaml node-setup python) is "
            f"older than the node tools support ({PYTHON_FLOOR})",
            f"an image with Python {PYTHON_FLOOR} or newer",
        )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _topology_fits_runner(ctx: Context) -> Iterator[Problem]:
    for path, role, worker, _ in ctx.workers():
        hw = ctx.hardware(worker.hardware or ctx.entry.runner)
        if hw is None:
            continue
        if role == reg.SERVER:
            if role_gpus(worker) > hw.gpus_per_node:
                yield Problem(
                    path + ("tp",),
                    f"a single-node server of {role_gpus(worker)} GPUs (tp x pp x pcp-size) exceeds the "
                    f"{hw.gpus_per_node} GPUs of a node",
                    f"tp x pp x pcp-size <= {hw.gpus_per_node}, or a multinode entry",
                )
            continue
        per_worker = role_gpus(worker)
        if per_worker > hw.gpus_per_node and per_worker % hw.gpus_per_node:
            yield Problem(
                path,
                f"{role}: a worker of {per_worker} GPUs does not fill whole {hw.gpus_per_node}-GPU nodes",
                "a worker spans whole nodes (tp x pp x pcp-size a multiple of gpus-per-node) or fits in one",
            )
        nodes = role_nodes(worker, hw.gpus_per_node)
        stated = parsed_settings(worker).get(f"{role.upper()}_NODES")
        if stated is not None and stated != nodes:
            yield Problem(
                path + ("additional-settings",),
                f"{role.upper()}_NODES={stated}, but {worker.num_worker} worker(s) of {per_worker} GPUs take "
                f"{nodes} {hw.gpus_per_node}-GPU node(s)",
                f"{role.upper()}_NODES={nodes}, or leave it out (it is derived)",
            )
        if worker.ep is not None and worker.ep > per_worker:
            yield Problem(
                path + ("ep",),
                f"ep {worker.ep} exceeds the {per_worker} GPUs of one {role} worker",
                f"ep <= tp x pp x pcp-size = {per_worker}",
            )
        label = ctx.label(worker.hardware or ctx.entry.runner)
        nodes_labels = ctx.runners.labels.get(label) if ctx.runners else None
        if nodes_labels is not None and nodes > len(nodes_labels):
            yield Problem(
                path,
                f"{role} needs {nodes} nodes, the runner lists {len(nodes_labels)}",
                "fewer workers or a larger runner",
            )


def _offloads(ctx: Context) -> Iterator[tuple[Path_, Worker, Hardware, Point, float]]:
    """(path, worker, hardware, point, dram-utilization) of every point whose KV offloads to host DRAM: the
    engine that offloads (prefill, or the single-node server), where the budget is derived from."""
    for pt in ctx.points():
        worker = offloading_worker(ctx.entry, pt.space)
        if pt.space.kv_offloading != "dram" or worker is None or pt.dram_utilization is None:
            continue  # a dram point without dram-utilization: _kv_offloading_consistent
        hw = ctx.hardware(worker.hardware or ctx.entry.runner)
        if hw is not None:
            path = pt.path + (("prefill",) if ctx.entry.multinode else ())
            yield path, worker, hw, pt, pt.dram_utilization


def _dram_budget_tiles_node(ctx: Context) -> Iterator[Problem]:
    """The runner states its DRAM where KV offloads to it, and the engine that offloads tiles its node (tp x
    pp x pcp-size divides gpus-per-node, or fills whole nodes): its DRAM budget is its share of the node's
    GPUs (InferenceX's generator refuses other shapes)."""
    for path, worker, hw, _, utilization in _offloads(ctx):
        if hw.available_cpu_dram_mib is None:
            label = worker.hardware or ctx.entry.runner
            yield Problem(
                path,
                f"KV offloads to host DRAM, and runner {label!r} states no available-cpu-dram-mib: the "
                "offload tier is sized from it",
                f"add hardware.{label}.available-cpu-dram-mib to runners.yaml",
            )
        elif dram_budget(hw, utilization, worker) is None:
            yield Problem(
                path,
                f"{role_gpus(worker)} GPUs per engine neither divide nor fill a {hw.gpus_per_node}-GPU node: "
                "its share of the node's DRAM is undefined",
                f"tp x pp x pcp-size dividing {hw.gpus_per_node}, or a multiple of it",
            )


def _lmcache_l1_fits(ctx: Context) -> Iterator[Problem]:
    """The LMCache L1 pool (InferenceX's DRAM budget of the server, in GiB) is not below its init size."""
    for path, worker, hw, pt, utilization in _offloads(ctx):
        backend = pt.space.kv_offload_backend
        budget = dram_budget(hw, utilization, worker)
        if backend is None or backend.name != "lmcache" or budget is None:
            continue
        init = ctx.settings("prefill", worker, pt)["LMCACHE_L1_INIT_SIZE_GB"]
        if budget.l1_gib < init:
            yield Problem(
                path,
                f"LMCache L1 of {budget.l1_gib} GiB (the server's DRAM budget of {budget.budget_gb} GB) is "
                f"below its init size {init} GiB",
                "raise dram-utilization or set LMCACHE_L1_INIT_SIZE_GB lower",
            )


def _offload_keeps_prefix_caching(ctx: Context) -> Iterator[Problem]:
    """LMCache's L2 hits are found through vLLM's prefix cache: a worker that offloads with prefix caching
    off (the config's setting, or its model's default in configs/models.yaml) stores and never reuses."""
    for path, worker, _hw, pt, _ in _offloads(ctx):
        backend = pt.space.kv_offload_backend
        role = "prefill" if ctx.entry.multinode else "server"
        if (
            backend is not None
            and backend.name == "lmcache"
            and ctx.settings(role, worker, pt).get("ENABLE_PREFIX_CACHING") is False
        ):
            yield Problem(
                path + ("additional-settings",),
                "prefix caching is off on the engine that offloads to LMCache: its L2 would store KV and "
                "never reuse it (the config's ENABLE_PREFIX_CACHING, else its model's default in "
                "configs/models.yaml)",
                "add ENABLE_PREFIX_CACHING=true to its additional-settings",
            )


def _context_fits_model(ctx: Context) -> Iterator[Problem]:
    """MAX_MODEL_LEN is at most the model's max-positions (configs/models.yaml): vLLM and SGLang refuse a
    longer context at engine start unless told to overrun the positions the model was trained on."""
    if ctx.models is None:
        return
    try:
        limit = model_facts(ctx.models, ctx.entry.model).architecture.max_positions
    except NoRecipe:
        return  # the renderer's verdict names the unknown model at its line
    for path, _, worker, _ in ctx.workers():
        value = parsed_settings(worker).get("MAX_MODEL_LEN")  # None: unset, or malformed (its own finding)
        for i, item in enumerate(worker.additional_settings):
            key, _, raw = str(item).partition("=")
            if key == "MAX_MODEL_LEN" and value is not None and value > limit:
                yield Problem(
                    path + ("additional-settings", i),
                    f"MAX_MODEL_LEN={raw} ({value:,} tokens) is above the {limit:,} positions of model "
                    f"{ctx.entry.model} (configs/models.yaml max-positions)",
                    f"MAX_MODEL_LEN={limit} at most, or leave it out",
                )


def _mooncake_needs_vllm_016(ctx: Context) -> Iterator[Problem]:
    e = ctx.entry
    if not e.framework.startswith("vllm") or all(
        kv_transfer(e, pt.space) != "mooncake" for pt in ctx.points()
    ):
        return
    version = engine_version(e.image)
    if version is not None and version[:2] < MOONCAKE_MIN_VLLM:
        found = ".".join(map(str, version))
        yield Problem(
            ctx.path + ("image",),
            f"vLLM {found} speaks the old Mooncake PD contract (decode silently recomputes)",
            "use vLLM >= 0.16",
        )


def _framework_rendered(ctx: Context) -> Iterator[Problem]:
    """The framework runs an engine recipes/ renders (vllm, sglang); another says which and why not."""
    refused = reg.not_rendered(ctx.entry.framework)
    if refused is not None:
        yield Problem(ctx.path + ("framework",), *refused)


def _image_has_engine_build(ctx: Context) -> Iterator[Problem]:
    """The image carries exactly one engine build of configs/engine-builds.yaml, of the engine the framework
    runs: it says which parser judges the config's command lines (`make check-engines`) and which known
    issues its release carries."""
    if ctx.builds is not None:
        engine = reg.engine_of(ctx.entry.framework)
        yield from eb.image_build_problems(ctx.path + ("image",), ctx.entry.image, engine, ctx.builds)


def _known_issues_handled(ctx: Context) -> Iterator[Problem]:
    """An engine bug a worker's flags (or KV connectors) walk into on an image without the fix needs a
    recorded, applied workaround (it changes performance, so results must say so); a record nothing needs
    is an error too."""
    launches = [
        ki.Launch(path, ctx.settings(role, w, pt), frozenset(kv_connectors(ctx.entry, role, pt)))
        for path, role, w, pt in ctx.workers()
    ]
    build = eb.build_of(ctx.entry.image, ctx.builds or ())
    yield from ki.entry_problems(ctx.path, ctx.entry, launches, ctx.issues, build)


def _recipe_named_once(ctx: Context) -> Iterator[Problem]:
    """A point names its srt-slurm recipe (and its eval's) in one place: its srt-recipe key, or InferenceX's
    older CONFIG_FILE setting on one worker, never two that could disagree."""
    for pt in ctx.points():
        for key in ("srt-recipe", "eval-srt-recipe"):
            found = recipe_pointers(pt.space, key)
            if len(found) > 1:
                (first, _), (second, _) = found[0], found[1]
                yield Problem(
                    pt.path + second,
                    f"the point's {key} is named twice: also by its {format_path(first)}",
                    f"name it once, as the point's {key}",
                )


def _aggregate_multinode_not_rendered(ctx: Context) -> Iterator[Problem]:
    """An aggregated multinode point (disagg: false, worker and num-nodes) is InferenceX's; this repository
    renders disaggregated prefill/decode launches and single-node servers only."""
    for pt in ctx.points():
        if ctx.entry.multinode and pt.space.worker is not None:
            yield Problem(
                pt.path + ("worker",),
                "an aggregated multinode point (worker on num-nodes nodes) is not rendered here",
                "this repository renders disaggregated (prefill/decode) and single-node points",
            )


STRICT = (
    _recipe_named_once,
    _aggregate_multinode_not_rendered,
    _framework_rendered,
    _image_public_and_pinned,
    _image_fits_gpu_vendor,
    _settings_known_and_typed,
    _settings_fit_engine,
    _shared_settings_agree,
    _router_known_and_versioned,
    _router_fits_topology,
    _disagg_is_complete,
    _prefill_workers_serve,
    _offload_backend_versioned,
    _runner_exists,
    _runner_launchable,
    _node_tools_run_on_the_runners_python,
    _topology_fits_runner,
    _dram_budget_tiles_node,
    _lmcache_l1_fits,
    _offload_keeps_prefix_caching,
    _context_fits_model,
    _mooncake_needs_vllm_016,
    _image_has_engine_build,
    _known_issues_handled,
)
