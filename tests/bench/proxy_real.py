"""The real-engine pass of the proxy benchmark: the local-cpu config's own prefill and decode command lines
(vLLM's CPU build, the real MooncakeConnector over tcp, the model made on this machine), out of its rendered
plan, started on this host.

What differs from the job, and why: both engines listen on 127.0.0.1 at free ports (the bench runs without
the SLURM cluster), and the prefill's MultiConnector is reduced to its Mooncake connector. LMCache sits below
the prefill and would serve every routed target alike; left out, the runs measure the routers and the KV
moved, not the host-DRAM cache's warm-up between runs (the demo and its integration test prove LMCache).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from recipes.engines.lines import PROGRAMS, PlanError, recipe_stub, resolve, split_env, values
from recipes.render import load, render_config
from sim.cpu import model as cpu_model
from tests.bench import proxy_stack as stack
from tests.ports import free_port

CONFIG = "local-cpu-vllm-disagg-agentic"
HOST = "127.0.0.1"
KV_TRANSFER = ("vllm:prompt_tokens_by_source_total", "external_kv_transfer")  # scripts/proof.py's proof
MOONCAKE_LOGGER = "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector"
# The engines' log lines with milliseconds, and Mooncake's per-transfer lines (debug level upstream), so a
# stall can be followed request by request (tests/bench/proxy_trace.py reads them).
LOG_FORMAT = "%(levelname)s %(asctime)s.%(msecs)03d pid=%(process)d [%(filename)s:%(lineno)d] %(message)s"


class RealEngineError(RuntimeError):
    """The plan cannot give the engine lines this pass needs; the message says what."""


@dataclass(frozen=True)
class EngineLine:
    role: str
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class RealSetup:
    plan: dict
    model: str  # the served model name
    router_args: dict[str, list[str]]  # the runner's extra router flags, by router name
    engine_venv: str
    ready_timeout: float


def setup(config: str = CONFIG) -> RealSetup:
    """The config's first variant rendered, its engine lines taken out, the model folder made or reused."""
    loaded = load(config)
    rendered = render_config(config, loaded)[0]
    profile = loaded.launch.profiles[rendered.plan.runner]
    if profile.engine_venv is None:
        raise RealEngineError(f"{config}: runner {rendered.plan.runner} has no CPU engines (engine-venv)")
    plan = json.loads(rendered.files["plan.json"])
    try:
        cpu_model.ensure(plan["model"], plan["container"]["mounts"][0], profile.engine_venv)
    except cpu_model.ModelError as exc:
        raise RealEngineError(str(exc)) from None
    return RealSetup(
        plan=plan,
        model=plan["model"],
        router_args={k: [str(a) for a in v] for k, v in profile.router_args.items()},
        engine_venv=profile.engine_venv,
        ready_timeout=float(plan["timeouts"]["engine_ready"]),
    )


def engine_lines(plan: dict, recipe_dir: Path) -> list[EngineLine]:
    try:
        return _engine_lines(plan, recipe_dir)
    except PlanError as exc:
        raise RealEngineError(str(exc)) from None


def _engine_lines(plan: dict, recipe_dir: Path) -> list[EngineLine]:
    """Each role's vLLM line of the plan, its `${...}` resolved as on its node (recipes/engines/lines.py),
    then moved to 127.0.0.1 at a free port, and the prefill's connector reduced to Mooncake."""
    out = []
    for role in plan["roles"]:
        rank = next(n["rank"] for n in plan["nodes"] if n["role"] == role["name"])
        known = {**values(plan, rank), "RECIPE_DIR": str(recipe_dir), "NODE_ADDR": HOST, "LOCAL_ADDR": HOST}
        for service in role["services"]:
            env, argv = split_env(service["argv"])
            if tuple(argv[: len(PROGRAMS["vllm"])]) != PROGRAMS["vllm"]:
                continue  # the role's other services (LMCache, log watcher)
            env = {k: resolve(v, known) for k, v in env.items()}
            argv = [resolve(w, known) for w in argv]
            argv = set_flag(argv, "--port", str(free_port()))
            argv = set_flag(argv, "--host", HOST)
            kv = json.loads(flag_value(argv, "--kv-transfer-config"))
            kv = json.dumps(mooncake_only(kv), separators=(",", ":"))
            argv = set_flag(argv, "--kv-transfer-config", kv)
            env = {**plan["env_exported"], **env, "VLLM_HOST_IP": HOST}
            if role["name"] == "prefill":
                env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(free_port())
            out.append(EngineLine(role["name"], argv, env))
    if sorted(line.role for line in out) != ["decode", "prefill"]:
        roles = [x.role for x in out]
        raise RealEngineError(f"the plan's engine lines are for {roles}: want 1 prefill, 1 decode")
    return out


def mooncake_only(kv: dict) -> dict:
    """A prefill's MultiConnector of Mooncake + LMCache becomes its Mooncake producer alone; any other
    connector config is kept as it is."""
    if kv.get("kv_connector") != "MultiConnector":
        return kv
    connectors = kv["kv_connector_extra_config"]["connectors"]
    mooncake = [c for c in connectors if c["kv_connector"] == "MooncakeConnector"]
    if len(mooncake) != 1:
        raise RealEngineError(f"want one MooncakeConnector in the MultiConnector, found {len(mooncake)}")
    return mooncake[0]


def flag_value(argv: list[str], flag: str) -> str:
    try:
        return argv[argv.index(flag) + 1]
    except (ValueError, IndexError):
        raise RealEngineError(f"the engine line has no {flag} VALUE: {argv}") from None


def set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """argv with `flag`'s one value replaced (the flag must be there once)."""
    if argv.count(flag) != 1:
        raise RealEngineError(f"the engine line carries {flag} {argv.count(flag)} times, want once")
    flag_value(argv, flag)
    at = argv.index(flag) + 1
    return [*argv[:at], value, *argv[at + 1 :]]


def logging_config() -> dict:
    """vLLM's own logging, as a `VLLM_LOGGING_CONFIG_PATH` document: INFO with milliseconds, and the
    Mooncake connector at DEBUG (its transfer start, end and duration per request)."""
    handler = {"class": "logging.StreamHandler", "formatter": "ms", "stream": "ext://sys.stdout"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"ms": {"format": LOG_FORMAT, "datefmt": "%H:%M:%S"}},
        "handlers": {"vllm": handler | {"level": "DEBUG"}},
        "loggers": {
            "vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False},
            MOONCAKE_LOGGER: {"level": "DEBUG"},
        },
    }


def start_engines(st: stack.Stack, real: RealSetup, cpus) -> tuple[list[stack.Engine], float]:
    """Both engines at once, then each one's /health; (engines, seconds until both answered). Each logs
    every request it receives (`--enable-log-requests`) and Mooncake's transfers (logging_config)."""
    venv_bin = stack.ROOT / f".venv-{real.engine_venv}" / "bin"
    if not (venv_bin / "vllm").exists():
        raise RealEngineError(f"{venv_bin / 'vllm'} missing: run `make tools`")
    lines = engine_lines(real.plan, recipe_stub(real.plan, st.workdir / "stubs"))
    log_config = st.workdir / "vllm-logging.json"
    log_config.write_text(json.dumps(logging_config(), indent=1) + "\n")
    engines, started = [], time.monotonic()
    for line in lines:
        env = stack.base_env() | line.env | {"VLLM_LOGGING_CONFIG_PATH": str(log_config)}
        env["PATH"] = f"{venv_bin}:{env['PATH']}"
        line = EngineLine(line.role, [*line.argv, "--enable-log-requests"], line.env)
        port = flag_value(line.argv, "--port")
        url = f"http://{HOST}:{port}"
        proc = st.start(line.role, line.argv, env=env, cpus=cpus, url=url)
        boot = int(line.env.get("VLLM_MOONCAKE_BOOTSTRAP_PORT", 0)) if line.role == "prefill" else 0
        engines.append(stack.Engine(line.role, url, boot, proc))
    for e in engines:
        assert e.proc is not None
        print(f"  waiting for the real {e.role} engine ({e.url}/health, log {e.proc.log})", flush=True)
        stack.wait_http(e.proc, e.url + "/health", real.ready_timeout)
    return engines, time.monotonic() - started


def kv_tokens(engines: list[stack.Engine]) -> float:
    """Prompt tokens whose KV the decode engines received over Mooncake (scripts/proof.py's counter)."""
    name, source = KV_TRANSFER
    decodes = [e for e in engines if e.role == "decode"]
    return sum(stack.metric_total(e.url + "/metrics", name, source=source) for e in decodes)
