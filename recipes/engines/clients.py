"""Benchmark-client lines out of plan.json, judged by the client's own configuration resolution (probes/
probe_aiperf.py in .venv-bench): every line the job would run, with the paths only a node has swapped for
stand-ins that exist here (an input folder, a tokenizer that loads offline), and the scenario outcome held
to what the plan expects of it (client_scenario): the lock applied, the submission verdict, no violation
beyond the ones the plan knowingly carries, and the public dataset the plan staged is the one it reads."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .judge import ENGINE_TIMEOUT_S, PROBES, ROOT, ToolMissing, probe_env
from .lines import addresses, recipe_stub, resolve, split_env

CLIENT_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
# Stands in for a tokenizer only a node has (the model's folder): one that loads offline here. The client's
# resolution loads the tokenizer (its TokenizerResolver); what it checks of the line does not depend on which.
STAND_IN_TOKENIZER = ROOT / "sim" / "traces" / "tokenizer"


@dataclass(frozen=True)
class ClientLine:
    name: str  # <config>/<variant>/client <benchmark>
    argv: tuple  # after `aiperf`, resolved, node-only paths swapped
    env: tuple  # (NAME, value) the line sets (AIPERF_* read at the client's import)
    expect: dict | None  # plan.json's client_scenario
    notes: tuple = ()  # what was swapped, said with the verdict


@dataclass(frozen=True)
class ClientVerdict:
    line: ClientLine
    ok: bool
    message: str = ""
    stage: str = ""
    scenario: dict | None = None


def client_lines(plan: dict, stubs: Path, work: Path) -> list[ClientLine]:
    """Every benchmark line of the plan (rank 0 runs them), ready for the client's resolution."""
    known = {
        **{k: str(v) for k, v in plan["env_exported"].items()},
        **{k: str(v) for k, v in plan["env_shell"].items()},
        "NODE_ADDR": addresses(plan)[0],
        "RECIPE_DIR": str(recipe_stub(plan, stubs)),
        "RUN_DIR": str(work / "run"),
        "RESULTS_DIR": str(work / "results"),
    }
    out = []
    for bench in plan["benchmarks"]:
        env, words = _env_and_program([resolve(w, known) for w in bench["argv"]])
        if words[:1] != ["aiperf"]:
            continue
        argv, notes = _stand_ins(words[1:], work)
        name = f"{plan['config_key']}/{plan['variant']}/client {bench.get('name') or bench['concurrency']}"
        out.append(
            ClientLine(name, tuple(argv), tuple(sorted(env.items())), plan.get("client_scenario"), notes)
        )
    return out


def _env_and_program(words: list) -> tuple[dict, list]:
    """`env -u NAME ... NAME=VALUE ... prog ...` -> ({NAME: VALUE}, [prog, ...]); the -u pairs unset what only
    a node's environment holds (the probe's has none of it)."""
    if words[:1] != ["env"]:
        return {}, list(words)
    rest = list(words[1:])
    while len(rest) > 1 and rest[0] == "-u":
        rest = rest[2:]
    return split_env(["env", *rest])


def _stand_ins(argv: list, work: Path) -> tuple[list, tuple]:
    """Paths only a node has, swapped for ones that exist here: a tokenizer that loads offline, an empty
    folder for an input file (the client's own checks of what the line asks for still run)."""
    argv, notes = list(argv), []
    if "--tokenizer" in argv:
        i = argv.index("--tokenizer") + 1
        if not Path(argv[i]).is_dir():
            notes.append(f"tokenizer {argv[i]} read as a stand-in")
            argv[i] = str(STAND_IN_TOKENIZER)
    if "--input-file" in argv:
        i = argv.index("--input-file") + 1
        if not Path(argv[i]).exists():
            notes.append(f"input {argv[i]} read as an empty folder")
            argv[i] = str(work / "empty-input")
            (work / "empty-input").mkdir(parents=True, exist_ok=True)
    return argv, tuple(notes)


def judge_clients(lines: list[ClientLine], cache: Path) -> list[ClientVerdict]:
    """One probe process per environment the lines set (AIPerf reads it at import), in line order."""
    if not lines:
        return []
    if not CLIENT_PYTHON.is_file():
        raise ToolMissing("the benchmark client's lines need .venv-bench (AIPerf): run `make tools`")
    groups: dict[tuple, list[ClientLine]] = {}
    for line in lines:
        groups.setdefault(line.env, []).append(line)
    answers: dict[int, dict] = {}
    (cache / "runs").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="client-", dir=cache / "runs") as tmp:
        for n, (env, mine) in enumerate(groups.items()):
            request, answer = Path(tmp) / f"request-{n}.json", Path(tmp) / f"answer-{n}.json"
            items = [{"id": str(id(line)), "argv": list(line.argv)} for line in mine]
            request.write_text(json.dumps({"env": dict(env), "lines": items}))
            done = subprocess.run(
                [str(CLIENT_PYTHON), "-E", "-s", str(PROBES / "probe_aiperf.py"), str(request), str(answer)],
                env={**probe_env(cache), "HF_DATASETS_OFFLINE": "1"},
                capture_output=True,
                text=True,
                timeout=ENGINE_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            if done.returncode != 0 or not answer.is_file():
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
                raise RuntimeError(f"the AIPerf probe failed (exit {done.returncode}):\n{tail}")
            for r in json.loads(answer.read_text())["results"]:
                answers[int(r["id"])] = r
    return [verdict(line, answers[id(line)]) for line in lines]


def verdict(line: ClientLine, result: dict) -> ClientVerdict:
    """The client's own verdict, then the plan's expectations of its scenario outcome."""
    if result["verdict"] != "ok":
        return ClientVerdict(line, False, result["message"], result["stage"])
    problems = expectation_problems(line.expect, result.get("scenario"), result.get("datasets") or {})
    if problems:
        return ClientVerdict(line, False, "; ".join(problems), "scenario outcome", result.get("scenario"))
    return ClientVerdict(line, True, scenario=result.get("scenario"))


def expectation_problems(expect: dict | None, scenario: dict | None, datasets: dict) -> list[str]:
    if expect is None:
        return (
            [f"the client applied scenario {scenario['name']} the plan does not expect"] if scenario else []
        )
    if scenario is None or scenario["name"] != expect["name"]:
        return [
            f"the client did not apply scenario {expect['name']} (it applied {scenario and scenario['name']})"
        ]
    out = []
    if scenario["submission_valid"] != expect["submission"]:
        out.append(
            f"the client stamps submission_valid={str(scenario['submission_valid']).lower()}, the plan "
            f"expects {str(expect['submission']).lower()}"
        )
    extra = sorted(set(scenario["violations"]) - set(expect["allowed_violations"]))
    if extra:
        out.append(f"scenario violations the plan does not carry knowingly: {', '.join(extra)}")
    if expect["dataset"] not in datasets:
        out.append(
            f"the client does not read --public-dataset {expect['dataset']} "
            f"(it reads: {', '.join(datasets) or 'none'})"
        )
    return out


def verdict_line(v: ClientVerdict) -> str:
    if not v.ok:
        return f"{v.line.name}: REJECTED: {v.message} [{v.stage}]"
    notes = list(v.line.notes)
    if v.scenario:
        valid = str(v.scenario["submission_valid"]).lower()
        allowed = (
            f", violations carried: {', '.join(v.scenario['violations'])}" if v.scenario["violations"] else ""
        )
        notes.insert(0, f"scenario {v.scenario['name']}: submission_valid={valid}{allowed}")
    return f"{v.line.name}: ok" + (f" ({'; '.join(notes)})" if notes else "")


def summary(verdicts: list[ClientVerdict]) -> str:
    rejected = sum(not v.ok for v in verdicts)
    return f"clients: {len(verdicts)} client lines checked, {rejected} rejected"
