"""`python3 -m sglang.launch_server ARGS` parsed the way SGLang's ServerArgs does, into a frozen SGLangConfig.

The simulated build is OpenBMB's SGLang fork (branch minicpm_sala, docs/upstream-facts.md#minicpm-sala). Its
own parser is not published, so flag names, arities and choices are held to upstream SGLang 0.5.23's parser
(sim/parity/sglang-0.5.23.json, tests/sim/test_parity.py) plus the fork's own flags that
configs/engine-builds.yaml declares with their source (FORK_FLAGS); only a subset is accepted.

Usage errors (unknown flag, ambiguous abbreviation, bad value or choice, missing --model-path) print
argparse's message and exit 2,
as SGLang's parser does; start-up errors print one ERROR line and exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from decimal import Decimal
from typing import Any

from sim import realflags, settings
from sim.config import StartupError, model_dir, read_hf_config
from sim.sglang_config import (
    ATTENTION_BACKENDS,
    FAKE_BOOTSTRAP_HOST,
    KV_CACHE_DTYPES,
    LOAD_BALANCE_METHODS,
    LOAD_FORMATS,
    QUANTIZATIONS,
    SCHEDULE_POLICIES,
    TRANSFER_BACKENDS,
    VERSION,
    SGLangConfig,
)

__all__ = ["FAKE_BOOTSTRAP_HOST", "VERSION", "SGLangConfig", "main"]

PROG = "launch_server.py"  # argparse's prog under `python3 -m sglang.launch_server`
SIMULATED_TRANSFERS = ("mooncake", "mori")  # both over SGLang's common bootstrap (sim/sglang_pd.py)
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length")


def human_int(text: str) -> int:
    """SGLang's human-readable integers: 32768, SI 32k (x1000), IEC 32Ki (x1024); case-sensitive."""
    match = _HUMAN.fullmatch(text.strip())
    if match:
        number, suffix = match.groups()
        if suffix.endswith("i"):
            if "." in number:
                message = f"Decimals are not allowed with IEC suffixes like '{suffix}'."
                raise argparse.ArgumentTypeError(message)
            return int(number) * 2 ** (10 * ("KMGT".index(suffix[0]) + 1))
        return int(Decimal(number) * 10 ** (3 * ("kMGT".index(suffix) + 1)))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{text}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
            "(1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


class DeprecatedStoreTrueAction(argparse.Action):
    """SGLang's deprecated switches: still True, with a warning."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, const=True, default=False, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        warning = f"'{option_string}' is deprecated and will be removed in a future release."
        print(f"WARNING {warning}", file=sys.stderr)
        setattr(namespace, self.dest, True)


def _flag(p: argparse.ArgumentParser, *names: str, **kw: Any) -> None:
    p.add_argument(*names, **kw)


def build_parser() -> argparse.ArgumentParser:
    """A subset of ServerArgs.add_cli_args with upstream 0.5.23's option strings, arities and choices, plus
    the fork's own flags (declared in configs/engine-builds.yaml); dests are ServerArgs' field names.
    Abbreviations are resolved before, over those same flags (sim/realflags.py)."""
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=False)
    _flag(p, "--model-path", "--model", dest="model_path", required=True)
    _flag(p, "--tokenizer-path")
    _flag(p, "--tokenizer-mode", default="auto", choices=["auto", "slow"])
    _flag(p, "--load-format", default="auto", choices=LOAD_FORMATS)
    _flag(p, "--context-length", type=human_int)
    _flag(p, "--revision")
    _flag(p, "--host", default="127.0.0.1")
    _flag(p, "--port", type=int, default=30000)
    _flag(p, "--warmups")
    _flag(p, "--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    _flag(p, "--quantization", choices=QUANTIZATIONS)
    _flag(p, "--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    _flag(p, "--mem-fraction-static", type=float)
    _flag(p, "--max-running-requests", type=int)
    _flag(p, "--max-queued-requests", type=int)
    _flag(p, "--max-total-tokens", type=human_int)
    _flag(p, "--chunked-prefill-size", type=int)
    _flag(p, "--max-prefill-tokens", type=human_int, default=16384)
    _flag(p, "--prefill-max-requests", type=int)
    _flag(p, "--schedule-policy", default="fcfs", choices=SCHEDULE_POLICIES)
    _flag(p, "--schedule-conservativeness", type=float, default=1.0)
    _flag(p, "--page-size", type=int)
    _flag(p, "--device")
    _flag(p, "--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    _flag(p, "--pipeline-parallel-size", "--pp-size", dest="pp_size", type=int, default=1)
    _flag(p, "--stream-interval", type=int, default=1)
    _flag(p, "--random-seed", type=int)
    _flag(p, "--watchdog-timeout", type=float, default=300)
    _flag(p, "--dist-timeout", type=int)
    _flag(p, "--download-dir")
    _flag(p, "--base-gpu-id", type=int, default=0)
    _flag(p, "--log-level", default="info")
    _flag(p, "--log-level-http")
    _flag(p, "--log-requests-level", type=int, default=2, choices=[0, 1, 2, 3])
    _flag(p, "--decode-log-interval", type=int, default=40)
    _flag(p, "--api-key")
    _flag(p, "--served-model-name")
    _flag(p, "--chat-template")
    _flag(p, "--data-parallel-size", "--dp-size", dest="dp_size", type=int, default=1)
    _flag(p, "--load-balance-method", default="auto", choices=LOAD_BALANCE_METHODS)
    _flag(p, "--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr")
    _flag(p, "--nnodes", type=int, default=1)
    _flag(p, "--node-rank", type=int, default=0)
    _flag(p, "--json-model-override-args", default="{}")
    for name in ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend"):
        _flag(p, name, choices=ATTENTION_BACKENDS)
    _flag(p, "--sampling-backend", choices=["flashinfer", "pytorch", "ascend", "intel_xpu"])
    _flag(p, "--grammar-backend", choices=["xgrammar", "outlines", "llguidance", "none"])
    _flag(p, "--torch-compile-max-bs", type=int, default=32)
    _flag(p, "--num-continuous-decode-steps", type=int, default=1)
    _flag(p, "--disaggregation-mode", default="null", choices=["null", "prefill", "decode"])
    _flag(p, "--disaggregation-transfer-backend", default="mooncake", choices=TRANSFER_BACKENDS)
    _flag(p, "--disaggregation-bootstrap-port", type=int, default=8998)
    _flag(p, "--disaggregation-ib-device")
    _flag(p, "--num-reserved-decode-tokens", type=int, default=512)
    _flag(p, "--enable-hierarchical-cache", "--enable-hicache", action="store_true")
    for name in ("--disable-cuda-graph", "--enable-dp-attention"):
        _flag(p, name, action=DeprecatedStoreTrueAction)
    for name in (
        "--trust-remote-code",
        "--skip-tokenizer-init",
        "--skip-server-warmup",
        "--enable-metrics",
        "--enable-metrics-for-all-schedulers",
        "--log-requests",
        "--enable-cache-report",
        "--disable-radix-cache",
        "--disable-cuda-graph-padding",
        "--disable-custom-all-reduce",
        "--disable-overlap-schedule",
        "--enable-mixed-chunk",
        "--enable-torch-compile",
        "--enable-p2p-check",
        "--allow-auto-truncate",
        "--triton-attention-reduce-in-fp32",
        "--disaggregation-decode-enable-offload-kvcache",
    ):
        _flag(p, name, action="store_true")
    _fork_flags(p)
    return p


def _fork_flags(p: argparse.ArgumentParser) -> None:
    """The fork's own flags (its server_args.py; declared, with that source, in configs/engine-builds.yaml
    for build sglang-minicpm-sala-fork): upstream 0.5.23 has none of them."""
    for name in ("--dense-as-sparse", "--force-dense-minicpm", "--fuse-topk", "--split-stage1"):
        _flag(p, name, action="store_true")
    _flag(p, "--enable-piecewise-cuda-graph", action="store_true")
    _flag(p, "--cuda-graph-max-bs", type=int)
    _flag(p, "--cuda-graph-bs", type=int, nargs="+")
    _flag(p, "--disaggregation-decode-tp", type=int)
    _flag(p, "--disaggregation-decode-dp", type=int)
    _flag(p, "--disaggregation-prefill-pp", type=int, default=1)


FORK_FLAGS = (
    "--dense-as-sparse",
    "--force-dense-minicpm",
    "--fuse-topk",
    "--split-stage1",
    "--enable-piecewise-cuda-graph",
    "--cuda-graph-max-bs",
    "--cuda-graph-bs",
    "--disaggregation-decode-tp",
    "--disaggregation-decode-dp",
    "--disaggregation-prefill-pp",
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argv after `-m sglang.launch_server`; argparse errors exit 2. Abbreviations resolve over upstream
    0.5.23's flags and the fork's, as SGLang's parser (allow_abbrev) does over its own."""
    parser = build_parser()
    vocabulary = realflags.vocabulary("sglang", FORK_FLAGS)
    return parser.parse_args(realflags.expand(list(argv), vocabulary, parser.error))


def context_length(requested: int | None, hf_config: dict[str, Any]) -> int:
    """SGLang's get_context_length (first key found, scaled by rope_scaling.factor; 2048 if none), and
    model_config's refusal of a longer --context-length unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN."""
    derived = 2048
    rope = hf_config.get("rope_scaling") if isinstance(hf_config.get("rope_scaling"), dict) else None
    factor = 1
    if rope and "original_max_position_embeddings" not in rope and rope.get("rope_type") != "llama3":
        factor = rope.get("factor", 1)
    for key in (*CONTEXT_LENGTH_KEYS, "max_position_embeddings"):
        value = hf_config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            derived = int(factor * value)
            break
    if requested is None:
        return derived
    if requested > derived and os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "") not in (
        "1",
        "true",
        "True",
    ):
        raise StartupError(
            f"User-specified context_length ({requested}) is greater than the derived context_length "
            f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
            "context_length may differ from max_position_embeddings in the model's config. To allow "
            "overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    return requested


def resolve(args: argparse.Namespace, *, model_root: str | None = None) -> SGLangConfig:
    """ServerArgs.__post_init__ and check_server_args, as far as the simulator runs them (StartupError)."""
    path = model_dir(args.model_path, model_root)
    hf_config = read_hf_config(path)
    for name in ("tp_size", "pp_size", "port", "disaggregation_bootstrap_port"):
        if getattr(args, name) < 1:
            raise StartupError(f"{name} must be >= 1, got {getattr(args, name)}")
    if args.dp_size != 1 or args.enable_dp_attention:
        raise StartupError("data parallelism (--dp-size > 1, --enable-dp-attention) is not simulated")
    if args.nnodes != 1:
        raise StartupError("multi-node engines (--nnodes > 1) are not simulated: one process per engine")
    served = args.served_model_name or args.model_path
    if ":" in served:
        raise StartupError(
            "AssertionError: served_model_name cannot contain a colon (':') character. The colon is reserved "
            f"for the 'model:adapter' syntax used in LoRA adapter specification. Invalid value: '{served}'"
        )
    if args.enable_hierarchical_cache and args.disable_radix_cache:
        raise StartupError(
            "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
            "exclusive and cannot be used at the same time. Please use only one of them."
        )
    mode = args.disaggregation_mode
    _check_disaggregation(args, mode)
    page_size = args.page_size or 1
    chunked = args.chunked_prefill_size
    if chunked is not None and chunked > 0 and mode != "decode" and chunked % page_size:
        raise StartupError("AssertionError: chunked_prefill_size must be divisible by page_size")
    # SGLang's own adjustments (_handle_pd_disaggregation): a decode server has no radix cache, a prefill
    # server no CUDA graph unless piecewise CUDA graphs are on.
    radix = not args.disable_radix_cache and mode != "decode"
    cuda_graph = not args.disable_cuda_graph and not (
        mode == "prefill" and not args.enable_piecewise_cuda_graph
    )
    server_args = {
        k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, type(None)))
    }
    server_args.update(
        served_model_name=served,
        tokenizer_path=args.tokenizer_path or args.model_path,
        disable_radix_cache=not radix,
        disable_cuda_graph=not cuda_graph,
        context_length=None if args.context_length is None else args.context_length,
        page_size=page_size,
    )
    return SGLangConfig(
        model=args.model_path,
        model_path=path,
        served_names=(served,),
        host=args.host,
        port=args.port,
        tensor_parallel=args.tp_size,
        pipeline_parallel=args.pp_size,
        page_size=page_size,
        max_model_len=context_length(args.context_length, hf_config),
        max_running=args.max_running_requests or 256,
        radix_cache=radix,
        prompt_tokens_details=args.enable_cache_report,
        api_key=args.api_key,
        mode=mode,
        bootstrap_port=args.disaggregation_bootstrap_port,
        transfer_backend=args.disaggregation_transfer_backend,
        ib_devices=_ib_devices(args.disaggregation_ib_device),
        attention_backend=args.attention_backend,
        dense_as_sparse=args.dense_as_sparse,
        cuda_graph=cuda_graph,
        enable_metrics=args.enable_metrics,
        skip_warmup=args.skip_server_warmup,
        server_args=server_args,
    )


def _check_disaggregation(args: argparse.Namespace, mode: str) -> None:
    if mode == "null":
        return
    if args.disaggregation_transfer_backend not in SIMULATED_TRANSFERS:
        raise StartupError(
            f"--disaggregation-transfer-backend {args.disaggregation_transfer_backend} is not simulated "
            f"(only {' and '.join(SIMULATED_TRANSFERS)})"
        )
    if mode == "decode":
        for name in ("disaggregation_decode_tp", "disaggregation_decode_dp"):
            if getattr(args, name) is not None:
                flag = "--" + name.replace("_", "-")
                raise StartupError(f"AssertionError: Cannot set {flag} for the decode engine.")
    elif args.disaggregation_decode_tp is not None:
        big, small = (
            max(args.tp_size, args.disaggregation_decode_tp),
            min(args.tp_size, args.disaggregation_decode_tp),
        )
        if small < 1 or big % small:
            raise StartupError(
                "AssertionError: Different tp size is supported only when one tp is multiple of the other. "
                f"decode_tp={args.disaggregation_decode_tp}, prefill_tp={args.tp_size}"
            )


def _ib_devices(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    devices = tuple(d.strip() for d in text.split(","))
    if not all(devices):
        raise StartupError(f"--disaggregation-ib-device {text!r}: an empty device name in the list")
    return devices


def main(argv: list[str] | None = None) -> int:
    """The `sglang` executable: the arguments of `python3 -m sglang.launch_server`."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        env = settings.load(engine="sglang")
        config = resolve(args, model_root=env.model_root)
    except (StartupError, settings.SettingsError) as exc:
        print(f"ERROR [sim sglang] {exc}", file=sys.stderr)
        return 1
    try:
        from sim import sglang_server  # the serving stack is imported only once the command line is valid
    except ImportError as exc:
        print(
            f"ERROR [sim sglang] {sys.executable} lacks {exc.name}: put the project's .venv/bin on PATH "
            "after sim/bin (`make venv` creates it)",
            file=sys.stderr,
        )
        return 1
    return sglang_server.run(config)
