"""argparse types and small helpers the node tools share; stdlib only."""

from __future__ import annotations

import argparse
import math


def say(message: str) -> None:
    """A progress or diagnostic line on stderr, at once (the node script shows it in the job's output)."""
    import sys

    print(message, file=sys.stderr, flush=True)


def seconds_text(value: float) -> str:
    return f"{value:g}"


def positive_float(text: str) -> float:
    value = float(text)
    # float() reads "nan" and "inf" too: a NaN deadline compares false forever, so a wait would never end.
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0 (got {text!r})")
    return value


def http_url(text: str) -> str:
    # imported here: httpget brings http.client (about 25 ms), which most node tools never use
    from httpget import split_url

    try:
        split_url(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (got {text!r})")
    return key, value
