"""Judge `python3 -m sglang.launch_server` command lines with SGLang's own parser and ServerArgs.

Runs inside .venv-engine-sglang (standard library and SGLang only): `python probe_sglang.py REQUEST ANSWER`
(probe_lib.py has the file shapes). Stages, in one process for every line, as launch_server runs them:
parse (load_plugins, then prepare_server_args: argparse with abbreviations, ServerArgs) -> resolve
(ServerArgs.resolve_once: model config from the stub, parallelism, backends, model overrides, PD checks).
Resolution needs a device and there is no GPU here: `--device cpu` is appended to a line that names none.
Depth "parse" stops after parsing (a build whose own parser is not this one: its resolution is not ours).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from pathlib import Path

import probe_lib
from probe_lib import Rejected, exception_text, one_line

PROGRAM = ["python3", "-m", "sglang.launch_server"]
probe_lib.set_defaults({"TOKENIZERS_PARALLELISM": "false"})


def _torchvision_loads() -> None:
    """PyPI's torchvision is a CUDA build: its ops library needs libtorch_cuda and cannot load beside the
    CPU torch, and its import then fails on two unguarded fake-kernel registrations ("operator
    torchvision::nms does not exist"). SGLang imports torchvision.transforms while resolving. Declaring
    the two op schemas, without kernels, lets it import; any real use of them still fails loudly."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    library = next(Path(spec.submodule_search_locations[0]).glob("_C*.so"), None)
    try:
        if library is not None:
            torch.ops.load_library(str(library))
            return
    except OSError:
        pass
    for name in ("nms", "qnms"):
        with contextlib.suppress(RuntimeError):  # already defined
            schema = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            torch.library.define(f"torchvision::{name}", schema)


def prepare():
    _torchvision_loads()
    import argparse

    import sglang
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import ServerArgs, prepare_server_args

    load_plugins()  # as launch_server does before parsing: plugins may add flags

    def check(argv: list, depth: str) -> None:
        if argv[:3] != PROGRAM:
            raise Rejected("argv", f"not a `{' '.join(PROGRAM)}` command line: {argv[:3]}")
        args = argv[3:]
        if not any(a == "--device" or a.startswith("--device=") for a in args):
            args += ["--device", "cpu"]
        server_args = _run("parse", lambda: prepare_server_args(args))
        if depth != "parse":
            _run("resolve", server_args.resolve_once)

    def describe() -> dict:
        from probe_argdump import describe as describe_parser

        parser = argparse.ArgumentParser()  # as prepare_server_args builds it
        ServerArgs.add_cli_args(parser)
        return describe_parser(parser, engine="sglang", version=sglang.__version__)

    return sglang.__version__, check, describe


def _run(stage: str, step):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return step()
    except SystemExit as exc:
        raise Rejected(stage, one_line(err.getvalue()) or f"exit {exc.code}") from None
    except Exception as exc:
        raise Rejected(stage, exception_text(exc)) from None


if __name__ == "__main__":
    sys.exit(probe_lib.main(prepare))
