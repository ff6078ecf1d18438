"""`vllm serve MODEL [flags]` parsed the way vLLM's FlexibleArgumentParser does, into a frozen ServeConfig.

Usage errors (unknown flag, bad value, malformed --kv-transfer-config) print argparse's message and exit
2, as vLLM does; start-up errors (model path, connector set-up, environment) print one ERROR line and
exit 1. Only flags vLLM 0.33 has are accepted; the list is the subset recipes plausibly use.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from sim import kvconfig, settings
from sim.config import VERSION, ServeConfig, StartupError, model_dir, read_hf_config

__all__ = ["VERSION", "ServeConfig", "StartupError", "main", "model_dir", "read_hf_config"]

PROG = "vllm serve"
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgG]?)")


def human_int(text: str) -> int:
    """vLLM's human-readable integers: 32768, 32k (x1000), 32K (x1024), 1m, 1M."""
    match = _HUMAN_INT.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not an integer (suffixes k/K, m/M, g/G allowed)")
    number, suffix = match.groups()
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[suffix]
    value = float(number) * scale
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number")
    return int(value)


def _kv_type(text: str) -> dict[str, Any]:
    try:
        return kvconfig.parse_kv_transfer_config(text)
    except ValueError as exc:
        message = f"Value {text} cannot be converted to KVTransferConfig: {exc}"
        raise argparse.ArgumentTypeError(message) from None


def _json_type(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _bool_flag(parser: argparse.ArgumentParser, name: str, default: bool | None = None) -> None:
    parser.add_argument(name, action=argparse.BooleanOptionalAction, default=default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, usage=f"{PROG} [model_tag] [options]", allow_abbrev=False)
    p.add_argument("model_tag", nargs="?", help="model name or local path")
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--host")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uvicorn-log-level", choices=["debug", "info", "warning", "error", "critical", "trace"])
    p.add_argument("--api-key")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--distributed-executor-backend", choices=["ray", "mp", "uni", "external_launcher"])
    p.add_argument("--mm-encoder-tp-mode", choices=["weights", "data"])
    p.add_argument(
        "--kv-cache-dtype",
        choices=["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"],
    )
    p.add_argument("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--quantization", "-q")
    p.add_argument("--block-size", type=int, choices=[1, 8, 16, 32, 64, 128, 256])
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-model-len", type=human_int)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=human_int)
    p.add_argument("--kv-transfer-config", type=_kv_type)
    p.add_argument("--compilation-config", "-O", type=_json_type)
    p.add_argument("--speculative-config", type=_json_type)
    p.add_argument("--hf-overrides", type=_json_type)
    p.add_argument("--limit-mm-per-prompt", type=_json_type)
    p.add_argument("--seed", type=int)
    p.add_argument("--tokenizer")
    p.add_argument("--revision")
    p.add_argument("--download-dir")
    p.add_argument("--load-format")
    p.add_argument("--chat-template")
    p.add_argument("--tool-call-parser")
    p.add_argument("--reasoning-parser")
    p.add_argument("--max-log-len", type=int)
    for flag in (
        "--trust-remote-code",
        "--enforce-eager",
        "--enable-expert-parallel",
        "--disable-log-stats",
        "--enable-log-requests",
        "--enable-auto-tool-choice",
        "--disable-custom-all-reduce",
        "--enable-prompt-tokens-details",
        "--enable-force-include-usage",
        "--enable-request-id-headers",
    ):
        p.add_argument(flag, action="store_true")
    for flag in ("--enable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling"):
        _bool_flag(p, flag)
    return p


def normalize_argv(argv: list[str]) -> list[str]:
    """FlexibleArgumentParser: --max_model_len and --max-model-len are the same flag."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, eq, value = arg.partition("=")
            arg = key.replace("_", "-") + eq + value
        out.append(arg)
    return out


def parse_serve_args(argv: list[str]) -> argparse.Namespace:
    """argv after `vllm serve`; argparse errors exit 2 with vLLM's usage message."""
    parser = build_parser()
    args = parser.parse_args(normalize_argv(argv))
    if args.model is not None:
        parser.error(
            "With `vllm serve`, you should provide the model as a positional argument or in a "
            "config file instead of via the `--model` option."
        )
    if args.model_tag is None:
        parser.error("the following arguments are required: model_tag")
    return args


def resolve(args: argparse.Namespace, *, model_root: str | None = None) -> ServeConfig:
    """Start-up checks after parsing (raises StartupError)."""
    path = model_dir(args.model_tag, model_root)
    hf_config = read_hf_config(path)
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "port"):
        if getattr(args, name) < 1:
            raise StartupError(f"{name} must be >= 1, got {getattr(args, name)}")
    if args.data_parallel_size != 1:
        raise StartupError("data_parallel_size > 1 is not simulated (one engine per process)")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise StartupError(f"gpu_memory_utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    try:
        kv = kvconfig.resolve_connectors(args.kv_transfer_config)
    except kvconfig.KVConfigError as exc:
        raise StartupError(str(exc)) from None
    return ServeConfig(
        model=args.model_tag,
        model_path=path,
        served_names=tuple(args.served_model_name or [args.model_tag]),
        host=args.host,
        port=args.port,
        tensor_parallel=args.tensor_parallel_size,
        pipeline_parallel=args.pipeline_parallel_size,
        block_size=args.block_size or 16,
        max_model_len=_max_model_len(args.max_model_len, hf_config),
        max_num_seqs=args.max_num_seqs or 256,
        prefix_caching=args.enable_prefix_caching is not False,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        api_key=args.api_key,
        kv=kv,
    )


def _max_model_len(requested: int | None, hf_config: dict[str, Any]) -> int:
    derived = hf_config.get("max_position_embeddings")
    if not isinstance(derived, int) or isinstance(derived, bool):
        return requested or 32768
    if requested is not None and requested > derived:
        raise StartupError(
            f"User-specified max_model_len ({requested}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} in model's config.json)."
        )
    return requested or derived


def main(argv: list[str] | None = None) -> int:
    """The `vllm` executable: `vllm serve ...` and `vllm --version`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-v"]):
        print(VERSION)
        return 0
    if argv[:1] != ["serve"]:
        print("usage: vllm [-h] [-v] {serve} ...", file=sys.stderr)
        print(
            f"vllm: error: argument subparser: invalid choice: {argv[0] if argv else ''!r} (choose from "
            "'serve')",
            file=sys.stderr,
        )
        return 2
    args = parse_serve_args(argv[1:])
    try:
        env = settings.load()
        config = resolve(args, model_root=env.model_root)
    except (StartupError, settings.SettingsError) as exc:
        print(f"ERROR [sim vllm] {exc}", file=sys.stderr)
        return 1
    try:
        from sim import server  # the serving stack is imported only once the command line is valid
    except ImportError as exc:
        print(
            f"ERROR [sim vllm] {sys.executable} lacks {exc.name}: put the project's .venv/bin on PATH "
            "after sim/bin (`make venv` creates it)",
            file=sys.stderr,
        )
        return 1
    return server.run(config)
