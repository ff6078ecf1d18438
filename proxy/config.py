"""Command line → frozen Config; nothing here changes while the proxy runs."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

API_KEY_ENV = "PROXY_API_KEY"
DEFAULT_BOOTSTRAP_PORT = 8998  # vLLM's VLLM_MOONCAKE_BOOTSTRAP_PORT default
POLICIES = ("affinity", "least-loaded")
MiB = 1 << 20
MAX_JSON_DEPTH = 512  # msgspec stops near 1000 levels (the interpreter's recursion limit)


@dataclass(frozen=True)
class Prefill:
    url: str
    bootstrap_port: int = DEFAULT_BOOTSTRAP_PORT

    @property
    def bootstrap_addr(self) -> str:
        """`remote_bootstrap_addr` for the decode leg: the scheme is required by the contract."""
        host = urlsplit(self.url).hostname or ""
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.bootstrap_port}"


@dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0
    pool: float = 30.0
    prefill: float = 600.0  # a deadline for the whole leg: a long prompt's prefill behind a queue
    decode_first_byte: float = 120.0  # well under the 480 s Mooncake abort, so a lost transfer surfaces
    decode_idle: float = 60.0
    decode_total: float = 1800.0  # non-streaming decode sends nothing until it is done
    health: float = 2.0  # a deadline for one check: /health and, for a prefill, its bootstrap /query
    header: float = 10.0  # a client's request head, from connecting or from the previous answer
    body: float = 60.0  # a client's whole request body: 16 MiB at ~2 Mbit/s
    keep_alive: float = 5.0  # an idle client connection (uvicorn's own default, as vLLM's)
    send: float = 60.0  # a client that reads nothing of its answer (as --decode-idle-timeout upstream)


@dataclass(frozen=True)
class Limits:
    """Sizes that bound what a client or an engine can make the proxy hold."""

    # The longest prompt of a 262,144-token context is 1-3 MiB of JSON (4-6 bytes a token as UTF-8
    # text, up to 12 with \uXXXX escapes; ~7 as token ids): 16 MiB leaves room for tool schemas, a
    # long history and a few inlined images, and is what one request can make the proxy buffer.
    body_bytes: int = 16 * MiB
    header_bytes: int = 64 << 10  # request line and headers; clients send a few hundred bytes
    # Deeper than any JSON schema a tool definition uses, and far below the ~1000 levels at which the
    # interpreter's recursion limit stops msgspec (a RecursionError, also answered 400).
    json_depth: int = 128
    # Engine answers the proxy reads whole (a prefill's, a non-streamed decode's, an error body);
    # streamed decode answers are relayed as they come and bounded in time instead.
    answer_bytes: int = 64 * MiB
    clients: int = 4096  # client connections at once; more are answered 503 and closed at once


@dataclass(frozen=True)
class Config:
    prefill: tuple[Prefill, ...]
    decode: tuple[str, ...]
    # Loopback unless told otherwise: the proxy speaks plain HTTP, and without an API key anyone who
    # reaches it uses the engines. The rendered job passes --host (the node address) explicitly.
    host: str = "127.0.0.1"
    port: int = 30000
    timeouts: Timeouts = Timeouts()
    limits: Limits = Limits()
    max_concurrency: int = 1024
    health_interval: float = 2.0
    policy: str = "affinity"
    session_header: str = "x-session-id"
    affinity_chars: int = 4096
    log_level: str = "info"
    api_key: str | None = field(default=None, repr=False)


def _url(text: str) -> str:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  # raises ValueError for a port that is not one
    except ValueError:
        parts = None
    # A base URL only: the proxy appends the endpoint path the client used.
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path.strip("/")
        or parts.query
        or parts.fragment
    ):
        raise argparse.ArgumentTypeError(f"expected http://host:port (got {redact(text)!r})")
    # Credentials would be shown wherever the URL is (/health, /metrics, logs), and engines take the
    # key from $PROXY_API_KEY as a Bearer token: refused rather than redacted and sent.
    if "@" in parts.netloc:
        raise argparse.ArgumentTypeError(
            f"{redact(text)!r} carries credentials (user:password@), which the proxy does not send; "
            f"engines get the key from ${API_KEY_ENV}"
        )
    return text.rstrip("/")


def redact(url: str) -> str:
    """The URL as an error message may show it: no user:password@, no query or fragment (either may
    carry a secret). Over-redacting an '@' in a path is harmless there."""
    scheme, sep, rest = url.partition("://")
    rest = re.split(r"[?#]", rest, maxsplit=1)[0]
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    return scheme + sep + rest


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port 1-65535 (got {text!r})")
    return int(text)


def _positive(kind: type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value: float = kind(text)
        except ValueError:
            value = 0
        if not 0 < value < math.inf:  # also refuses nan, and inf: every wait stays bounded
            raise argparse.ArgumentTypeError(f"expected a positive number (got {text!r})")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _prefill(values: list[str], parser: argparse.ArgumentParser) -> Prefill:
    if len(values) > 2:
        parser.error(f"--prefill takes URL [BOOTSTRAP_PORT] (got {' '.join(map(redact, values))})")
    try:
        url = _url(values[0])
        port = _port(values[1]) if len(values) == 2 else DEFAULT_BOOTSTRAP_PORT
    except argparse.ArgumentTypeError as err:
        parser.error(f"--prefill: {err}")
    return Prefill(url, port)


# Timeouts field → what it bounds; the flag is --<field>-timeout.
_TIMEOUT_FLAGS = (
    ("connect", "connecting to an engine"),
    ("pool", "waiting for a free upstream connection"),
    ("prefill", "the whole prefill leg (a deadline)"),
    ("decode_first_byte", "the first chunk of a streamed decode"),
    ("decode_idle", "a gap between chunks of a streamed decode"),
    ("decode_total", "a non-streamed decode answer (a deadline)"),
    ("health", "one health check with its bootstrap query (a deadline)"),
    ("header", "a client's request head, from connecting or from the previous answer"),
    ("body", "a client's whole request body"),
    ("keep_alive", "an idle client connection"),
    ("send", "a client that reads nothing of its answer"),
)
# Limits field → flag, what it bounds.
_LIMIT_FLAGS = (
    ("body_bytes", "--max-body-bytes", "bytes of a request body (413 above)"),
    ("header_bytes", "--max-header-bytes", "bytes of a request line and headers (431 above)"),
    ("json_depth", "--max-json-depth", "nesting levels of a request body (400 above)"),
    ("answer_bytes", "--max-answer-bytes", "bytes of an engine answer read whole (502 above)"),
    ("clients", "--max-clients", "client connections at once (503 above)"),
)


def build_parser() -> argparse.ArgumentParser:
    d, t, lim = Config((), ()), Timeouts(), Limits()
    p = argparse.ArgumentParser(
        prog="python -m proxy",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="PD proxy for vLLM >= 0.16 MooncakeConnector: a prefill leg, then a decode leg. "
        f"With ${API_KEY_ENV} set, clients must send it (Authorization: Bearer) and it is sent upstream.",
    )
    p.add_argument("--host", default=d.host, help="address to listen on")
    p.add_argument("--port", type=_port, default=d.port, help="port to listen on")
    p.add_argument(
        "--prefill",
        nargs="+",
        action="append",
        required=True,
        default=argparse.SUPPRESS,
        metavar=("URL", "BOOTSTRAP_PORT"),
        help=f"a prefill engine and its Mooncake bootstrap port ({DEFAULT_BOOTSTRAP_PORT} if left out); "
        "repeat for each",
    )
    p.add_argument(
        "--decode",
        type=_url,
        action="append",
        required=True,
        default=argparse.SUPPRESS,
        metavar="URL",
        help="a decode engine; repeat for each",
    )
    p.add_argument(
        "--policy",
        choices=POLICIES,
        default=d.policy,
        help="prefill choice: affinity (session header, else prompt prefix) or least-loaded",
    )
    p.add_argument(
        "--session-header",
        default=d.session_header,
        metavar="NAME",
        help="request header whose value keeps a session on one prefill engine",
    )
    p.add_argument(
        "--affinity-chars",
        type=_positive(int),
        default=d.affinity_chars,
        metavar="N",
        help="leading prompt characters hashed when a request has no session header",
    )
    p.add_argument(
        "--max-concurrency",
        type=_positive(int),
        default=d.max_concurrency,
        metavar="N",
        help="upstream connections per role; at least the peak client concurrency",
    )
    p.add_argument(
        "--health-interval",
        type=_positive(float),
        default=d.health_interval,
        metavar="SECONDS",
        help="time between health checks of every engine",
    )
    for name, what in _TIMEOUT_FLAGS:
        p.add_argument(
            f"--{name.replace('_', '-')}-timeout",
            type=_positive(float),
            default=getattr(t, name),
            metavar="SECONDS",
            help=f"limit on {what}",
        )
    for name, flag, what in _LIMIT_FLAGS:
        p.add_argument(
            flag, dest=name, type=_positive(int), default=getattr(lim, name), metavar="N", help=what
        )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=d.log_level)
    return p


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    parser = build_parser()
    args = parser.parse_args(argv)
    prefill = tuple(_prefill(values, parser) for values in args.prefill)
    urls = [p.url for p in prefill] + list(args.decode)
    duplicates = sorted({u for u in urls if urls.count(u) > 1})
    if duplicates:
        parser.error(f"backend listed twice: {', '.join(duplicates)}")
    if args.json_depth > MAX_JSON_DEPTH:  # the parser's own limit would refuse first, under another name
        parser.error(f"--max-json-depth is at most {MAX_JSON_DEPTH} (got {args.json_depth})")
    return Config(
        prefill=prefill,
        decode=tuple(args.decode),
        host=args.host,
        port=args.port,
        timeouts=Timeouts(**{name: getattr(args, f"{name}_timeout") for name, _ in _TIMEOUT_FLAGS}),
        limits=Limits(**{name: getattr(args, name) for name, _, _ in _LIMIT_FLAGS}),
        max_concurrency=args.max_concurrency,
        health_interval=args.health_interval,
        policy=args.policy,
        session_header=args.session_header.lower(),
        affinity_chars=args.affinity_chars,
        log_level=args.log_level,
        api_key=_api_key(environ, parser),
    )


def _api_key(environ: Mapping[str, str], parser: argparse.ArgumentParser) -> str | None:
    key = environ.get(API_KEY_ENV) or None
    # It goes into a header upstream and is compared with what clients send: a space or a control
    # character (a newline would start a header of its own) is refused, by a message without the key.
    if key is not None and not all("!" <= c <= "~" for c in key):
        parser.error(f"${API_KEY_ENV} may hold only printable ASCII without spaces (a Bearer token)")
    return key
