"""`vllm serve MODEL [flags]` parsed the way vLLM's FlexibleArgumentParser does, into a frozen ServeConfig.

Usage errors (unknown flag, bad value, malformed --kv-transfer-config) print argparse's message and exit
2, as vLLM does; start-up errors (model path, connector set-up, environment) print one ERROR line and
exit 1. The parser is rebuilt from vLLM 0.33's recorded one (sim/realflags.py): FLAGS names the subset the
simulator implements (what recipes plausibly use); any other vLLM flag is refused as not simulated.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from typing import Any

from sim import kvconfig, realflags, settings
from sim.config import VERSION, ServeConfig, StartupError, model_dir, read_hf_config

__all__ = ["VERSION", "ServeConfig", "StartupError", "main", "model_dir", "read_hf_config"]

PROG = "vllm serve"
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgG]?)")


def human_int_or_auto(text: str) -> int:
    """--max-model-len: a human-readable integer, or -1 / auto (derived from the model)."""
    return -1 if text.strip() in ("-1", "auto", "AUTO", "Auto") else human_int(text)


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


U = realflags.Use
# The flags the simulator implements (the recipes' and common ones), each named by one of its option
# strings with how the simulator reads it; option strings, arity, on/off forms and choices are vLLM 0.33's
# (sim/realflags.py). Every other flag vLLM has is refused as not simulated.
FLAGS: dict[str, realflags.Use] = {
    "model_tag": U(),
    "--model": U(),  # moved to the positional first, as vLLM does (normalize_argv)
    "--host": U(str),
    "--port": U(default=8000),
    "--uvicorn-log-level": U(),
    "--api-key": U(str),
    "--served-model-name": U(str),
    "--tensor-parallel-size": U(default=1),
    "--pipeline-parallel-size": U(default=1),
    "--data-parallel-size": U(default=1),
    "--distributed-executor-backend": U(str),
    "--mm-encoder-tp-mode": U(),
    "--kv-cache-dtype": U(default="auto"),
    "--dtype": U(),
    "--quantization": U(str),
    "--block-size": U(),  # any int here; vLLM checks it per platform later
    "--gpu-memory-utilization": U(default=0.9),
    "--max-model-len": U(human_int_or_auto),
    "--max-num-seqs": U(),
    "--max-num-batched-tokens": U(human_int),
    "--num-gpu-blocks-override": U(int),  # sizes the simulated HBM prefix cache
    "--kv-transfer-config": U(_kv_type),
    "--compilation-config": U(_json_type),
    "--optimization-level": U(),  # also -O3 / -O 3 (normalize_argv)
    "--speculative-config": U(_json_type),
    "--hf-overrides": U(_json_type),
    "--limit-mm-per-prompt": U(_json_type),
    "--seed": U(),
    "--tokenizer": U(),
    "--revision": U(str),
    "--download-dir": U(str),
    "--load-format": U(),
    "--chat-template": U(str),
    "--tool-call-parser": U(str),
    "--reasoning-parser": U(str),
    "--max-log-len": U(int),
    "--disable-log-stats": U(),
    **{
        name: U(default=False)
        for name in (
            "--trust-remote-code",
            "--enforce-eager",
            "--enable-expert-parallel",
            "--disable-custom-all-reduce",
            "--enable-log-requests",
            "--enable-auto-tool-choice",
            "--enable-prompt-tokens-details",
            "--enable-force-include-usage",
            "--enable-request-id-headers",
        )
    },
    **{name: U() for name in ("--enable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling")},
}


@cache
def build_parser() -> realflags.Parser:
    """`vllm serve`'s parser, rebuilt from vLLM 0.33's recorded one with the simulator's FLAGS (its parse()
    resolves abbreviations over every real flag and refuses the ones not simulated)."""
    return realflags.build("vllm", PROG, FLAGS, usage=f"{PROG} [model_tag] [options]")


def startup_choices() -> dict[str, tuple[str, ...]]:
    """Values vLLM takes at parse time and refuses when it builds its config (a config field's Literal),
    for every flag the simulator reads: checked at start-up here too, with the recorded values."""
    table = realflags.by_name("vllm")
    real = (table[name] for name in FLAGS if name in table)
    return {o["dest"]: tuple(o["literal_values"]) for o in real if o["literal_values"] and not o["choices"]}


def normalize_argv(argv: list[str]) -> list[str]:
    """FlexibleArgumentParser's preprocessing: `--model M` moved to the positional (with vLLM's warning),
    `--max_model_len` = `--max-model-len`, `-O3` / `-O 3` = `--optimization-level 3`. Abbreviations come
    after (realflags.Parser.parse)."""
    argv = _model_first(list(argv))
    out = []
    for i, arg in enumerate(argv):
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, eq, value = arg.partition("=")
            arg = key.replace("_", "-") + eq + value
        if arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
            continue
        if arg == "-O" and argv[i + 1 : i + 2] and argv[i + 1] in ("0", "1", "2", "3"):
            arg = "--optimization-level"
        out.append(arg)
    return out


def _model_first(argv: list[str]) -> list[str]:
    at = next((i for i, a in enumerate(argv) if a == "--model" or a.startswith("--model=")), None)
    if at is None:
        return argv
    print(
        "WARNING [sim vllm] With `vllm serve`, you should provide the model as a positional argument or in "
        "a config file instead of via the `--model` option. The `--model` option will be removed in a "
        "future version.",
        file=sys.stderr,
    )
    if argv[at] == "--model":
        return [*argv[at + 1 : at + 2], *argv[:at], *argv[at + 2 :]]
    return [argv[at].removeprefix("--model="), *argv[:at], *argv[at + 1 :]]


def parse_serve_args(argv: list[str]) -> argparse.Namespace:
    """argv after `vllm serve`; argparse errors exit 2 with vLLM's usage message."""
    parser = build_parser()
    args = parser.parse(normalize_argv(argv))
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
    _check_startup_choices(args)
    _check_model_shape(args, hf_config)
    if args.block_size is not None and args.block_size < 1:
        raise StartupError(f"block_size must be >= 1, got {args.block_size}")
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
        gpu_blocks=args.num_gpu_blocks_override,
        max_model_len=_max_model_len(args.max_model_len, hf_config),
        max_num_seqs=args.max_num_seqs or 256,
        prefix_caching=args.enable_prefix_caching is not False,
        prompt_tokens_details=args.enable_prompt_tokens_details,
        api_key=tuple(args.api_key or ()),
        kv=kv,
    )


def _check_startup_choices(args: argparse.Namespace) -> None:
    """What vLLM refuses when it builds its config (exit 1, not a usage error), in its words: its own
    check of the KV cache dtype, pydantic's of any other Literal field (values listed sorted here)."""
    for dest, valid in startup_choices().items():
        value = getattr(args, dest)
        if value is None or value in valid:
            continue
        if dest == "kv_cache_dtype":
            raise StartupError(f"Invalid kv_cache_dtype: {value!r}. Valid values are: {list(valid)}")
        *first, last = (repr(v) for v in valid)
        raise StartupError(f"{dest}: Input should be {', '.join(first)} or {last}")


def _text_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of config.json (a multimodal model keeps it under text_config)."""
    text = hf_config.get("text_config")
    return text if isinstance(text, dict) else hf_config


def _check_model_shape(args: argparse.Namespace, hf_config: dict[str, Any]) -> None:
    """vLLM's checks of the parallel layout against the model, where config.json says enough."""
    text = _text_config(hf_config)
    heads, tp = text.get("num_attention_heads"), args.tensor_parallel_size
    if isinstance(heads, int) and tp >= 1 and heads % tp:
        raise StartupError(
            f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
        )
    keys = ("n_routed_experts", "num_experts", "num_local_experts")
    experts = next((text[k] for k in keys if k in text), 0)
    if args.enable_expert_parallel and "num_attention_heads" in text and not experts:
        raise StartupError(
            "Number of experts in the model must be greater than 0 when expert parallelism is enabled."
        )


def _max_model_len(requested: int | None, hf_config: dict[str, Any]) -> int:
    requested = None if requested == -1 else requested  # auto: the model's
    derived = _text_config(hf_config).get("max_position_embeddings")
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
