"""Findings: one problem each, located by file, line and key path, printed in one format."""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from .yamlio import Document, Path_, YamlSyntaxError

# A finding is one line of plain text: a key or value from the file must not split it (line breaks), drive
# the terminal (C0/C1 controls such as ESC, DEL), reorder or hide what is shown (bidi overrides, isolates,
# marks, zero-width characters) or fail to print at all (a lone surrogate). Every character Python does not
# call printable is shown as its escape.
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int
    path: Path_  # key path from the document root; str keys, int list indices
    message: str
    hint: str = ""

    def format(self) -> str:
        where = format_path(self.path) or "<document>"
        tail = f" ({self.hint})" if self.hint else ""
        return one_line(f"{self.file}:{self.line}: {where}: {self.message}{tail}")


def one_line(text: str) -> str:
    """`text` with every line break, control character, bidi control and other unprintable escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    if c in _ESCAPES:
        return _ESCAPES[c]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def unreadable(exc: YamlSyntaxError) -> Finding:
    """The one finding of a file that cannot be read as plain data."""
    return Finding(exc.file, exc.line, exc.path, exc.message, exc.hint)


def format_path(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass(frozen=True)
class Problem:
    """A finding before it knows its file and line: what rules return."""

    path: Path_
    message: str
    hint: str = ""

    def at(self, doc: Document) -> Finding:
        return Finding(doc.file, doc.line_of(self.path), self.path, self.message, self.hint)


def did_you_mean(word: object, choices: Iterable[object], *, prefix: str = "did you mean") -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"{prefix} '{close[0]}'?" if close else ""


def one_of(choices: Iterable[object]) -> str:
    return "one of: " + ", ".join(str(c) for c in choices)


def validation_problems(
    exc: ValidationError, model: type[BaseModel] | TypeAdapter[Any], base: Path_ = ()
) -> list[Problem]:
    """Turn pydantic's errors into Problems with a readable message and, where possible, a fix."""
    out = []
    for err in exc.errors(include_url=False):
        problem = _problem(err, tuple(err["loc"]), model)  # loc relative to `model`, for its known keys
        out.append(Problem(base + problem.path, problem.message, problem.hint))
    return out


def _problem(err: ErrorDetails, loc: Path_, model: type[BaseModel] | TypeAdapter[Any]) -> Problem:
    kind = err["type"]
    if loc[-1:] == ("[key]",):  # a mapping key of the wrong shape: point at the key itself
        loc = loc[:-1]
    if kind in ("shape", "range"):  # ours (schemas/base.py): the message names the value, ctx the fix
        return Problem(loc, err["msg"], err["ctx"]["fix"])
    if kind == "extra_forbidden":
        known = _known_keys_at(model, loc[:-1])
        hint = did_you_mean(loc[-1], known) or (one_of(sorted(known)) if known else "")
        return Problem(loc, f"unknown key '{loc[-1]}'", hint)
    if kind == "missing":
        return Problem(loc, f"missing required key '{loc[-1]}'")
    msg = err["msg"]
    if kind.startswith("value_error") or kind == "assertion_error":
        msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    got = err.get("input")
    hint = ""
    if kind == "literal_error" and isinstance(got, str):
        choices = err.get("ctx", {}).get("expected", "")
        hint = did_you_mean(got, [c.strip(" '") for c in choices.replace(" or ", ",").split(",")])
    if not isinstance(got, (dict, list)) and kind not in ("value_error",):
        msg = f"{msg[0].lower()}{msg[1:]}, got {got!r}"
    return Problem(loc, msg, hint)


def _known_keys_at(model: type[BaseModel] | TypeAdapter[Any], loc: Path_) -> list[str]:
    """Aliases accepted at `loc` (walks nested models, lists and dicts by the declared annotations)."""
    current = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    current = _unwrap(current)  # an optional block (prefill: Worker | None) still lists Worker's keys
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _step(tp: Any, part: Hashable) -> Any:
    """The declared type one key (or index) below `tp`, None when `tp` declares none."""
    import typing

    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if getattr(tp, "__pydantic_root_model__", False):
            return _step(tp.model_fields["root"].annotation, part)
        for name, f in tp.model_fields.items():
            if part in (name, f.alias):
                return f.annotation
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list, tuple) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _unwrap(tp: Any) -> Any:
    """Strip Optional/Annotated down to the one concrete type (None for real unions)."""
    import types
    import typing

    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return None
            tp = rest[0]
        else:
            return tp
