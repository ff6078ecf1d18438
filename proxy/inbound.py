"""What a client sends, checked before any engine sees it: its key, request id and body."""

from __future__ import annotations

import hmac
import re
import uuid
from collections.abc import Iterable
from typing import Any

import msgspec

from proxy.errors import BadRequest, TooLarge

Header = tuple[bytes, bytes]
# Echoed in the answer, sent to both engines (vLLM takes it as its request id) and written in log
# lines: a client's own id is kept only when it is short and plain.
_REQUEST_ID = re.compile(rb"[!-~]{1,128}")
_CONTAINERS = (dict, list)


def authorized(headers: Iterable[Header], key: bytes) -> bool:
    """`Authorization: Bearer <key>` (the scheme in any case), compared in constant time."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(token, key)
    return False


def request_id(value: bytes | None) -> bytes:
    """The client's X-Request-Id when it is 1-128 printable ASCII characters, else a new one."""
    if value is not None and _REQUEST_ID.fullmatch(value):
        return value
    return uuid.uuid4().hex.encode()


def declared_length(headers: Iterable[Header], limit: int) -> None:
    """A Content-Length over the limit is refused before a byte of the body is read."""
    for name, value in headers:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise TooLarge(f"request body of {int(value)} bytes is over the limit of {limit}")


def parse_object(raw: bytes, max_depth: int) -> dict[str, Any]:
    """The request body as a JSON object, nested at most `max_depth` levels, or BadRequest.

    msgspec stops at the interpreter's recursion limit (~1000 levels, a RecursionError), so the parse
    itself is bounded; the configured depth is then checked on the parsed object, in time proportional
    to its containers (a pre-scan of the raw bytes for brackets outside strings was measured: it cost
    up to 100 times more than the parse it guards, on bodies msgspec refuses at their first error).
    """
    try:
        body = msgspec.json.decode(raw)
    except RecursionError:
        raise BadRequest(f"request body is nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # msgspec.DecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        raise BadRequest(f"request body is not JSON: {' '.join(str(exc).split())}") from None
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, not {_json_type(body)}")
    if not _at_most_openers(raw, max_depth) and _deeper_than(body, max_depth):
        raise BadRequest(f"request body is nested deeper than {max_depth} levels")
    return body


def _at_most_openers(raw: bytes, limit: int) -> bool:
    """Whether `raw` has at most `limit` '[' and '{': then it cannot nest deeper, and the walk is
    skipped (a prompt of 262k token ids is one list, whose walk would take 30 ms). bytes.find is a
    memchr; bytes.count goes byte by byte, as slow as the parse."""
    found = 0
    for opener in (b"[", b"{"):
        at = raw.find(opener)
        while at >= 0:
            found += 1
            if found > limit:
                return False
            at = raw.find(opener, at + 1)
    return True


def _deeper_than(value: Any, limit: int) -> bool:
    """Level by level, containers only: no recursion, whatever the depth."""
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            below.extend(item.values() if isinstance(item, dict) else item)
        level = [item for item in below if isinstance(item, _CONTAINERS)]
        depth += 1
    return False


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
