"""A recorded launch (recipes/outside/chain.py) as one side of `make parity`: category -> role ->
{item: value}, in the shape recipes/parity.py gives our rendered plan, so the two compare item by item.
Everything here comes from what InferenceX's scripts ran; nothing is transcribed."""

from __future__ import annotations

from typing import Any

from recipes import parity
from recipes.engines.lines import PROGRAMS

from . import matrix

# What every process of a node sees and no launch decides: the scheduler's bookkeeping, the shell's own,
# the recorder's scratch layout. Left out of engine-env on both sides' behalf (ours renders none of them).
PLACEMENT = ("SLURM_", "SLURMD_", "GITHUB_", "RUNNER_", "RECORDER_", "OMPI_", "PMI_")
PLACEMENT_NAMES = frozenset(
    ("HOSTNAME", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "PATH", "TERM", "USER", "LOGNAME", "SHELL", "LANG")
)
ENGINE_PROGRAMS = tuple(words[-1] for words in PROGRAMS.values())
# A client line's words that name its point, not the launch (InferenceX's fixed-seq client's spellings too).
CLIENT_PER_POINT = (*parity.PER_BENCHMARK, "--max-concurrency", "--result-filename", "--result-dir")


# The prefixes of what an engine's process and its libraries read (vLLM, SGLang, ATOM, their kernels, ROCm,
# the collectives and KV transports, LMCache, the Hub); a variable of another name in the engine's
# environment is one InferenceX's scripts pass each other (BENCH_*, MODEL_PREFIX, xP), which no engine reads.
ENGINE_READS = (
    "VLLM_", "SGLANG_", "ATOM_", "AITER_", "HSA_", "HIP_", "ROCM_", "ROC", "AMD_", "GPU_", "NCCL_", "RCCL_",
    "GLOO_", "UCX_", "MORI_", "MC_", "MOONCAKE_", "LMCACHE_", "TORCH", "PYTORCH_", "OMP_", "HF_",
    "TRANSFORMERS_", "SAFETENSORS_", "TRITON_", "MIOPEN_", "NVTE_", "CUDA_", "PYTHON", "LD_", "DO_NOT_TRACK",
    "TOKENIZERS_", "TQDM_", "LOG", "SPEC_", "UCC_", "IONIC_", "IBV_", "RDMA",
)  # fmt: skip


def _engine_env(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if k not in PLACEMENT_NAMES
        and not any(k.startswith(p) for p in PLACEMENT)
        and any(k.startswith(p) for p in ENGINE_READS)
    }


def _after_program(argv: list[str]) -> list[str]:
    start = next((argv.index(w) + 1 for w in ENGINE_PROGRAMS if w in argv), 0)
    return argv[start:]


def _program(argv: list[str]) -> tuple[str, list[str]]:
    """A router's program as parity names ours (SGLang's router by its module, a Python script by its file
    name, else the command) and the words after it."""
    if argv[:1] and argv[0].startswith("python"):
        if argv[1:2] == ["-m"]:
            return (argv[2] if argv[2] == parity.ROUTER_MODULE else f"python3 -m {argv[2]}"), argv[3:]
        return argv[1].rsplit("/", 1)[-1], argv[2:]
    return argv[0], argv[1:]


def _container(argv: list[str], image: str | None) -> dict[str, Any]:
    """`docker run` options as {option: value}, repeatable ones one item per value (as parity reads ours)."""
    words = argv[argv.index("run") + 1 :] if "run" in argv else []
    out: dict[str, Any] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        flag, eq, given = words[i].partition("=")
        takes = flag not in ("--init", "--privileged", "--rm", "-d", "--detach")
        value = given if eq else (words[i + 1] if takes and i + 1 < len(words) else True)
        if flag not in (
            "-e",
            "--env",
            "--name",
            "--label",
        ):  # the node script's variables and names: placement
            item, shown = parity._option(flag, value)
            out[item] = shown
        i += 1 if eq or not takes else 2
    if image:
        out["image"] = image
    return out


def client_build(recorded: dict[str, Any], client: dict[str, Any]) -> str:
    """What the client is: what was installed into its virtualenv (each package as the install named it,
    an editable checkout folder with the submodule commit that pins it, or `unpinned`), else the script the
    scripts ran on the container's Python."""
    venv = client.get("venv")
    if not venv:
        script = next((w for w in client["argv"][1:] if w.endswith(".py")), client["argv"][0])
        return f"{script.removeprefix('/workspace/')} (the checkout's) on the container image's python3"
    parts = []
    for install in (i for n in recorded["nodes"] for i in n.get("installs", []) if i.get("into") == venv):
        for p in install["packages"]:
            if "editable" in p:
                pin = f"submodule {p['submodule_commit'][:12]}" if p.get("submodule_commit") else "unpinned"
                parts.append(f"{p.get('checkout_path', p['editable'])} editable ({pin})")
            elif "requirements" in p:
                parts.append(f"-r {p['requirements'].removeprefix('/workspace/')}")
            elif "spec" in p:
                parts.append(str(p["spec"]))
    return "; ".join(parts) or "nothing recorded as installed into its virtualenv"


def container_installs(recorded: dict[str, Any]) -> str:
    """What the scripts install into the engines' containers as they start (not into a client's
    virtualenv), each as the install named it, with where: the image's contents as the job changes them."""
    seen: dict[str, str] = {}
    for node in recorded["nodes"]:
        for install in (i for i in node.get("installs", []) if not i.get("into")):
            words = [w for w in install["argv"] if not w.startswith("-") and w not in PIP_WORDS]
            seen.setdefault(" ".join(words), f"{install.get('script')}:{install.get('line')}")
    said = [f"{what} (unpinned, from the network: {at})" for what, at in sorted(seen.items())]
    return "; ".join(said) or "none"


PIP_WORDS = ("pip", "pip3", "install")


def _srun_options(host: list[dict[str, Any]]) -> dict[str, str]:
    """How the job script's steps are signalled and ended (`srun --signal`, `--kill-on-bad-exit`), from the
    steps that set either: the ones that run the nodes' containers."""
    out: dict[str, str] = {}
    for command in (h for h in host if h["argv"][:1] == ["srun"]):
        for word in command["argv"][1:]:
            flag, _, value = word.partition("=")
            if flag in parity.SRUN_COMPARED:
                out[f"srun {flag}"] = value or "true"
    return out


def _flushes(argv: list[str]) -> bool:
    """A worker's caches emptied over HTTP (`curl -X POST <worker>/flush_cache`), as parity names ours."""
    return argv[:1] == ["curl"] and "POST" in argv and any(w.endswith("/flush_cache") for w in argv)


def recorded_side(recorded: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """The recorded launch as parity's InferenceX side: the first engine of each role (its argv after the
    program, its environment less placement), LMCache's server, the router, the first benchmark client less
    what is per point, node 0's container, and the job's sbatch options."""
    side = parity._empty_side()
    clients = []
    for node in recorded["nodes"]:
        for s in node["services"]:
            role = s.get("role")
            if s["kind"] == "engine" and role in parity.ROLES and role not in side["engine-args"]:
                side["engine-args"][role] = parity._flatten(parity.flag_map(_after_program(s["argv"])))
                side["engine-env"][role] = _engine_env(s.get("env", {}))
            elif s["kind"] == "lmcache" and "prefill" not in side["lmcache"]:
                side["lmcache"]["prefill"] = parity.flag_map(s["argv"][2:])
            elif s["kind"] == "router" and "all" not in side["router"]:
                program, rest = _program(s["argv"])
                side["router"]["all"] = {"program": program, **parity.flag_map(rest)}
            elif s["kind"] == "client":
                clients.append(s)
    if clients:
        flags = parity.flag_map(clients[0]["argv"])
        side["client"]["all"] = {k: v for k, v in flags.items() if k not in CLIENT_PER_POINT}
        side["client"]["all"]["build"] = client_build(recorded, clients[0])
        env = clients[0].get("env", {})
        side["client"]["all"].update(
            {f"env {k}": v for k, v in env.items() if k.startswith(parity.CLIENT_ENV)}
        )
    commands = [c for n in recorded["nodes"] for c in n.get("container_commands", []) + n.get("host", [])]
    if any(_flushes(c["argv"]) for c in commands):
        side["client"]["all"][parity.FLUSH_ITEM] = parity.FLUSH_VALUE
    first = recorded["nodes"][0].get("container") if recorded["nodes"] else None
    if first:
        side["container"]["all"] = _container(first["argv"], first.get("image"))
        side["container"]["all"][parity.INSTALLS] = container_installs(recorded)
    refused = recorded.get("refused", [])
    routes = sorted({" ".join(r["argv"]) for r in refused if r["argv"][:2] == ["ip", "route"]})
    options = recorded["sbatch"]["options"]
    side["derived"]["all"] = {"time-limit": options.get("--time")}
    side["derived"]["all"].update(
        {f"sbatch {k}": v for k, v in sorted(options.items()) if k in parity.SBATCH_COMPARED}
    )
    side["derived"]["all"].update(_srun_options(recorded["sbatch"].get("host", [])))
    if routes:  # what the scripts would change in a node's routing table (ours never does)
        side["derived"]["all"]["node route changes"] = "; ".join(routes)
    return side


def row_selector(target) -> str:
    """The matrix row of InferenceX's generator that is this variant's point: its shape and sequence lengths
    (the concurrency list is compared through the clients)."""
    parts: dict[str, object] = {}
    for role in ("prefill", "decode"):
        w = target.worker(role)
        parts |= {f"{role}.num-worker": w.num_worker, f"{role}.tp": w.tp, f"{role}.ep": w.ep or 1}
        parts[f"{role}.dp-attn"] = "true" if w.dp_attn else "false"
    lengths = target.scenario_params
    if lengths.get("isl") is not None:
        parts |= {"isl": lengths["isl"], "osl": lengths["osl"]}
    return ",".join(f"{k}={v}" for k, v in parts.items())


def row_index(found: list[dict[str, Any]], target, concurrencies: tuple[int, ...] = ()) -> int:
    """The index of the variant's row among the generator's: its shape and sequence lengths, then (where the
    matrix gives each concurrency an allocation of its own, as agentic points) the row holding its
    concurrency, then (two search-space items of one shape) the row whose concurrencies are the variant's.
    Said, with the rows there are, when none is or several are."""
    selector = row_selector(target)
    wanted = dict(part.split("=", 1) for part in selector.split(","))
    same = [i for i, row in enumerate(found) if all(matrix._field(row, k) == v for k, v in wanted.items())]
    conc = getattr(target, "concurrency", None)
    if len(same) > 1 and conc is not None:
        same = [i for i in same if conc in (found[i].get("conc") or [])]
    if len(same) > 1 and concurrencies:
        same = [i for i in same if set(found[i].get("conc") or []) == set(concurrencies)]
    if len(same) != 1:
        listing = "\n".join(f"  [{i}] {matrix.describe(r)}" for i, r in enumerate(found))
        what = f"{selector}" + (f" with concurrency {conc}" if conc is not None else "")
        raise matrix.RowError(f"{len(same)} rows are {what}; the generator's rows:\n{listing}")
    return same[0]
