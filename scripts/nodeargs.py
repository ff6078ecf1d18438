"""argparse types and small helpers the node tools share; stdlib only."""

from __future__ import annotations

import argparse


def say(message: str) -> None:
    """A progress or diagnostic line on stderr, at once (the node script shows it in the job's output)."""
    import sys

    print(message, file=sys.stderr, flush=True)


def seconds_text(value: float) -> str:
    return f"{value:g}"


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {text!r})")
    return value


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (got {text!r})")
    return key, value
