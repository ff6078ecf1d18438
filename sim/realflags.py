"""The simulators' command-line parsers built from the recorded inventories of the real engines' parsers.

sim/parity/ holds a description of each pinned parser (written by `python -m recipes.engines --dump-parsers
sim/parity`, kept current by tests/engines): every option with its option strings, arity, kind, choices and
dest. A simulator names the flags it implements and how it reads each value (`Use`); everything else comes
from the recording, so option strings, `--no-x` / `--disable-x` forms, arities and choices are the real
parser's by construction. Every other real flag is refused as not simulated (exit 2, naming the flag).
Abbreviations resolve as the real parsers' argparse does (allow_abbrev: a unique prefix of a real option
stands for it, a prefix of several is an error), over the same option strings, whatever Python runs the sim.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

PARITY = Path(__file__).resolve().parent / "parity"
# The parser each simulator is held to: the pinned vLLM; for SGLang the parser that judges the lines of
# the build it stands for (OpenBMB's fork: configs/engine-builds.yaml, sglang-minicpm-sala-fork).
PARSERS = {"vllm": "vllm-0.33.0.json", "sglang": "sglang-0.5.23.json"}
# A declared extra flag's values (configs/engine-builds.yaml, DeclaredFlag.values) as a recorded arity.
DECLARED_ARITY = {"none": "0", "one": "1", "one-or-more": "+"}
# The recorded types a simulator may leave unnamed: the value is read the same way.
PLAIN_TYPES: dict[str | None, Callable[[str], Any]] = {"int": int, "float": float, "str": str, None: str}

Option = dict[str, Any]  # one recorded option, as probe_argdump describes it
Extra = tuple[tuple[str, str], ...]  # declared extra flags: (flag, DeclaredFlag.values)


@dataclass(frozen=True)
class Use:
    """How a simulator reads one real flag: `type` converts the value into its config (None: the recorded
    type, when it is int, float or str), `default` stands when the flag is absent."""

    type: Callable[[str], Any] | None = None
    default: Any = None


def dump_file(engine: str) -> Path:
    return PARITY / PARSERS[engine]


@cache
def description(engine: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(dump_file(engine).read_text())
    return data


@cache
def options(engine: str, extra: Extra = ()) -> tuple[Option, ...]:
    """The recorded options, then `extra` (a build's declared flags) described the same way."""
    declared = [
        {
            "accepted": [flag],
            "option_strings": [flag],
            "dest": flag[2:].replace("-", "_"),
            "kind": "store_true" if values == "none" else "store",
            "arity": DECLARED_ARITY[values],
            "type": "unrecorded",  # the simulator names its converter
            "choices": None,
            "literal_values": None,
            "required": False,
        }
        for flag, values in extra
    ]
    return (*description(engine)["options"], *declared)


@cache
def vocabulary(engine: str, extra: Extra = ()) -> tuple[str, ...]:
    """Every long option string the real parser accepts (and `extra`: a build's declared flags)."""
    strings = [s for o in options(engine, extra) for s in o["accepted"] if s.startswith("--")]
    return tuple(dict.fromkeys(strings))


def by_name(engine: str, extra: Extra = ()) -> dict[str, Option]:
    """Each recorded option under every one of its accepted strings and its dest."""
    table = {s: o for o in options(engine, extra) for s in o["accepted"]}
    return {**{o["dest"]: o for o in options(engine, extra)}, **table}


def expand(argv: list[str], vocabulary: tuple[str, ...], error: Callable[[str], object]) -> list[str]:
    """`argv` with each abbreviated long option written out; `error` (argparse's parser.error) for a
    prefix of several. Unknown options are left for the parser to refuse."""
    out = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if not flag.startswith("--") or flag == "--" or flag in vocabulary:
            out.append(arg)
            continue
        matches = [o for o in vocabulary if o.startswith(flag)]
        if len(matches) > 1:
            error(f"ambiguous option: {arg} could match {', '.join(matches)}")
        out.append(matches[0] + eq + value if matches else arg)
    return out


class EnableDisableAction(argparse.Action):
    """An on/off pair (vLLM's EnableDisableAction, argparse's BooleanOptionalAction): `off` names the
    option strings that mean False."""

    def __init__(self, option_strings: Sequence[str], dest: str, off: frozenset[str], **kw: Any) -> None:
        self.off = off
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string not in self.off)


class DeprecatedStoreTrueAction(argparse.Action):
    """SGLang's deprecated switches: still True, with a warning."""

    def __init__(self, option_strings: Sequence[str], dest: str, default: Any = False, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        warning = f"'{option_string}' is deprecated and will be removed in a future release."
        print(f"WARNING {warning}", file=sys.stderr)
        setattr(namespace, self.dest, True)


class Parser(argparse.ArgumentParser):
    """A simulator's parser: `parse` expands abbreviations over the real option strings (as the real
    parser's allow_abbrev does) and refuses a real flag the simulator does not read, by name."""

    def __init__(self, engine: str, extra: Extra, read: frozenset[str], **kw: Any) -> None:
        super().__init__(allow_abbrev=False, **kw)  # parse() abbreviates, over the real flags
        self.real = f"{engine} {description(engine)['version']}"
        self.vocabulary = vocabulary(engine, extra)
        self.unread = frozenset(s for o in options(engine, extra) for s in o["accepted"]) - read

    def parse(self, argv: list[str]) -> argparse.Namespace:
        argv = expand(argv, self.vocabulary, self.error)
        for arg in argv[: argv.index("--") if "--" in argv else len(argv)]:
            if arg.partition("=")[0] in self.unread:
                self.error(
                    f"argument {arg.partition('=')[0]}: not simulated ({self.real} accepts it; the "
                    "simulator implements the subset sim/README.md describes)"
                )
        return self.parse_args(argv)


def off_strings(option: Option) -> frozenset[str]:
    """An on/off pair's option strings that mean False: `--no-x`, and `--disable-x` for an `enable_x`
    dest (`--enable-x` for a `disable_x` one)."""
    dest, accepted = option["dest"], option["accepted"]
    off = {s for s in accepted if s.startswith("--no-")}
    for on, opposite in (("enable_", "--disable-"), ("disable_", "--enable-")):
        if dest.startswith(on):
            off |= {s for s in accepted if s == opposite + dest.removeprefix(on).replace("_", "-")}
    return frozenset(off)


def _nargs(arity: str) -> int | str | None:
    return None if arity == "1" else int(arity) if arity.isdigit() else arity


def _strings(option: Option) -> list[str]:
    """The real option strings first, in the real order (argparse names an option by them in its
    messages), then the ones the real parser added itself (`--no-x`)."""
    return list(dict.fromkeys([*option["option_strings"], *option["accepted"]]))


def _add_used(parser: argparse.ArgumentParser, option: Option, use: Use) -> None:
    kind, names = option["kind"], _strings(option)
    kw: dict[str, Any] = {"dest": option["dest"], "required": option["required"]}
    if kind == "store_true":
        parser.add_argument(*names, action="store_true", **kw)
    elif kind == "bool_pair":
        parser.add_argument(
            *names, action=EnableDisableAction, off=off_strings(option), default=use.default, **kw
        )
    elif kind == "DeprecatedStoreTrueAction":
        parser.add_argument(*names, action=DeprecatedStoreTrueAction, **kw)
    elif kind == "store":
        convert = use.type or PLAIN_TYPES.get(option["type"])
        if convert is None:
            raise ValueError(f"{names[0]}: recorded type {option['type']!r}: name the simulator's converter")
        kw.update(nargs=_nargs(option["arity"]), type=convert, choices=option["choices"], default=use.default)
        parser.add_argument(*names, **kw)
    else:
        raise ValueError(f"{names[0]}: a recorded {kind!r} option the simulator cannot read")


def build(
    engine: str, prog: str, uses: Mapping[str, Use], *, extra: Extra = (), usage: str | None = None
) -> Parser:
    """The parser of the options `uses` names (by an option string or dest) among `engine`'s recorded ones
    (and `extra`), each read as it says, with the recorded positionals."""
    table, positionals = by_name(engine, extra), description(engine)["positionals"]
    unknown = sorted(set(uses) - set(table) - {p["dest"] for p in positionals})
    if unknown:
        raise ValueError(f"the simulator names {unknown}, which the recorded {engine} parser lacks")
    used = {id(table[name]): (table[name], use) for name, use in uses.items() if name in table}
    if len(used) != len([name for name in uses if name in table]):
        raise ValueError(f"the simulator names one {engine} option twice (by two of its strings or dest)")
    read = frozenset(s for option, _ in used.values() for s in option["accepted"])
    parser = Parser(engine, extra, read, prog=prog, usage=usage)
    for positional in positionals:
        use = uses.get(positional["dest"], Use())
        convert = use.type or PLAIN_TYPES[positional["type"]]
        parser.add_argument(positional["dest"], nargs=_nargs(positional["arity"]), type=convert)
    for option, use in used.values():
        _add_used(parser, option, use)
    return parser
