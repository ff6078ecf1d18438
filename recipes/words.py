"""Argv words that may hold runtime values, and the one place where anything is quoted for bash.

A Word is a tuple of parts: literal strings and Refs to bash variables known only on the node (its
address, peers' addresses) or defined once in env.sh. Literals are single-quoted, Refs expand inside
double quotes, so no config value can ever split, glob or execute.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*(\[[0-9]+\])?$")
_SENTINEL = "@@REF:{}@@"  # a Ref inside a Word: expands in place, inside its JSON string
_BARE_SENTINEL = "@@BARE:{}@@"  # a Ref value: becomes an unquoted value (a number)
_BARE = re.compile(r'"@@BARE:([A-Z0-9_\[\]]+)@@"')
_INLINE = re.compile(r"@@REF:([A-Z0-9_\[\]]+)@@")


@dataclass(frozen=True)
class Ref:
    """A bash variable, e.g. NODE_ADDR or PEER_ADDR[2]."""

    var: str

    def __post_init__(self) -> None:
        if not _VAR.fullmatch(self.var):
            raise ValueError(f"not a bash variable reference: {self.var!r}")


Word = tuple[str | Ref, ...]
Argv = tuple[Word, ...]


def word(*parts: object) -> Word:
    """Normalise parts (str, int, Ref) into a Word, merging adjacent literals."""
    if len(parts) == 1:  # most words are one value: a Plan holds hundreds, lint builds thousands of Plans
        only = parts[0]
        return (only if isinstance(only, Ref) else str(only),)
    out: list[str | Ref] = []
    for given in parts:
        part = given if isinstance(given, Ref) else str(given)
        last = out[-1] if out else None
        if isinstance(part, str) and isinstance(last, str):
            out[-1] = last + part
        else:
            out.append(part)
    return tuple(out) or ("",)


def argv(*items: object) -> Argv:
    """An argv: each item a Word, or a plain value/Ref made into one."""
    return tuple(item if isinstance(item, tuple) else word(item) for item in items)


def json_word(obj: object) -> Word:
    """Serialize `obj` to compact, key-sorted JSON as one Word. A Ref value becomes an unquoted runtime
    value (a number); a Word value becomes a JSON string with its Refs expanded in place."""

    def encode(o: object) -> object:
        if isinstance(o, Ref):
            return _BARE_SENTINEL.format(o.var)
        if isinstance(o, tuple):  # a Word
            return "".join(_SENTINEL.format(p.var) if isinstance(p, Ref) else p for p in o)
        if isinstance(o, dict):
            return {k: encode(v) for k, v in o.items()}
        if isinstance(o, list):
            return [encode(v) for v in o]
        return o

    text = json.dumps(encode(obj), sort_keys=True, separators=(",", ":"))
    parts: list[str | Ref] = []
    for i, chunk in enumerate(_BARE.split(text)):
        if i % 2:
            parts.append(Ref(chunk))
            continue
        for j, inner in enumerate(_INLINE.split(chunk)):
            parts.append(Ref(inner) if j % 2 else inner)
    return word(*[p for p in parts if p != ""])


def bash_word(w: Word) -> str:
    """Render one Word for bash: literals single-quoted, Refs as "${VAR}"."""
    out = []
    for part in w:
        if isinstance(part, Ref):
            out.append(f'"${{{part.var}}}"')
        elif part:
            out.append(shlex.quote(part))
    return "".join(out) or "''"


def bash_argv(words: Iterable[Word], indent: int = 0) -> str:
    """Render an argv; with indent > 0, continue on a new line before each flag so every flag sits
    with its value (readable diffs of long vLLM command lines)."""
    out = ""
    for i, w in enumerate(words):
        flag = isinstance(w[0], str) and w[0].startswith("-")
        out += ("" if i == 0 else " \\\n" + " " * indent if indent and flag else " ") + bash_word(w)
    return out


def plain(w: Word) -> str:
    """Human/JSON view of a Word: Refs shown as ${VAR}."""
    return "".join(f"${{{p.var}}}" if isinstance(p, Ref) else p for p in w)


def shown(w: Word) -> str:
    """plan.json's view of a Word: Refs as ${VAR}, a literal `$` doubled, so the two never mix."""
    return "".join(f"${{{p.var}}}" if isinstance(p, Ref) else p.replace("$", "$$") for p in w)


class Quoted(str):
    """Template output made safe for bash by a filter below: quoted, or checked to be one plain line."""


# What a template may place without a filter: a word bash reads as itself (numbers, generated names).
_PLAIN_WORD = re.compile(r"[A-Za-z0-9._:/@%+=,-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class UnsafePlacement(ValueError):
    """A template placed a value bash would not read as itself (a bug of the template: use a filter)."""


def finalize(value: object) -> str:
    """Every `{{ }}` of a bash template: a filter's output as it is; anything else only if it is a bare
    word, so no config value can reach bash unquoted even through a template that forgot its filter."""
    if isinstance(value, Quoted):
        return value
    text = str(value)
    if not _PLAIN_WORD.fullmatch(text):
        raise UnsafePlacement(f"template placed {text!r} without a quoting filter (| q, | word, | argv)")
    return text


def filters() -> dict[str, Callable[..., Quoted]]:
    """The filters of bash templates, each returning Quoted."""
    return {
        "q": lambda v: Quoted(shlex.quote(str(v))),
        "word": lambda w: Quoted(bash_word(w if isinstance(w, tuple) else word(w))),
        "argv": lambda words, indent=2: Quoted(bash_argv(words, indent)),
        "comment": comment,
    }


def comment(text: object) -> Quoted:
    """A value inside a `#` comment line: never executed, but a line break would start a command."""
    line = str(text)
    if _CONTROL.search(line):
        raise UnsafePlacement(f"a comment would carry a control character or line break: {line!r}")
    return Quoted(line)
