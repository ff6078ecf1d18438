"""Command line → frozen Config; nothing here changes while the proxy runs."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

API_KEY_ENV = "PROXY_API_KEY"
DEFAULT_BOOTSTRAP_PORT = 8998  # vLLM's VLLM_MOONCAKE_BOOTSTRAP_PORT default
POLICIES = ("affinity", "least-loaded")


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
    prefill: float = 600.0  # one read spans the whole prefill of a long prompt behind a queue
    decode_first_byte: float = 120.0  # well under the 480 s Mooncake abort, so a lost transfer surfaces
    decode_idle: float = 60.0
    decode_total: float = 1800.0  # non-streaming decode sends nothing until it is done
    health: float = 2.0


@dataclass(frozen=True)
class Config:
    prefill: tuple[Prefill, ...]
    decode: tuple[str, ...]
    host: str = "0.0.0.0"
    port: int = 30000
    timeouts: Timeouts = Timeouts()
    max_concurrency: int = 1024
    health_interval: float = 2.0
    policy: str = "affinity"
    session_header: str = "x-session-id"
    affinity_chars: int = 4096
    log_level: str = "info"
    api_key: str | None = field(default=None, repr=False)


def _url(text: str) -> str:
    parts = urlsplit(text)
    # A base URL only: the proxy appends the endpoint path the client used.
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
        raise argparse.ArgumentTypeError(f"expected http://host:port (got {text!r})")
    return text.rstrip("/")


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port 1-65535 (got {text!r})")
    return int(text)


def _positive(kind: type) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not 0 < value < math.inf:  # also refuses nan, and inf: every wait stays bounded
            raise argparse.ArgumentTypeError(f"expected a positive number (got {text!r})")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _prefill(values: list[str], parser: argparse.ArgumentParser) -> Prefill:
    if len(values) > 2:
        parser.error(f"--prefill takes URL [BOOTSTRAP_PORT] (got {' '.join(values)})")
    try:
        url = _url(values[0])
        port = _port(values[1]) if len(values) == 2 else DEFAULT_BOOTSTRAP_PORT
    except argparse.ArgumentTypeError as err:
        parser.error(f"--prefill: {err}")
    return Prefill(url, port)


def build_parser() -> argparse.ArgumentParser:
    d, t = Config((), ()), Timeouts()
    p = argparse.ArgumentParser(
        prog="python -m proxy",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="PD proxy for vLLM >= 0.16 MooncakeConnector: a prefill leg, then a decode leg. "
        f"The upstream API key is read from ${API_KEY_ENV} and sent only when set.",
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
    for name, default, what in (
        ("connect", t.connect, "connecting to an engine"),
        ("pool", t.pool, "waiting for a free upstream connection"),
        ("prefill", t.prefill, "the whole prefill leg"),
        ("decode-first-byte", t.decode_first_byte, "the first chunk of a streamed decode"),
        ("decode-idle", t.decode_idle, "a gap between chunks of a streamed decode"),
        ("decode-total", t.decode_total, "a non-streamed decode answer"),
        ("health", t.health, "one health check or bootstrap query"),
    ):
        p.add_argument(
            f"--{name}-timeout",
            type=_positive(float),
            default=default,
            metavar="SECONDS",
            help=f"limit on {what}",
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
    timeouts = Timeouts(
        connect=args.connect_timeout,
        pool=args.pool_timeout,
        prefill=args.prefill_timeout,
        decode_first_byte=args.decode_first_byte_timeout,
        decode_idle=args.decode_idle_timeout,
        decode_total=args.decode_total_timeout,
        health=args.health_timeout,
    )
    return Config(
        prefill=prefill,
        decode=tuple(args.decode),
        host=args.host,
        port=args.port,
        timeouts=timeouts,
        max_concurrency=args.max_concurrency,
        health_interval=args.health_interval,
        policy=args.policy,
        session_header=args.session_header.lower(),
        affinity_chars=args.affinity_chars,
        log_level=args.log_level,
        api_key=environ.get(API_KEY_ENV) or None,
    )
