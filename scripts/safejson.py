"""JSON from peers, servers and files that may be hostile: bounded nesting, finite numbers only, files read
up to a bound; stdlib only.

json.loads recurses once per nesting level, so a line of 100,000 `[` raises RecursionError, which no
caller expects; and it accepts NaN, Infinity and 1e999 (inf), which compare false with everything and so
slip through checks such as `count > 0` or `duration < minimum`. loads() refuses both, naming where.
read_regular() reads a file that may be huge, or a FIFO whose open would wait forever for a writer."""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

MAX_DEPTH = 64  # far deeper than any document the tools read; far shallower than the interpreter's limit

# A string, escapes included, or an unterminated one running to the end: removed before brackets are
# counted. It matches at every quote, so it never rescans the rest of the data from a later one (linear).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENING = frozenset(b"[{")


class JSONError(ValueError):
    """Why a document was refused; one line."""


class _NonFinite(str):
    """The literal of a number that is not finite, as the parse hooks leave it for the walk to report."""


def too_deep(data: bytes, max_depth: int) -> bool:
    """Whether [ and { nest deeper than MAX_DEPTH outside strings (a pre-scan: json.loads would recurse)."""
    depth = 0
    for byte in _STRING.sub(b"", data).translate(None, _NOT_BRACKETS):
        depth += 1 if byte in _OPENING else -1
        if depth > max_depth:
            return True
    return False


def _float(literal: str) -> float | _NonFinite:
    value = float(literal)
    return value if value - value == 0 else _NonFinite(literal)  # inf - inf is nan


def _where_non_finite(value: Any, path: str) -> str | None:
    if isinstance(value, _NonFinite):
        return f"{path or 'the document'} is {value}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _where_non_finite(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        if found:
            return found
    return None


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The document in DATA; JSONError if it is not JSON, nests deeper than MAX_DEPTH or holds a number
    that is not finite (NaN, Infinity, 1e999: JSON has none of them, Python's json accepts them)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if too_deep(raw, max_depth):
        raise JSONError(f"nested deeper than {max_depth} levels")
    try:
        doc = json.loads(raw, parse_constant=_NonFinite, parse_float=_float)
    except (ValueError, RecursionError) as err:
        raise JSONError(" ".join(str(err).split())) from None
    where = _where_non_finite(doc, "")
    if where:
        raise JSONError(f"{where.lstrip('.')}, not a finite number (JSON has no NaN or Infinity)")
    return doc


def open_regular(path: str) -> int:
    """A descriptor of PATH for reading, which must be a regular file (OSError otherwise): O_NONBLOCK
    keeps the open of a FIFO from waiting for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError("not a regular file")
    return fd


def read_regular(path: str, max_bytes: int) -> bytes:
    """PATH's content; OSError if it is no regular file, ValueError if it is larger than MAX_BYTES."""
    with os.fdopen(open_regular(path), "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    return data
