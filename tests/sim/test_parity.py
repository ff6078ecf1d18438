"""The simulators' command lines held to the real parsers: every option string, arity, on/off form and
choice the simulated vLLM and SGLang accept is the real parser's.

The real side is a description of each pinned parser (sim/parity/<engine>-<version>.json, written by
`python -m recipes.engines --dump-parsers sim/parity`; tests/engines/test_parsers.py keeps it current with
the tool virtualenvs). The SGLang simulator stands for OpenBMB's MiniCPM-SALA fork, which is not on PyPI:
it is held to upstream SGLang 0.5.23's parser plus exactly the flags configs/engine-builds.yaml declares for
that build, which is also what `make check-engines` judges the fork's lines by.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipes.engines.probes.probe_argdump import describe
from schemas.engine_builds import check_engine_builds
from schemas.pins import requirements
from schemas.yamlio import load_file
from sim import cli, realflags, sglang_cli

ROOT = Path(__file__).resolve().parents[2]

FORK = "sglang-minicpm-sala-fork"  # the build the SGLang simulator stands for
ARITY = {"none": "0", "one": "1", "one-or-more": "+"}
HUMAN_INTS = {"human_readable_int", "human_readable_int_or_auto"}


def _builds() -> dict:
    return {b.id: b for b in check_engine_builds(load_file(ROOT / "configs" / "engine-builds.yaml"))[0]}


def _sides(engine: str) -> tuple[dict, dict, dict]:
    """(real description, the simulator's, declared extra flags -> their values) of one engine."""
    if engine == "vllm":
        sim, declared = describe(cli.build_parser(), engine="sim", version=cli.VERSION), {}
    else:
        sim = describe(sglang_cli.build_parser(), engine="sim", version=sglang_cli.VERSION)
        declared = {f.flag: f.values for f in _builds()[FORK].extra_flags}
    return realflags.description(engine), sim, declared


def _by_string(description: dict) -> dict:
    return {s: o for o in description["options"] for s in o["accepted"]}


ENGINES = ["vllm", "sglang"]


def test_the_dumps_are_of_the_pinned_parsers():
    builds = _builds()
    assert builds[FORK].parser.package == "sglang"
    for engine in ENGINES:
        version = realflags.description(engine)["version"]
        assert f"{engine}=={version}" in requirements(f"engine-{engine}")
        assert realflags.dump_file(engine).name == f"{engine}-{version}.json"
    assert builds[FORK].parser.version == realflags.description("sglang")["version"]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_option_string_is_real(engine):
    real, sim, declared = _sides(engine)
    known = _by_string(real)
    extra = sorted(s for o in sim["options"] for s in o["accepted"] if s not in known and s not in declared)
    assert extra == [], f"the {engine} simulator accepts option strings the real parser lacks"


@pytest.mark.parametrize("engine", ENGINES)
def test_an_option_has_the_real_aliases_arity_and_form(engine):
    real, sim, declared = _sides(engine)
    known = _by_string(real)
    wrong = []
    for o in sim["options"]:
        first = o["accepted"][0]
        if first in declared:
            if set(o["accepted"]) != {first} or o["arity"] != ARITY[declared[first]]:
                wrong.append(f"{first}: declared {declared[first]}, sim {o['accepted']} arity {o['arity']}")
            continue
        r = known[first]
        if set(o["accepted"]) != set(r["accepted"]):
            wrong.append(f"{first}: sim accepts {o['accepted']}, real {r['accepted']}")
        if o["arity"] != r["arity"]:
            wrong.append(f"{first}: sim arity {o['arity']}, real {r['arity']}")
        if (o["kind"] == "bool_pair") != (r["kind"] == "bool_pair"):
            wrong.append(f"{first}: sim {o['kind']}, real {r['kind']}")
        if (r["type"] in HUMAN_INTS) != (o["type"] or "").startswith("human_int"):
            wrong.append(f"{first}: sim type {o['type']}, real {r['type']}")
    assert wrong == []


@pytest.mark.parametrize("engine", ENGINES)
def test_choices_are_the_real_ones(engine):
    """Parse-time choices equal the real parser's; values the real engine checks only later (a config
    field's Literal) are checked at start-up by the simulator too, against the same values."""
    real, sim, _ = _sides(engine)
    known = _by_string(real)
    startup = {"vllm": cli.STARTUP_CHOICES, "sglang": {}}[engine]
    wrong = []
    for o in sim["options"]:
        r = known.get(o["accepted"][0])
        if r is None:
            continue  # a declared flag of the fork
        real_choices = None if r["choices"] is None else sorted(map(str, r["choices"]))
        sim_choices = None if o["choices"] is None else sorted(map(str, o["choices"]))
        if sim_choices != real_choices:
            wrong.append(f"{o['accepted'][0]}: sim choices {sim_choices}, real {real_choices}")
        later = r.get("literal_values") if real_choices is None else None
        checked = sorted(map(str, startup.get(o["dest"], ()))) or None
        if later and checked != sorted(later):
            wrong.append(f"{o['accepted'][0]}: sim checks {checked} at start-up, real {later}")
    assert wrong == []


@pytest.mark.parametrize("engine", ENGINES)
def test_positionals_and_abbreviations_are_the_real_ones(engine):
    real, sim, _ = _sides(engine)
    assert [(p["dest"], p["arity"]) for p in sim["positionals"]] == [
        (p["dest"], p["arity"]) for p in real["positionals"]
    ]
    # The simulators resolve abbreviations themselves, over the real parser's option strings.
    assert real["allow_abbrev"] is True and sim["allow_abbrev"] is False


@pytest.mark.parametrize(
    "argv, expanded",
    [
        (["/m", "--max-model", "1000"], ["/m", "--max-model-len", "1000"]),
        (["/m", "--tensor-parallel", "8"], ["/m", "--tensor-parallel-size", "8"]),
        (["/m", "--max-model-len=1k"], ["/m", "--max-model-len=1k"]),
    ],
)
def test_vllm_abbreviations_resolve_as_the_real_parser(argv, expanded):
    assert realflags.expand(argv, realflags.vocabulary("vllm"), lambda m: pytest.fail(m)) == expanded


def test_an_ambiguous_abbreviation_is_refused_as_the_real_parser_does(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_serve_args(["/m", "--max-num", "4"])
    assert exit_info.value.code == 2
    assert "ambiguous option: --max-num could match --max-num-" in capsys.readouterr().err


def test_sglang_abbreviations_resolve_over_real_and_declared_flags(capsys):
    args = sglang_cli.parse_args(["--model-path", "m", "--tp", "8", "--dense-as-sparse"])
    assert (args.tp_size, args.dense_as_sparse) == (8, True)
    with pytest.raises(SystemExit):
        sglang_cli.parse_args(["--model-path", "m", "--cuda-graph-max", "8"])
    assert "ambiguous option: --cuda-graph-max could match" in capsys.readouterr().err


def test_the_dumps_are_plain_data():
    for engine in ENGINES:
        data = json.loads(realflags.dump_file(engine).read_text())
        assert data["engine"] == engine and data["options"]


def test_the_sglang_simulator_has_exactly_the_forks_declared_flags():
    declared = {f.flag for f in _builds()[FORK].extra_flags}
    assert set(sglang_cli.FORK_FLAGS) == declared
    sim = {s for o in _sides("sglang")[1]["options"] for s in o["accepted"]}
    assert declared <= sim
