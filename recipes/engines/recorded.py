"""Judge engine command lines by a recorded description of the engine's parser (recipes/engines/recorded/),
for an engine whose parser is on no package registry reachable here (ATOM): an argparse parser is rebuilt
from the description, in this process, and parses each line. What it checks: every flag is one the engine
has (abbreviations as the engine's parser allows them), takes the values it takes, of its types and
choices. What it cannot: the engine's own checks past parsing. Its verdicts say so; the engine's code never
runs."""

from __future__ import annotations

import argparse
import json
import time
from functools import cache
from pathlib import Path

from .lines import PROGRAMS, Line

ROOT = Path(__file__).resolve().parents[2]
# The conversions a recorded option may name (probe_argdump writes a type's __name__).
TYPES = {None: None, "str": str, "int": int, "float": float, "loads": json.loads}
SWITCHES = ("store_true", "store_false")


class Refused(Exception):
    """The rebuilt parser refused the line: argparse's own message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit
        raise Refused(message)


def _nargs(arity: str):
    return None if arity == "1" else int(arity) if arity.isdigit() else arity


def rebuild(description: dict) -> argparse.ArgumentParser:
    """An argparse parser that accepts what the described one accepts (ValueError for a kind it cannot)."""
    parser = _Parser(
        prog=description["engine"], allow_abbrev=description.get("allow_abbrev", True), add_help=False
    )
    for option in description["options"]:
        names, kind = option["option_strings"], option["kind"]
        kw: dict = {"dest": option["dest"]}
        if kind in SWITCHES:
            kw["action"] = kind
        elif kind == "bool_pair":  # --x and --no-x: argparse makes the second from the first
            names, kw["action"] = (
                [n for n in names if not n.startswith("--no-")],
                argparse.BooleanOptionalAction,
            )
        elif kind in ("store", "append"):
            if option["type"] not in TYPES:
                raise ValueError(f"{names[0]}: type {option['type']!r} is not one a recorded parser converts")
            kw.update(action=kind, nargs=_nargs(option["arity"]), type=TYPES[option["type"]])
            if option["choices"] is not None:
                kw["choices"] = option["choices"]
        elif kind == "count":
            kw["action"] = "count"
        else:
            raise ValueError(f"{names[0]}: action {kind!r} is not one a recorded parser rebuilds")
        parser.add_argument(*names, **kw)
    return parser


@cache
def parser_of(recorded: str) -> argparse.ArgumentParser:
    return rebuild(json.loads((ROOT / recorded).read_text(encoding="utf-8")))


def judge(line: Line):
    """The line's Verdict (recipes/engines/judge.py) from its build's recorded parser."""
    from .judge import Verdict  # judge imports this module: its Verdict is the one kind of answer

    started = time.perf_counter()
    program = PROGRAMS[line.build.engine]
    words = list(line.argv)
    try:
        if tuple(words[: len(program)]) != program:
            raise Refused(f"not a `{' '.join(program)}` command line: {words[: len(program)]}")
        parser_of(line.build.parser.recorded).parse_args(words[len(program) :])
    except Refused as refused:
        ms = (time.perf_counter() - started) * 1000
        return Verdict(line, False, f"error: {refused}", "parse (recorded parser)", round(ms, 1))
    return Verdict(line, True, "", "", round((time.perf_counter() - started) * 1000, 1))
