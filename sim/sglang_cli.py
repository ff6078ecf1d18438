"""`python3 -m sglang.launch_server ARGS` parsed the way SGLang's ServerArgs does, into a frozen SGLangConfig.

The simulated build is OpenBMB's SGLang fork (branch minicpm_sala, docs/upstream-facts.md#minicpm-sala). Its
own parser is not published, so the parser is rebuilt from upstream SGLang 0.5.23's recorded one
(sim/parity/sglang-0.5.23.json, sim/realflags.py) plus the fork's own flags that configs/engine-builds.yaml
declares with their source (FORK_FLAGS); FLAGS names the subset the simulator implements, any other flag is
refused as not simulated.

Usage errors (unknown or not simulated flag, ambiguous abbreviation, bad value or choice, missing
--model-path) print argparse's message and exit 2, as SGLang's parser does; start-up errors print one ERROR
line and exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from decimal import Decimal
from functools import cache
from typing import Any

from sim import realflags, settings
from sim.config import StartupError, model_dir, read_hf_config
from sim.sglang_config import FAKE_BOOTSTRAP_HOST, VERSION, SGLangConfig

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
            return int(number) << (10 * ("KMGT".index(suffix[0]) + 1))
        return int(Decimal(number) * 10 ** (3 * ("kMGT".index(suffix) + 1)))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{text}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes "
            "(1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


U = realflags.Use
# The fork's own flags (its server_args.py), as configs/engine-builds.yaml declares them for build
# sglang-minicpm-sala-fork (flag: values): upstream 0.5.23 has none of them.
FORK_FLAGS = {
    "--dense-as-sparse": "none",
    "--force-dense-minicpm": "none",
    "--fuse-topk": "none",
    "--split-stage1": "none",
    "--enable-piecewise-cuda-graph": "none",
    "--cuda-graph-max-bs": "one",
    "--cuda-graph-bs": "one-or-more",
    "--disaggregation-decode-tp": "one",
    "--disaggregation-decode-dp": "one",
    "--disaggregation-prefill-pp": "one",
}
EXTRA = tuple(FORK_FLAGS.items())
# The flags the simulator implements, each named by one of its option strings with how the simulator reads
# it; option strings, dests (ServerArgs' field names), arity and choices are upstream 0.5.23's (and the
# declared ones the fork's): sim/realflags.py. Every other flag SGLang has is refused as not simulated.
FLAGS: dict[str, realflags.Use] = {
    "--tokenizer-mode": U(default="auto"),
    "--load-format": U(default="auto"),
    "--context-length": U(human_int),
    "--host": U(default="127.0.0.1"),
    "--port": U(default=30000),
    "--dtype": U(default="auto"),
    "--kv-cache-dtype": U(default="auto"),
    "--max-total-tokens": U(human_int),
    "--max-prefill-tokens": U(human_int, default=16384),
    "--schedule-policy": U(default="fcfs"),
    "--schedule-conservativeness": U(default=1.0),
    "--tp-size": U(default=1),
    "--pp-size": U(default=1),
    "--stream-interval": U(default=1),
    "--watchdog-timeout": U(default=300),
    "--base-gpu-id": U(default=0),
    "--log-level": U(default="info"),
    "--log-requests-level": U(default=2),
    "--decode-log-interval": U(default=40),
    "--dp-size": U(default=1),
    "--load-balance-method": U(default="auto"),
    "--nnodes": U(default=1),
    "--node-rank": U(default=0),
    "--json-model-override-args": U(default="{}"),
    "--torch-compile-max-bs": U(default=32),
    "--num-continuous-decode-steps": U(default=1),
    "--disaggregation-mode": U(default="null"),
    # Any recorded backend parses; start-up refuses those not simulated (SIMULATED_TRANSFERS).
    "--disaggregation-transfer-backend": U(default="mooncake"),
    "--disaggregation-bootstrap-port": U(default=8998),
    "--num-reserved-decode-tokens": U(default=512),
    "--disaggregation-prefill-pp": U(int, default=1),
    **{name: U(int) for name in ("--cuda-graph-max-bs", "--cuda-graph-bs")},
    **{name: U(int) for name in ("--disaggregation-decode-tp", "--disaggregation-decode-dp")},
    **{
        name: U()
        for name in (
            "--model-path",
            "--tokenizer-path",
            "--revision",
            "--warmups",
            "--quantization",
            "--mem-fraction-static",
            "--max-running-requests",
            "--max-queued-requests",
            "--chunked-prefill-size",
            "--prefill-max-requests",
            "--page-size",
            "--device",
            "--random-seed",
            "--dist-timeout",
            "--download-dir",
            "--log-level-http",
            "--api-key",
            "--served-model-name",
            "--chat-template",
            "--dist-init-addr",
            "--attention-backend",
            "--prefill-attention-backend",
            "--decode-attention-backend",
            "--sampling-backend",
            "--grammar-backend",
            "--disaggregation-ib-device",
            # switches
            "--enable-hierarchical-cache",
            "--disable-cuda-graph",
            "--enable-dp-attention",
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
            *(flag for flag, values in FORK_FLAGS.items() if values == "none"),
        )
    },
}


@cache
def build_parser() -> realflags.Parser:
    """launch_server's parser, rebuilt from upstream 0.5.23's recorded one and the fork's declared flags with
    the simulator's FLAGS (its parse() resolves abbreviations over all of those flags and refuses the ones
    not simulated)."""
    return realflags.build("sglang", PROG, FLAGS, extra=EXTRA)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argv after `-m sglang.launch_server`; argparse errors exit 2. Abbreviations resolve over upstream
    0.5.23's flags and the fork's, as SGLang's parser (allow_abbrev) does over its own."""
    return build_parser().parse(list(argv))


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
