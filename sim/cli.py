"""`vllm serve MODEL [flags]` parsed the way vLLM's FlexibleArgumentParser does, into a frozen ServeConfig.

Usage errors (unknown flag, bad value, malformed --kv-transfer-config) print argparse's message and exit
2, as vLLM does; start-up errors (model path, connector set-up, environment) print one ERROR line and
exit 1. Only flags vLLM 0.33 has are accepted, with its option strings, arities and choices (held to its
parser by tests/sim/test_parity.py); the list is the subset recipes plausibly use.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
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


class EnableDisableAction(argparse.Action):
    """vLLM's on/off flags: `--x` / `--no-x`, and for `--enable-x` also `--disable-x` (real vLLM's
    EnableDisableAction and BooleanOptionalAction); `off` names the option strings that mean False."""

    def __init__(self, option_strings, dest, off=(), default=None, **kw):
        self.off = frozenset(off)
        super().__init__(option_strings, dest, nargs=0, default=default, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string not in self.off)


def _pair(p: argparse.ArgumentParser, name: str, *aliases: str, default=None) -> None:
    """`--name` / `--no-name`; an `--enable-x` also takes `--disable-x`, a `--disable-x` `--enable-x`."""
    off = [f"--no-{name[2:]}"]
    if name.startswith("--enable-"):
        off.append("--disable-" + name.removeprefix("--enable-"))
    elif name.startswith("--disable-"):
        off.append("--enable-" + name.removeprefix("--disable-"))
    p.add_argument(name, *aliases, *off, action=EnableDisableAction, off=off, default=default)


# Values vLLM 0.33 takes at parse time and refuses later, when building its config (a config field's
# Literal): checked at start-up here too, with the same values (tests/sim/test_parity.py).
STARTUP_CHOICES = {
    "kv_cache_dtype": (
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_inc",
        "fp8_ds_mla",
        "nvfp4_ds_mla",
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "octave_k3v4",
        "octave_k3v3",
        "octave_k3v3_compact",
        "ultraquant_4bit",
        "int4_per_token_head",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
        "nvfp4_4over6",
    ),
    "distributed_executor_backend": ("ray", "mp", "uni", "external_launcher"),
}


def build_parser() -> argparse.ArgumentParser:
    """A subset of `vllm serve`'s flags, each with the real option strings, arity and choices
    (tests/sim/test_parity.py). Abbreviations are resolved before, over the real flags (sim/realflags.py)."""
    p = argparse.ArgumentParser(prog=PROG, usage=f"{PROG} [model_tag] [options]", allow_abbrev=False)
    p.add_argument("model_tag", nargs="?", help="model name or local path")
    p.add_argument("--model", help=argparse.SUPPRESS)  # moved to the positional first, as vLLM does
    p.add_argument("--host")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uvicorn-log-level", choices=["debug", "info", "warning", "error", "critical", "trace"])
    p.add_argument("--api-key", nargs="+")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--distributed-executor-backend")
    p.add_argument("--mm-encoder-tp-mode", choices=["weights", "data"])
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--quantization", "-q")
    p.add_argument("--block-size", type=int)  # any int here; vLLM checks it per platform later
    p.add_argument("--gpu-memory-utilization", "--device-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-model-len", type=human_int_or_auto)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=human_int)
    p.add_argument("--num-gpu-blocks-override", type=int)  # sizes the simulated HBM prefix cache
    p.add_argument("--kv-transfer-config", type=_kv_type)
    p.add_argument("--compilation-config", "-cc", type=_json_type)
    p.add_argument("--optimization-level")  # also -O3 / -O 3 (normalize_argv)
    p.add_argument("--speculative-config", "-sc", type=_json_type)
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
    p.add_argument("--disable-log-stats", action="store_true")
    _pair(p, "--trust-remote-code", default=False)
    _pair(p, "--enforce-eager", default=False)
    _pair(p, "--enable-expert-parallel", "-ep", default=False)
    _pair(p, "--disable-custom-all-reduce", default=False)
    for name in (
        "--enable-log-requests",
        "--enable-auto-tool-choice",
        "--enable-prompt-tokens-details",
        "--enable-force-include-usage",
        "--enable-request-id-headers",
    ):
        _pair(p, name, default=False)
    for name in ("--enable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling"):
        _pair(p, name)
    return p


def normalize_argv(argv: list[str], error=None) -> list[str]:
    """FlexibleArgumentParser's preprocessing, then argparse's abbreviations: `--model M` moved to the
    positional (with vLLM's warning), `--max_model_len` = `--max-model-len`, `-O3` / `-O 3` =
    `--optimization-level 3`, a unique prefix of a real vLLM flag = that flag."""
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
    return realflags.expand(out, realflags.vocabulary("vllm"), error or _usage_error)


def _usage_error(message: str) -> None:
    build_parser().error(message)


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
    args = parser.parse_args(normalize_argv(argv, parser.error))
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
    """What vLLM refuses when it builds its config (exit 1, not a usage error), in its words."""
    if args.kv_cache_dtype not in STARTUP_CHOICES["kv_cache_dtype"]:
        valid = list(STARTUP_CHOICES["kv_cache_dtype"])
        raise StartupError(f"Invalid kv_cache_dtype: {args.kv_cache_dtype!r}. Valid values are: {valid}")
    backend = args.distributed_executor_backend
    if backend is not None and backend not in STARTUP_CHOICES["distributed_executor_backend"]:
        *first, last = (repr(v) for v in STARTUP_CHOICES["distributed_executor_backend"])
        raise StartupError(f"distributed_executor_backend: Input should be {', '.join(first)} or {last}")


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
