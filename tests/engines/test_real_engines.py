"""The real engines judge the rendered command lines: `make check-engines` passes on every shipped config,
and lines mutated the way mistakes happen are refused in the engine's own words. The mutated lines go
through one probe process per engine, which also describes each parser: the descriptions must be the ones
committed in sim/parity/, which the simulators build their parsers from (sim/realflags.py).

Slow (each engine imports for 20-70 s): one `make check-engines` and one judge() per module."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess

import pytest

from recipes.build import build_plan
from recipes.engines.judge import judge
from recipes.engines.lines import Line, engine_lines
from recipes.render import render_plan
from scripts import causes
from tests.recipes import test_one_verdict as one_verdict

from .conftest import ROOT, need_tools

pytestmark = pytest.mark.tools  # needs a tool virtualenv (`make tools`): not run by make test-unit

KIMI = ("kimik2.5-fp4-mi355x-vllm-disagg-agentic", "agentic_p1x8_d1x8_conc8")
UPSTREAM = ("minicpm-sala-bf16-h200-sglang-upstream", "fsl8k1k_tp1")
PARITY = ROOT / "sim" / "parity"


@pytest.fixture(scope="module")
def check_run(builds):
    need_tools(builds)
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), "check-engines"], capture_output=True, text=True, timeout=1800
    )


def test_make_check_engines_passes_on_every_config(check_run, plans):
    lines = check_run.stdout.splitlines()
    assert check_run.returncode == 0, check_run.stdout + check_run.stderr
    at = next(i for i, line in enumerate(lines) if line.startswith("engines: "))
    out, clients = lines[: at + 1], lines[at + 1 :]
    roles = sum(len(plan["roles"]) for plan in plans.values())
    unchecked = r"\d+ declared flags unchecked \(--dense-as-sparse\)"
    assert re.fullmatch(rf"engines: {roles} command lines checked, 0 rejected; {unchecked}", out[-1])
    judged = {line.split(": ", 1)[0].rsplit("/", 2)[0] for line in out[:-1]}
    assert judged == {key for key, _ in plans}
    assert all(line.split(": ", 1)[1].startswith("ok") for line in out[:-1])
    # then every client line, through the client's own resolution
    benchmarks = sum(len(plan["benchmarks"]) for plan in plans.values())
    assert clients[-1] == f"clients: {benchmarks} client lines checked, 0 rejected"
    assert all(": ok" in line for line in clients[:-1]) and len(clients) == benchmarks + 1
    assert "(a first run: 20-70 s)" in check_run.stderr  # progress, so a user knows it works


def _argv_with(line: Line, flag: str, value: str) -> tuple:
    argv = list(line.argv)
    argv[argv.index(flag) + 1] = value
    return tuple(argv)


def _kv_role(line: Line, role: str) -> tuple:
    config = json.loads(line.argv[line.argv.index("--kv-transfer-config") + 1])
    return _argv_with(line, "--kv-transfer-config", json.dumps({**config, "kv_role": role}))


def _mutations(plans, builds, stubs) -> dict:
    prefill, decode = engine_lines(plans[KIMI], builds, stubs)
    (server,) = engine_lines(plans[UPSTREAM], builds, stubs)
    variants = {
        "vllm-unknown-flag": (prefill, (*prefill.argv, "--no-such-flag", "1")),
        "vllm-bad-kv-role": (decode, _kv_role(decode, "kv_sender")),
        "vllm-tp-not-dividing-heads": (prefill, _argv_with(prefill, "--tensor-parallel-size", "3")),
        "vllm-max-model-len-too-long": (decode, _argv_with(decode, "--max-model-len", "300000")),
        "sglang-upstream-pd": (server, (*server.argv, "--disaggregation-mode", "prefill")),
        "sglang-fork-flag-upstream": (server, (*server.argv, "--dense-as-sparse")),
        "sglang-context-too-long": (server, (*server.argv, "--context-length", "1048576")),
    }
    return {name: dataclasses.replace(line, name=name, argv=argv) for name, (line, argv) in variants.items()}


@pytest.fixture(scope="module")
def refused(builds, plans, tmp_path_factory):
    """The verdicts of the mutated lines, and the folder the parsers were described into."""
    need_tools(builds)
    dumps = tmp_path_factory.mktemp("parsers")
    stubs = tmp_path_factory.mktemp("stubs")
    lines = [*_mutations(plans, builds, stubs).values(), *_yaml_only_model(builds, stubs, tmp_path_factory)]
    verdicts = judge(lines, dump_dir=dumps, say=lambda text: None)
    by_name = {v.line.name: v for v in verdicts}
    ok = {name: by_name.pop(name) for name in list(by_name) if name.startswith(one_verdict.KEY)}
    return by_name, dumps, ok


def _yaml_only_model(builds, stubs, tmp_path_factory) -> list:
    """The engine lines of tests/recipes/test_one_verdict.py's new model on a new cluster (YAML only)."""
    _, loaded = one_verdict.lint_files(tmp_path_factory.mktemp("minimax"), one_verdict.MASTER)
    (target,) = loaded.targets(one_verdict.KEY)
    plan = json.loads(render_plan(build_plan(target)).files["plan.json"])
    return engine_lines(plan, builds, stubs)


def test_a_model_added_as_yaml_only_passes_the_real_engine(refused):
    """MiniMax-M2.5 with InferenceX's MI355X flags, EP8 and 4K batched tokens: vLLM 0.33 takes both lines."""
    ok = refused[2]
    assert len(ok) == 2 and all(v.ok for v in ok.values()), [v.message for v in ok.values()]


@pytest.mark.parametrize(
    "name, stage, message",
    [
        ("vllm-unknown-flag", "parse", "vllm: error: unrecognized arguments: --no-such-flag 1"),
        (
            "vllm-bad-kv-role",
            "parse",
            "argument --kv-transfer-config: 1 validation error for KVTransferConfig | kv_role | Input should "
            "be 'kv_producer', 'kv_both' or 'kv_consumer'",
        ),
        (
            "vllm-tp-not-dividing-heads",
            "create_engine_config",
            "Total number of attention heads (64) must be divisible by tensor parallel size (3).",
        ),
        (
            "vllm-max-model-len-too-long",
            "create_engine_config",
            "User-specified max_model_len (300000) is greater than the derived max_model_len "
            "(max_position_embeddings=262144",
        ),
        # configs/engine-builds.yaml: upstream SGLang 0.5.23 runs MiniCPM-SALA on one node only.
        (
            "sglang-upstream-pd",
            "resolve",
            "ValueError: MiniCPM sparse attention does not support PD disaggregation",
        ),
        ("sglang-fork-flag-upstream", "parse", "error: unrecognized arguments: --dense-as-sparse"),
        (
            "sglang-context-too-long",
            "resolve",
            "User-specified context_length (1048576) is greater than the derived context_length (524288)",
        ),
    ],
)
def test_mistakes_are_refused_in_the_engines_own_words(refused, name, stage, message):
    verdict = refused[0][name]
    assert not verdict.ok and verdict.stage == stage and message in verdict.message, verdict.message
    assert "/.cache/" not in verdict.message  # the stub folder is shown as the model path the node has


def test_the_engines_own_refusals_are_classified_as_the_config_s_fault(refused):
    """scripts/causes.json knows every refusal above in the real engines' words: a node whose engine
    refuses its line is classified engine-flag-rejected (blame config), never excluded as faulty."""
    registry = causes.load()
    for name, verdict in refused[0].items():
        got = causes.classify(registry, text=verdict.message, code="1", service=name.split("-")[0])
        assert (got.id, got.blame) == ("engine-flag-rejected", "config"), (name, verdict.message, got)


@pytest.mark.parametrize("dump", ["vllm-0.33.0.json", "sglang-0.5.23.json"])
def test_the_committed_parser_descriptions_are_current(refused, dump):
    fresh = (refused[1] / dump).read_text()
    assert fresh == (PARITY / dump).read_text(), (
        f"sim/parity/{dump} is stale: `.venv/bin/python -m recipes.engines --dump-parsers sim/parity`, "
        "then make tests/sim/test_parity.py pass"
    )
