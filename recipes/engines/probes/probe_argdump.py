"""An argparse parser described as data: every option string it accepts, its arity, kind and choices.

Standard library only: the probes describe the real engines' parsers with it (inside their virtualenvs),
and the simulator parity test describes sim/'s parsers with it, so both sides are seen the same way.
Defaults are left out: some depend on the machine (cache folders, CPU count), and parity is about what a
command line may say, not what it leaves unsaid.
"""

from __future__ import annotations

import argparse
import enum
from typing import Any

BOOLEAN_SWITCHES = {"_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false"}


def _type_name(t) -> str | None:
    if t is None:
        return None
    name = getattr(t, "__name__", None) or getattr(t, "__qualname__", None)
    if isinstance(name, str):
        return name
    func = getattr(t, "func", None)  # functools.partial
    return f"partial({_type_name(func)})" if func is not None else type(t).__name__


def kind(action: argparse.Action) -> str:
    """store | store_true | store_false | bool_pair | store_const | append | count | <custom class>."""
    name = type(action).__name__
    if name in BOOLEAN_SWITCHES:
        return BOOLEAN_SWITCHES[name]
    if isinstance(action, argparse.BooleanOptionalAction) or name == "EnableDisableAction":
        return "bool_pair"
    for cls, word in (
        (argparse._StoreConstAction, "store_const"),
        (argparse._AppendAction, "append"),
        (argparse._CountAction, "count"),
        (argparse._StoreAction, "store"),
    ):
        if isinstance(action, cls):
            return word
    return name


def arity(action: argparse.Action) -> str:
    """'0' (a switch), '1', '?', '*', '+' or a number."""
    if action.nargs is None:
        switch = kind(action) in ("store_true", "store_false", "store_const", "count", "bool_pair")
        return "0" if switch else "1"
    return str(action.nargs)


def _choices(action: argparse.Action) -> list | None:
    if action.choices is None:
        return None
    values = [c.value if isinstance(c, enum.Enum) else c for c in action.choices]
    return sorted(values, key=str)  # a set of choices has no order: keep dumps stable


def describe(parser: argparse.ArgumentParser, *, engine: str, version: str) -> dict:
    accepted: dict[int, list[str]] = {}
    for text, action in parser._option_string_actions.items():
        accepted.setdefault(id(action), []).append(text)
    deprecated = {id(a) for a in getattr(parser, "_deprecated", ())}
    options: list[dict[str, Any]] = []
    positionals: list[dict[str, Any]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        entry = {
            "dest": action.dest,
            "option_strings": list(action.option_strings),
            "accepted": sorted(accepted.get(id(action), [])),
            "kind": kind(action),
            "arity": arity(action),
            "type": _type_name(action.type),
            "choices": _choices(action),
            "required": bool(action.required),
            "deprecated": bool(getattr(action, "deprecated", False)) or id(action) in deprecated,
        }
        (options if action.option_strings else positionals).append(entry)
    options.sort(key=lambda o: o["option_strings"][0].lstrip("-"))
    return {
        "engine": engine,
        "version": version,
        "allow_abbrev": parser.allow_abbrev,
        "positionals": positionals,
        "options": options,
    }
