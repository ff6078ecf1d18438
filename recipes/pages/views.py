"""What a recipe page shows of its Plans, as plain data for recipes/templates/docs/: commands quoted and
wrapped exactly as the rendered files have them, the bash variables they use explained, what differs
between variants and concurrencies, and the failure classes (scripts/failures.py) that apply."""

from __future__ import annotations

import re

from schemas.entries import kv_transfer, points
from scripts import failures

from .. import budget
from ..submit import lock
from ..words import Ref, bash_argv, bash_word, plain

# The templates wrap these argvs so (server.sh.j2: services, router, proofs, benchmarks; job.sbatch.j2:
# srun): with the same indent a page's command is character for character a part of the rendered file.
SCRIPT_INDENT = 4
SBATCH_INDENT = 2
ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "atom": "ATOM"}
KV_TRANSFERS = {"mooncake": "Mooncake", "nixl": "NIXL", "mori": "MoRI", "moriio": "MoRI-IO"}
GPU_VENDORS = {"amd": "AMD", "nvidia": "NVIDIA", "none": "simulated"}
# Bash variables commands use, explained once per page. Those of env.sh are explained by their value.
REFS = {
    "NODE_ADDR": "this node's address, found at step `resolve address` by `scripts/sync.py addr {addr}`",
    "LOCAL_ADDR": "where node-private services (LMCache) listen: {local}",
    "PEER_ADDR[i]": "the address that node rank i published at the start barrier",
    "RECIPE_DIR": "the run's own copy of the recipe: rendered files, `scripts/`, `proxy/`, traces",
    "RUN_DIR": "the run folder, `out/runs/<config-key>/<variant>/<run-id>/`",
    "SCRIPTS_DIR": "`${RECIPE_DIR}/scripts`",
    "RESULTS_DIR": "`${RUN_DIR}/results`: AIPerf's output and the kept results",
    "LOG_DIR": "`${RUN_DIR}/logs/<node>`: this node's service logs",
    "SLURM_JOB_ID": "SLURM's job id",
    "DISAGG_TOOLS": "set by `make demo`: this checkout, whose node tools the image runs (mounted read-only)",
    "DISAGG_PYTHON": "set by `make demo`: the Python installation of this checkout's virtualenvs (mounted "
    "read-only)",
}
_PEER = re.compile(r"^PEER_ADDR\[[0-9]+\]$")


def shown(seen: dict, text: str, variant: str) -> dict:
    """A command for the page, or a pointer to the variant that showed the same text first."""
    first = seen.setdefault(text, variant)
    return {"text": text, "same_as": first if first != variant else None}


def flag_value(words, flag: str) -> str | None:
    for i, w in enumerate(words[:-1]):
        if w == (flag,):
            return plain(words[i + 1])
    return None


def _refs_in(words) -> set:
    return {p.var for w in words if isinstance(w, tuple) for p in w if isinstance(p, Ref)}


def plan_words(plan) -> list:
    """Every Word a page shows of the plan."""
    out = list(plan.launch) + list(plan.smoke) + list(plan.l2_proof or ()) + list(plan.cold_proof or ())
    out += list(plan.metrics)
    for role in plan.roles:
        for svc in role.services:
            out += list(svc.argv) + ([svc.ready_url] if svc.ready_url else [])
    if plan.router is not None:
        out += list(plan.router.argv) + [plan.router.ready_url]
    for b in plan.benchmarks:
        out += list(b.argv)
    return out


def ref_rows(plans: list) -> list[tuple[str, str]]:
    """(variable, meaning) of every variable the page's commands use, in REFS order, then env.sh's."""
    names = set().union(*(_refs_in(plan_words(p)) for p in plans))
    names = {("PEER_ADDR[i]" if _PEER.match(n) else n) for n in names}
    p0 = plans[0]
    local = p0.node_local_addr
    facts = {
        "addr": " ".join(plain(w) for w in p0.address_args),
        "local": f"`{plain((local,) if isinstance(local, (str, Ref)) else local)}`" if local else "none",
    }
    rows = [
        (n, REFS[n].replace("{addr}", facts["addr"]).replace("{local}", facts["local"]))
        for n in REFS
        if n in names
    ]
    env = {k: v for p in plans for k, v in (*p.env_shell, *p.env_exported)}
    rows += [(n, f"set in env.sh: `{env[n]}`") for n in sorted(names) if n not in REFS and n in env]
    rows += [(n, "set by the node script") for n in sorted(names) if n not in REFS and n not in env]
    return rows


def topology(plan, target) -> str:
    sp = target.point.space
    parts, counts = [], {}
    for role in plan.roles:
        worker = getattr(sp, role.name, None)
        counts[role.name] = sum(1 for n in plan.nodes if n.role == role.name)
        tp = worker.tp if worker is not None else sp.tp
        parts.append(f"{counts[role.name]} {role.name} × tp{tp}")
    head = f"{counts['prefill']}P{counts['decode']}D: " if set(counts) == {"prefill", "decode"} else ""
    return head + ", ".join(parts)


def router_label(plan) -> str:
    if plan.router is None:
        return "none: requests go straight to the server"
    return f"{plan.router_name} {dict(plan.components).get(plan.router_name, '')}".strip()


def health(svc) -> str:
    if not svc.ready_url:
        return "no health endpoint: only watched for its exit"
    out = f"healthy when `GET {plain(svc.ready_url)}` answers 200"
    if svc.ready_expect:
        out += " reporting " + ", ".join(f"`{e}`" for e in svc.ready_expect)
    return out + f" (waits up to {svc.ready_timeout} s)"


def env_sh(files: dict) -> str:
    """env.sh without its comments: what it sets."""
    lines = [ln for ln in files.get("env.sh", "").splitlines() if not ln.startswith("#")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _role_view(plan, role, seen: dict) -> dict:
    ranks = [n.rank for n in plan.nodes if n.role == role.name]
    services = [
        {
            "name": s.name,
            "health": health(s),
            "cmd": shown(seen, bash_argv(s.argv, SCRIPT_INDENT), plan.variant),
        }
        for s in role.services
    ]
    pinned = [f"{p.dist} {p.version}" for p in role.pinned]
    commands = ["python3"] + [plain(w) for w in role.commands]
    return {"name": role.name, "ranks": ranks, "services": services, "pinned": pinned, "commands": commands}


def _bench_view(plan, seen: dict) -> dict | None:
    if not plan.benchmarks:
        return None
    first = plan.benchmarks[0]
    others = []
    for b in plan.benchmarks[1:]:
        if len(b.argv) != len(first.argv):
            others.append({"conc": b.concurrency, "cmd": bash_argv(b.argv, SCRIPT_INDENT), "changes": []})
            continue
        changes = [
            f"{bash_word(first.argv[i - 1])} {bash_word(w)}" if i else bash_word(w)
            for i, (w, v) in enumerate(zip(b.argv, first.argv, strict=True))
            if w != v
        ]
        others.append({"conc": b.concurrency, "cmd": None, "changes": changes})
    return {
        "first": first,
        "cmd": shown(seen, bash_argv(first.argv, SCRIPT_INDENT), plan.variant),
        "others": others,
        "duration": flag_value(first.argv, "--benchmark-duration"),
        "workload": workload(first.argv),
    }


def workload(words) -> list[str]:
    out = []
    for flag, what in (
        ("--public-dataset", "AIPerf public dataset `{}`"),
        ("--input-file", "trace file `{}`"),
        ("--synthetic-input-tokens-mean", "synthetic prompts of {} tokens"),
        ("--output-tokens-mean", "{} output tokens"),
        (
            "--session-header",
            "each session's turns carry header `{}` (the router keeps a session on one node)",
        ),
    ):
        value = flag_value(words, flag)
        if value is not None:
            out.append(what.format(value))
    return out


def _accuracy_view(plan, target) -> dict | None:
    """The graded eval this variant runs (recipes/accuracy.py): where it stands on the page."""
    a = plan.accuracy
    if a is None:
        return None
    questions = f"{a.limit} questions" if a.limit else "every question of the test split"
    made_up = "a made-up set of sums in GSM8K's format (the score means nothing here)"
    return {
        "variant": plan.variant,
        "eval": a.eval,
        "threshold": f"{a.threshold:.2f}",
        "source": target.model.accuracy.source,
        "concurrency": a.concurrency,
        "questions": questions,
        "set": made_up if a.eval_set == "made-up" else "openai/gsm8k (config main), staged at submission",
        "seconds": a.seconds,
    }


def variant_view(rendered, target, seen: dict) -> dict:
    plan = rendered.plan
    metrics = [plain(w).split("=", 1) for w in plan.metrics]
    return {
        "plan": plan,
        "topology": topology(plan, target),
        "gpus": plan.slurm.nodes * plan.gpus_per_node,
        "router": router_label(plan),
        "concurrencies": ", ".join(str(c) for c in dict.fromkeys(b.concurrency for b in plan.benchmarks)),
        "node_rows": [_node_row(plan, n) for n in plan.nodes],
        "launch": shown(seen, bash_argv(plan.launch, SBATCH_INDENT), plan.variant),
        "env_sh": shown(seen, env_sh(rendered.files), plan.variant),
        "roles": [_role_view(plan, r, seen) for r in plan.roles],
        "router_svc": _router_view(plan, seen),
        "leader_commands": [plain(w) for w in plan.leader_commands],
        "smoke": shown(seen, bash_argv(plan.smoke, SCRIPT_INDENT), plan.variant) if plan.smoke else None,
        "l2": shown(seen, bash_argv(plan.l2_proof, SCRIPT_INDENT), plan.variant) if plan.l2_proof else None,
        "accuracy": _accuracy_view(plan, target),
        "metrics": metrics,
        "bench": _bench_view(plan, seen),
        "files": sorted(rendered.files),
        "failures": failure_rows(plan),
    }


def _router_view(plan, seen: dict) -> dict | None:
    if plan.router is None:
        return None
    cmd = shown(seen, bash_argv(plan.router.argv, SCRIPT_INDENT), plan.variant)
    return {"name": plan.router.name, "health": health(plan.router), "cmd": cmd}


def _node_row(plan, node) -> dict:
    role = next(r for r in plan.roles if r.name == node.role)
    runs = [s.name for s in role.services]
    if node.rank == 0:
        runs += (["router"] if plan.router else []) + ["smoke request", "benchmark"]
    return {"rank": node.rank, "role": node.role, "index": node.index, "runs": ", ".join(runs)}


# ---------------------------------------------------------------- overview


def _distinct(values) -> list:
    return list(dict.fromkeys(values))


def _components(rendered: list) -> list[tuple[str, str]]:
    """(name, version) as each run's lock.json records them; a version only some variants have says so."""
    by_name: dict = {}
    for r in rendered:
        for name, version in lock(r)["components"].items():
            by_name.setdefault(name, {}).setdefault(version, []).append(r.plan.variant)
    out = []
    for name, versions in by_name.items():
        parts = [
            v if len(names) == len(rendered) else f"{v} ({', '.join(names)})" for v, names in versions.items()
        ]
        out.append((name, "; ".join(parts)))
    return out


def _transfers(entry) -> list:
    """The KV transfers of an entry's points (each its own kv-p2p-transfer, else the entry's)."""
    return [x for x in _distinct(kv_transfer(entry, pt.space) for pt in points(entry, ())) if x]


def _kv_path(entry, plans: list) -> str:
    if not any("decode" in {r.name for r in p.roles} for p in plans):
        return "none: one server does prefill and decode"
    out = f"prefill → decode over {' or '.join(f'`{x}`' for x in _transfers(entry))}"
    for size in _distinct(dict(p.env_shell).get("LMCACHE_L1_SIZE_GB") for p in plans):
        if size is not None:
            out += (
                f"; an LMCache server on each prefill node keeps reused prefixes in host DRAM (L1 {size} GiB)"
            )
    return out


def _container(c) -> str:
    how = {
        "docker": (
            "started with `docker run` on every node by `scripts/container.sh`: one container per job and "
            "node, removed by name when the step ends, by a sweep after it, and by the next job on the node"
        ),
        "pyxis": "started by pyxis (`srun --container-image`)",
    }
    if c.runtime == "docker" and c.staging:
        staged = (
            f"saved by `make submit` into `{c.image_archive}` and loaded by a node that lacks it"
            if c.image_archive
            else "put on every node by the site"
        )
        who = (
            f"as root (the runner's declared fallback: {c.root_reason}; each node hands its files back)"
            if c.root_reason
            else "as the submitting user and the groups owning the node's GPU and RDMA devices"
        )
        return (f"`{c.image}`, {how[c.runtime]}; never pulled on a node ({staged}, checked by id before any "
                f"container starts), run {who}")  # fmt: skip
    if c.runtime in how:
        return f"`{c.image}`, {how[c.runtime]}"
    return (
        f"none: the programs run from the nodes' own PATH (the config's image `{c.image}` is only recorded)"
    )


def _on_path(plans: list) -> str:
    p0 = plans[0]
    roles = "; ".join(
        f"{r.name} nodes: {', '.join(['python3'] + [plain(w) for w in r.commands])}" for r in p0.roles
    )
    extra = [plain(w) for w in p0.leader_commands if plain(w) != "python3"]
    return roles + (f"; rank 0 also: {', '.join(extra)}" if extra else "")


def _intro(entry, engine: str, plans: list) -> str:
    out = f"{entry.model} ({entry.precision}) served by {engine} on runner `{entry.runner}`"
    if any(p.slurm.nodes > 1 for p in plans) and _transfers(entry):
        kv = " or ".join(KV_TRANSFERS.get(x, x) for x in _transfers(entry))
        out += f": prefill and decode engines on separate nodes, KV moved by {kv}"
    elif all(p.router is None for p in plans):
        out += ": one server on one node, not disaggregated; requests go to it directly"
    if any(dict(p.env_shell).get("LMCACHE_L1_SIZE_GB") for p in plans):
        out += ", an LMCache server on each prefill node for host-DRAM prefix reuse"
    routers = _distinct(p.router_name for p in plans if p.router is not None)
    if routers:
        out += f", behind {' or '.join(routers)}"
    return out + "."


def overview(entry, rendered: list, targets: list, runners) -> dict:
    plans = [r.plan for r in rendered]
    p0, hw, lp = plans[0], targets[0].hardware, targets[0].launch
    engine = f"{ENGINES.get(p0.engine, p0.engine)} {dict(p0.components).get(p0.engine, '')}".strip()
    bench = next((p.benchmarks[0] for p in plans if p.benchmarks), None)
    labels: dict = {}
    for p in plans:
        labels.setdefault(router_label(p), []).append(f"`{p.variant}`")
    routers = [f"{label} ({', '.join(vs)})" if len(labels) > 1 else label for label, vs in labels.items()]
    return {
        "intro": _intro(entry, engine, plans),
        "engine": engine,
        "simulated": p0.engine_build == "simulator",
        "gpus": f"{hw.gpus_per_node} {GPU_VENDORS.get(lp.gpu_vendor, lp.gpu_vendor)} GPUs per node",
        "network": _network(lp),
        "p0": p0,
        "nodes": (runners.labels or {}).get(targets[0].runner_label, []),  # an alias resolved
        "model_path": targets[0].model_path,
        "container": _container(p0.container),
        "components": _components(rendered),
        "pinned": sorted({x.dist for p in plans for role in p.roles for x in role.pinned}),
        "sources": sorted(
            {(x.dist, x.version, role.name, x.source) for p in plans for role in p.roles for x in role.pinned}
        ),
        "scenario": p0.client_scenario,
        "budget": _budget(targets[0], p0),
        "on_path": _on_path(plans),
        "scenarios": ", ".join(_distinct(p.scenario for p in plans)),
        "kv_path": _kv_path(entry, plans),
        "routers": "; ".join(routers),
        "has_router": any(p.router is not None for p in plans),
        "router_counts": any(p.router is not None and p.router.ready_expect for p in plans),
        "proxy": any(p.router_name == "pd-proxy" for p in plans),
        "kv_proof": any(p.smoke and "decode" in {r.name for r in p.roles} for p in plans),
        "gate": bench,
        "duration": flag_value(bench.argv, "--benchmark-duration") if bench else None,
        "workload": _workload_sentence(plans),
        "not_comparable": _distinct(
            p.not_comparable_with_inferencex for p in plans if p.not_comparable_with_inferencex
        ),
        "refs": ref_rows(plans),
        "workarounds": [f"{w['issue']}: {w['workaround']}" for w in p0.workarounds],
    }


def _budget(target, plan) -> dict:
    """The first variant's worst case against its time limit, as make lint sums it (recipes/budget.py)."""
    items = budget.worst_case(
        target, plan.timeouts, points=len(plan.benchmarks), flushes=any(b.before for b in plan.benchmarks)
    )
    return {"total": sum(i.total for i in items), "parts": ", ".join(map(str, items))}


def _network(lp) -> str:
    if lp.node_address == "interface":
        return f"nodes reach each other at the address of their `{lp.data_plane_interface}` interface"
    return "nodes reach each other at the NodeAddr SLURM knows each by (one host: 127.0.0.x per node)"


def _workload_sentence(plans: list) -> str:
    parts = _distinct(
        f"{p.scenario}: {'; '.join(workload(p.benchmarks[0].argv)) or 'see the command'}"
        for p in plans
        if p.benchmarks
    )
    return ("Scenario " + " | ".join(parts) + ".") if parts else ""


# ---------------------------------------------------------------- troubleshooting


def features(plan) -> set:
    out = {role.name for role in plan.roles}
    out |= {s.name for role in plan.roles for s in role.services}
    out |= {"multinode"} if len(plan.nodes) > 1 else set()
    out |= {"router"} if plan.router is not None else set()
    out |= {"smoke"} if plan.smoke else set()
    out |= {"l2-proof"} if plan.l2_proof else set()
    out |= {"cold-proof"} if getattr(plan, "cold_proof", None) else set()
    out |= {"same-answers"} if getattr(plan, "same_answers", None) else set()
    out |= {"accuracy"} if getattr(plan, "accuracy", None) else set()
    signatures = getattr(plan, "log_signatures", ())
    out |= {"log-signatures"} if signatures else set()
    out |= {f"signature:{s['issue']}" for s in signatures}
    out |= {"nic-check"} if getattr(plan, "nic_check", False) else set()
    return out


def _service(plan, name: str):
    every = [s for role in plan.roles for s in role.services] + ([plan.router] if plan.router else [])
    return next((s for s in every if s.name == name), None)


def failure_rows(plan) -> list[dict]:
    """The failure classes this plan can meet, their lines filled with what the plan knows."""
    have, out = features(plan), []
    for fc in failures.CLASSES:
        if not set(fc.needs) <= have:
            continue
        roles = [r.name for r in plan.roles]
        # the role is certain only when there is one; otherwise <role> stays for the reader
        values = fc.values(engine=plan.engine, **({"role": roles[0]} if len(roles) == 1 else {}))
        svc = _service(plan, values.get("service", ""))
        if svc is not None and svc.ready_url:
            values.update(url=plain(svc.ready_url), timeout=str(svc.ready_timeout))
        if fc.step == "start barrier":
            values["timeout"] = str(plan.timeouts.barrier)
        step = failures.fill(fc.step, **values) if fc.step else "<step>"
        lines = [
            failures.fill(failures.WORDS["headline"], step=step, message=failures.fill(m, **values))
            for m in fc.prints
        ]
        out.append(
            {
                "fc": fc,
                "title": failures.fill(fc.title, **values),
                "lines": lines,
                "service": values.get("service", fc.service),  # <service>: whichever service it is
                "cause": failures.fill(fc.cause, **values),
                "detail": failures.fill(fc.detail, **values),
                "any_step": fc.step is None,
                "log_tail": fc.service is not None,
            }
        )
    return out


def merged_failures(views: list) -> list[dict]:
    """Every variant's failure classes, once each (with the first variant's values)."""
    out: dict = {}
    for v in views:
        for row in v["failures"]:
            out.setdefault(row["fc"].name, row)
    return [out[fc.name] for fc in failures.CLASSES if fc.name in out]


def launch_lines(key: str, variants: list, simulated: bool, configs: str = "") -> list[tuple[str, str]]:
    """(comment, command) of the Launch section; `configs`: the CONFIGS=... naming the config's master file
    when it is not one of configs/."""
    pick = " VARIANT=<variant>" if len(variants) > 1 else ""
    rows = [
        (
            "validate and render every variant into out/<config-key>/<variant>/",
            f"make render CONFIG={key}{configs}",
        ),
        ("print the exact sbatch command", f"make submit CONFIG={key}{pick}{configs} DRY_RUN=1"),
        ("submit; prints the job id and the run folder", f"make submit CONFIG={key}{pick}{configs}"),
    ]
    if simulated:
        rows.append(("or: on the local cluster, followed to its end", f"make demo CONFIG={key}{pick}"))
    return rows


def grouped(views: list, field: str) -> list[dict]:
    """One entry per distinct command in FIELD across variants, naming its variants unless all share it."""
    by_text: dict = {}
    for v in views:
        if v[field] is not None:
            by_text.setdefault(v[field]["text"], []).append(v["plan"].variant)
    return [
        {"text": text, "only": names if len(names) < len(views) else []} for text, names in by_text.items()
    ]
