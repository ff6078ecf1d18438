"""Judge `vllm serve` command lines with vLLM's own parser and config classes, without a GPU.

Runs inside .venv-engine-vllm (standard library and vLLM only): `python probe_vllm.py REQUEST ANSWER`
(probe_lib.py has the file shapes). Stages, in one process for every line, as `vllm serve` runs them:
parse (the `vllm` console script's FlexibleArgumentParser with the serve subcommand: `--model` moved,
`-O3`, `_` = `-`, abbreviations) -> validate (validate_parsed_serve_args) -> engine-args
(AsyncEngineArgs.from_cli_args) -> kv-connector (KVConnectorFactory resolves the connector class of the
KVTransferConfig and of each MultiConnector child, each built as its own KVTransferConfig) ->
create_engine_config (the VllmConfig on the CPU platform, against the stub model: heads vs TP, experts vs
EP, max-model-len vs the model's, kv-cache dtype, ...) -> mooncake (vLLM swallows a failed
`import mooncake.engine` and fails only in the worker: checked here, after the config, so that config
errors are not masked).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
import typing

import probe_lib
from probe_lib import Rejected, exception_text, one_line

# Before vLLM is imported: the platform is chosen on first use, logging is set up on import, and vLLM's
# logger writes to stdout by default.
probe_lib.set_defaults(
    {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_LOGGING_LEVEL": "ERROR",
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
)


def prepare():
    import vllm
    from vllm.config.kv_transfer import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand()
    serve_parser = serve.subparser_init(subparsers)
    serve_parser.set_defaults(dispatch_function=serve.cmd)
    classes = (KVTransferConfig, KVConnectorFactory, AsyncEngineArgs, UsageContext)

    def check(argv: list, depth: str) -> None:
        if argv[:2] != ["vllm", "serve"]:
            raise Rejected("argv", f"not a `vllm serve` command line: {argv[:2]}")
        args = _parse(top, argv[1:])
        if depth == "parse":
            return
        _config(serve, args, *classes)

    def describe() -> dict:
        from probe_argdump import describe as describe_parser

        data = describe_parser(serve_parser, engine="vllm", version=vllm.__version__)
        _add_literals(data, AsyncEngineArgs)
        return data

    return vllm.__version__, check, describe


def _parse(top, argv: list):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return top.parse_args(argv)
    except SystemExit as exc:
        raise Rejected("parse", one_line(err.getvalue()) or f"argparse exit {exc.code}") from None
    except Exception as exc:  # an argument's type raising something else
        raise Rejected("parse", exception_text(exc)) from None


def _config(serve, args, KVTransferConfig, KVConnectorFactory, AsyncEngineArgs, UsageContext) -> None:
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag  # as ServeSubcommand.cmd does
    stage = "validate"
    try:
        serve.validate(args)
        stage = "engine-args"
        engine_args = AsyncEngineArgs.from_cli_args(args)
    except Exception as exc:
        raise Rejected(stage, exception_text(exc)) from None
    mooncake_classes = []
    if engine_args.kv_transfer_config is not None:
        mooncake_classes = _connectors(engine_args.kv_transfer_config, KVTransferConfig, KVConnectorFactory)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    except SystemExit as exc:
        raise Rejected("create_engine_config", one_line(err.getvalue()) or f"exit {exc.code}") from None
    except Exception as exc:
        raise Rejected("create_engine_config", exception_text(exc)) from None
    for module in mooncake_classes:
        _mooncake_loads(module)


def _connectors(config, KVTransferConfig, KVConnectorFactory) -> list:
    """Resolve the connector class of `config` and of each MultiConnector child; the modules whose
    TransferEngine import failed silently (vLLM's Mooncake module guards it)."""
    try:
        cls = KVConnectorFactory.get_connector_class(config)
    except Exception as exc:
        raise Rejected("kv-connector", exception_text(exc)) from None
    module = sys.modules.get(cls.__module__)
    guarded = [module] if module is not None and getattr(module, "TransferEngine", object) is None else []
    if config.kv_connector != "MultiConnector":
        return guarded
    children = config.kv_connector_extra_config.get("connectors")
    if not children:
        raise Rejected("kv-connector", "MultiConnector without kv_connector_extra_config.connectors")
    for child in children:
        try:
            child_config = KVTransferConfig(**{"engine_id": config.engine_id, **child})
        except Exception as exc:
            raise Rejected("kv-connector", f"MultiConnector child: {exception_text(exc)}") from None
        guarded += _connectors(child_config, KVTransferConfig, KVConnectorFactory)
    return guarded


def _mooncake_loads(module) -> None:
    try:
        import mooncake.engine  # noqa: F401

        why = f"{module.__name__}.TransferEngine is None"
    except Exception as exc:
        why = exception_text(exc)
    raise Rejected("mooncake", f"Mooncake is not available ({why})")


def _add_literals(data: dict, AsyncEngineArgs) -> None:
    """Many options take any string at parse time and are checked against their config field's Literal
    later (--kv-cache-dtype): record those values as `literal_values`."""
    from vllm.entrypoints.common.cli_args import FrontendArgs

    hints: dict = {}
    for cls in (FrontendArgs, AsyncEngineArgs):
        try:
            hints.update(typing.get_type_hints(cls))
        except Exception:  # a forward reference vLLM itself never resolves
            hints.update({f.name: f.type for f in dataclasses.fields(cls)})
    for option in data["options"]:
        values = _literals(hints.get(option["dest"]))
        option["literal_values"] = sorted(map(str, values)) if values else None


def _literals(tp) -> list:
    if typing.get_origin(tp) is typing.Literal:
        return [v for v in typing.get_args(tp) if isinstance(v, (str, int, float, bool))]
    return [v for arg in typing.get_args(tp) for v in _literals(arg)]


if __name__ == "__main__":
    sys.exit(probe_lib.main(prepare))
