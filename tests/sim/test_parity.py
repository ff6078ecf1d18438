"""The simulators' command lines against the real parsers' recorded inventories.

The simulators' parsers are built from those inventories (sim/realflags.py): option strings, arity, on/off
forms and choices are the real parser's by construction, so what is tested here is what construction does
not give: the inventories are of the pinned parsers, the simulator's own readings of values agree with the
real types, the on/off rule reads every recorded pair, the fork's flags are exactly the declared ones, a real
flag the simulator does not implement is refused as such, and abbreviations resolve as the real argparse's.

The real side is sim/parity/<engine>-<version>.json, written by `python -m recipes.engines --dump-parsers
sim/parity`; tests/engines/test_parsers.py keeps it current with the tool virtualenvs. The SGLang simulator
stands for OpenBMB's MiniCPM-SALA fork, which is not on PyPI: its inventory is upstream SGLang 0.5.23's plus
exactly the flags configs/engine-builds.yaml declares for that build, which is also what `make
check-engines` judges the fork's lines by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schemas.engine_builds import EngineBuild, check_engine_builds
from schemas.pins import requirements
from schemas.yamlio import load_file
from sim import cli, realflags, sglang_cli

ROOT = Path(__file__).resolve().parents[2]
FORK = "sglang-minicpm-sala-fork"  # the build the SGLang simulator stands for
ENGINES = ["vllm", "sglang"]
SIMULATORS: dict[str, Any] = {"vllm": cli, "sglang": sglang_cli}


def _builds() -> dict[str, EngineBuild]:
    return {b.id: b for b in check_engine_builds(load_file(ROOT / "configs" / "engine-builds.yaml"))[0]}


def _extra(engine: str) -> realflags.Extra:
    return sglang_cli.EXTRA if engine == "sglang" else ()


def test_the_dumps_are_of_the_pinned_parsers() -> None:
    builds = _builds()
    assert builds[FORK].parser.package == "sglang"
    for engine in ENGINES:
        data = json.loads(realflags.dump_file(engine).read_text())
        assert data["engine"] == engine and data["options"]
        assert f"{engine}=={data['version']}" in requirements(f"engine-{engine}")
        assert realflags.dump_file(engine).name == f"{engine}-{data['version']}.json"
    assert builds[FORK].parser.version == realflags.description("sglang")["version"]


def test_the_sglang_simulator_has_exactly_the_forks_declared_flags() -> None:
    assert sglang_cli.FORK_FLAGS == {f.flag: f.values for f in _builds()[FORK].extra_flags}


def _family(type_name: str | None) -> str | None:
    """What a value is read as: human (k/K-suffixed integers), int, float, str; None: not known here."""
    if type_name is not None and type_name.startswith("human"):
        return "human"
    return {"int": "int", "float": "float", "str": "str", None: "str"}.get(type_name)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_simulators_read_values_as_the_real_parsers_type_them(engine: str) -> None:
    """A converter the simulator names (human_int, int, ...) reads the kind of value the real one does;
    a recorded type this test cannot place (vLLM's _optional_type wrappers) is left to the behaviour tests."""
    table = realflags.by_name(engine, _extra(engine))
    wrong = []
    for action in SIMULATORS[engine].build_parser()._actions:
        if not action.option_strings or action.type is None:
            continue
        real = table[action.option_strings[0]]
        real_family, sim_family = _family(real["type"]), _family(getattr(action.type, "__name__", None))
        if real_family and sim_family and real_family != sim_family:
            wrong.append(f"{action.option_strings[0]}: sim reads {action.type}, real type {real['type']}")
    assert wrong == []


@pytest.mark.parametrize("engine", ENGINES)
def test_every_recorded_on_off_pair_has_one_on_form_per_name(engine: str) -> None:
    """off_strings's rule (`--no-x`, and the `--disable-`/`--enable-` opposite of the dest) leaves exactly
    the dest's own option (and short aliases) meaning True, in every pair recorded."""
    wrong = []
    for option in realflags.options(engine):
        if option["kind"] != "bool_pair":
            continue
        off = realflags.off_strings(option)
        on = [s for s in option["accepted"] if s not in off]
        if not off or [s for s in on if s.startswith("--")] != ["--" + option["dest"].replace("_", "-")]:
            wrong.append(f"{option['dest']}: on {on}, off {sorted(off)}")
    assert wrong == []


def test_deliberately_narrower_values_are_real_ones() -> None:
    backends = realflags.by_name("sglang")["--disaggregation-transfer-backend"]["choices"]
    assert set(sglang_cli.SIMULATED_TRANSFERS) <= set(backends)
    assert set(cli.startup_choices()) == {"kv_cache_dtype", "distributed_executor_backend"}


@pytest.mark.parametrize(
    "engine, argv, flag",
    [
        ("vllm", ["/m", "--enable-lora", "--port", "1"], "--enable-lora"),
        ("vllm", ["/m", "--no-enable-lora"], "--no-enable-lora"),
        ("vllm", ["/m", "--max-loras", "4"], "--max-loras"),
        ("vllm", ["/m", "--max-cpu-lo", "4"], "--max-cpu-loras"),  # an abbreviation of one
        ("sglang", ["--model-path", "m", "--cuda-graph-bs-decode", "1", "2"], "--cuda-graph-bs-decode"),
    ],
)
def test_a_real_flag_not_simulated_is_refused_by_name(
    engine: str, argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parse = cli.parse_serve_args if engine == "vllm" else sglang_cli.parse_args
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    assert f"error: argument {flag}: not simulated ({engine} " in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, expanded",
    [
        (["/m", "--max-model", "1000"], ["/m", "--max-model-len", "1000"]),
        (["/m", "--tensor-parallel", "8"], ["/m", "--tensor-parallel-size", "8"]),
        (["/m", "--max-model-len=1k"], ["/m", "--max-model-len=1k"]),
    ],
)
def test_vllm_abbreviations_resolve_as_the_real_parser(argv: list[str], expanded: list[str]) -> None:
    # The real parsers abbreviate (argparse's allow_abbrev); the simulators expand first, the same way.
    assert all(realflags.description(engine)["allow_abbrev"] for engine in ENGINES)
    assert realflags.expand(argv, realflags.vocabulary("vllm"), pytest.fail) == expanded


def test_an_ambiguous_abbreviation_is_refused_as_the_real_parser_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_serve_args(["/m", "--max-num", "4"])
    assert exit_info.value.code == 2
    assert "ambiguous option: --max-num could match --max-num-" in capsys.readouterr().err


def test_sglang_abbreviations_resolve_over_real_and_declared_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = sglang_cli.parse_args(["--model-path", "m", "--tp", "8", "--dense-as-sparse"])
    assert (args.tp_size, args.dense_as_sparse) == (8, True)
    with pytest.raises(SystemExit):
        sglang_cli.parse_args(["--model-path", "m", "--cuda-graph-max", "8"])
    assert "ambiguous option: --cuda-graph-max could match" in capsys.readouterr().err
