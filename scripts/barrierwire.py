"""The barrier's wire: the job's secret file, and lines sealed with HMAC-SHA256 so that only ranks of this
job join and only this job's leader releases them; stdlib only.

Secret file (--secret-file): one line of hex digits, at least SECRET_MIN_HEX of them (128 bits; `make
submit` writes 64), an even number, a trailing newline allowed, at most SECRET_MAX_BYTES in all; a
regular file that neither group nor others may read or write (mode 0600 or 0400). The key is the bytes
the digits spell; no message ever shows them.

One connection, one line each way per step (NONCE: 32 hex digits, MAC: 64, JSON: compact, one line):

    leader -> rank   challenge NONCE_L
    rank -> leader   hello NONCE_R MAC JSON        {"barrier", "size", "rank", "node", "data"}
    leader -> rank   registered MAC JSON           {"rank": R}
    leader -> rank   release MAC JSON | error MAC JSON     {"ranks": {...}} | "why"

MAC = HMAC-SHA256(key, PROTOCOL NUL kind NUL NONCE_L NUL NONCE_R NUL JSON), over the JSON bytes as sent
and checked with hmac.compare_digest before the JSON is parsed: the leader's fresh nonce makes a recorded
hello worthless on another connection, the rank's makes a recorded release worthless to a fake leader,
and the kind keeps one message from passing for another."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from typing import Any, NamedTuple

from safejson import open_regular

PROTOCOL = b"sync.py-barrier-1"
SECRET_MIN_HEX = 32
SECRET_MAX_BYTES = 4096
NONCE_BYTES = 16
_NONCE = re.compile(rb"[0-9a-f]{32}")
_MAC = re.compile(rb"[0-9a-f]{64}")


class AuthError(Exception):
    """A secret file that cannot be used, or a line that is not sealed with this job's secret."""


def read_secret(path: str) -> bytes:
    """The key in PATH (format above); AuthError saying what is wrong with the file, never its content."""
    try:
        fd = open_regular(path)  # a FIFO in its place must not hang the open
    except OSError as err:
        raise AuthError(f"cannot open it: {err.strerror or err}") from None
    try:
        mode = os.fstat(fd).st_mode
        if mode & 0o077:
            raise AuthError(f"mode {stat.S_IMODE(mode):04o} lets group or others at it (chmod 600)")
        data = os.read(fd, SECRET_MAX_BYTES + 1)  # a regular file: one read has it all, up to the bound
    except OSError as err:
        raise AuthError(f"cannot read it: {err.strerror}") from None
    finally:
        os.close(fd)
    text = data.decode("ascii", "replace").rstrip("\r\n")
    if not text:
        raise AuthError("empty")
    if len(data) > SECRET_MAX_BYTES or not re.fullmatch(r"[0-9a-fA-F]+", text):
        raise AuthError(f"not one line of hex digits (at least {SECRET_MIN_HEX}, at most {SECRET_MAX_BYTES})")
    if len(text) < SECRET_MIN_HEX or len(text) % 2:
        raise AuthError(f"{len(text)} hex digits; it needs an even number, at least {SECRET_MIN_HEX}")
    return bytes.fromhex(text)


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def challenge_line(leader_nonce: str) -> bytes:
    return b"challenge " + leader_nonce.encode() + b"\n"


def challenge_nonce(line: bytes) -> str:
    """The leader's nonce in a challenge line; AuthError for anything else."""
    word, _, nonce = line.partition(b" ")
    if word != b"challenge" or not _NONCE.fullmatch(nonce):
        raise AuthError("expected a challenge line")
    return nonce.decode()


def _compact(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


class Session(NamedTuple):
    """One connection's key and nonces: what every line on it is sealed with."""

    key: bytes
    leader_nonce: str
    rank_nonce: str

    def mac(self, kind: str, data: bytes) -> bytes:
        message = b"\0".join((PROTOCOL, kind.encode(), self.leader_nonce.encode(), self.rank_nonce.encode()))
        return hmac.new(self.key, message + b"\0" + data, hashlib.sha256).hexdigest().encode()

    def sealed(self, kind: str, body: Any) -> bytes:
        """A leader's line: KIND MAC JSON."""
        data = _compact(body)
        return b" ".join((kind.encode(), self.mac(kind, data), data)) + b"\n"

    def verify(self, kind: str, mac: bytes, data: bytes) -> None:
        if not hmac.compare_digest(mac, self.mac(kind, data)):
            raise AuthError("bad MAC: not sealed with this job's secret")

    def opened(self, line: bytes, kinds: tuple[str, ...]) -> tuple[str, bytes]:
        """(kind, JSON bytes) of a leader's line, once its MAC is this session's; AuthError otherwise."""
        parts = line.split(b" ", 2)
        kind = parts[0].decode("ascii", "replace")
        if len(parts) != 3 or kind not in kinds or not _MAC.fullmatch(parts[1]):
            raise AuthError(f"not a line of {', '.join(kinds)}")
        self.verify(kind, parts[1], parts[2])
        return kind, parts[2]

    def hello_line(self, hello: dict[str, Any]) -> bytes:
        data = _compact(hello)
        return b" ".join((b"hello", self.rank_nonce.encode(), self.mac("hello", data), data)) + b"\n"


def hello_parts(key: bytes, leader_nonce: str, line: bytes) -> tuple[Session, bytes, bytes]:
    """(session, MAC, JSON bytes) of a rank's hello line, not yet verified; AuthError if it is none."""
    parts = line.split(b" ", 3)
    if (
        len(parts) != 4
        or parts[0] != b"hello"
        or not _NONCE.fullmatch(parts[1])
        or not _MAC.fullmatch(parts[2])
    ):
        raise AuthError("not a hello line")
    return Session(key, leader_nonce, parts[1].decode()), parts[2], parts[3]
