#!/usr/bin/env python3
"""The cause class of a node's failure, from the registry scripts/causes.json; stdlib only (Python 3.8+).

A failure is what the node knows of it: the step, the exit code (or `stalled`/`stopped`), the failing
service and a text (the FAILED line, a service's log tail). classify() returns the first cause whose
signature matches, with a one-line detail; the registry's own "about" says how signatures are written.
The registry is data a site may extend, so it is read strictly: a key, regex or placeholder it does not
know is an error naming the entry, never a signature silently skipped.

  causes.py classify --step S --code C [--service NAME] --text-file F [--log F]
      prints `<id>\\t<blame>\\t<detail>`; --log adds the tail of a service's log to the text
  causes.py check      the registry loads and every example classifies as its own cause
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import string
import sys
from typing import NamedTuple

REGISTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "causes.json")
MAX_REGISTRY_BYTES = 1 << 20
BLAMES = ("node", "config", "image", "software", "peer", "unknown")
SIGNATURE_KEYS = ("text", "code", "step", "service", "detail")
EXAMPLE_KEYS = ("text", "code", "step", "service", "source")
CAUSE_KEYS = ("id", "title", "blame", "signatures", "examples")
NAMED = ("line", "code", "signal", "exception", "service")  # the placeholders a detail may use by name
DETAIL_LIMIT = 300
TRACEBACK = "Traceback (most recent call last)"
_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


class CausesError(Exception):
    """The registry cannot be used; one line naming the entry."""


class Signature(NamedTuple):
    text: re.Pattern[str] | None
    code: re.Pattern[str] | None
    step: re.Pattern[str] | None
    service: re.Pattern[str] | None
    detail: str | None


class Cause(NamedTuple):
    id: str
    title: str
    blame: str
    signatures: tuple[Signature, ...]
    examples: tuple[dict[str, str], ...]


class Classified(NamedTuple):
    id: str
    blame: str
    detail: str

    def line(self) -> str:
        return f"{self.id} ({self.detail})"


# ---------------------------------------------------------------- reading the registry


def load(path: str = REGISTRY) -> tuple[Cause, ...]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_REGISTRY_BYTES + 1)
    except OSError as exc:
        raise CausesError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_REGISTRY_BYTES:
        raise CausesError(f"{path}: larger than {MAX_REGISTRY_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CausesError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"about", "causes"} or not isinstance(doc["causes"], list):
        raise CausesError(f'{path}: must be an object with "about" and a "causes" list')
    causes = [_cause(path, i, entry) for i, entry in enumerate(doc["causes"])]
    ids = [c.id for c in causes]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise CausesError(f"{path}: cause ids appear twice: {', '.join(twice)}")
    if not causes or causes[-1].id != "unknown" or causes[-1].signatures:
        raise CausesError(
            f'{path}: the last cause must be "unknown", without signatures (what nothing matched)'
        )
    return tuple(causes)


def _cause(path: str, index: int, entry: object) -> Cause:
    where = f"{path}: causes[{index}]"
    if not isinstance(entry, dict):
        raise CausesError(f"{where}: must be an object")
    where = f"{where} ({entry.get('id', '?')})"
    _keys(where, entry, CAUSE_KEYS, CAUSE_KEYS)
    for key in ("id", "title", "blame"):
        if not isinstance(entry[key], str) or not entry[key]:
            raise CausesError(f"{where}: {key} must be a non-empty string")
    if not _ID.fullmatch(entry["id"]):
        raise CausesError(f"{where}: id must be kebab-case (a-z, 0-9, -)")
    if entry["blame"] not in BLAMES:
        raise CausesError(f"{where}: blame {entry['blame']!r} is not one of {', '.join(BLAMES)}")
    for key in ("signatures", "examples"):
        if not isinstance(entry[key], list):
            raise CausesError(f"{where}: {key} must be a list")
    signatures = tuple(_signature(f"{where} signatures[{i}]", s) for i, s in enumerate(entry["signatures"]))
    examples = tuple(_example(f"{where} examples[{i}]", e) for i, e in enumerate(entry["examples"]))
    if not examples:
        raise CausesError(f"{where}: needs at least one recorded example")
    return Cause(entry["id"], entry["title"], entry["blame"], signatures, examples)


def _keys(where: str, entry: dict, allowed: tuple, required: tuple) -> None:
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise CausesError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(allowed)})")
    missing = [k for k in required if k not in entry]
    if missing:
        raise CausesError(f"{where}: missing {', '.join(missing)}")


def _signature(where: str, entry: object) -> Signature:
    if not isinstance(entry, dict):
        raise CausesError(f"{where}: must be an object")
    _keys(where, entry, SIGNATURE_KEYS, ())
    if not any(k in entry for k in ("text", "code", "step", "service")):
        raise CausesError(f"{where}: matches everything (give text, code, step or service)")
    if not all(isinstance(v, str) for v in entry.values()):
        raise CausesError(f"{where}: every value must be a string")
    compiled = {}
    for key in ("text", "code", "step", "service"):
        if key in entry:
            try:
                compiled[key] = re.compile(entry[key], re.M if key == "text" else 0)
            except re.error as exc:
                raise CausesError(f"{where}: {key} is not a regex: {exc}") from None
    detail = entry.get("detail")
    if detail is not None:
        groups = compiled["text"].groups if "text" in compiled else 0
        for _, name, _, _ in string.Formatter().parse(detail):
            if name is None:
                continue
            if not (name in NAMED or (name.isdigit() and int(name) < groups)):
                raise CausesError(
                    f"{where}: detail placeholder {{{name}}} is unknown (text groups: {groups})"
                )
    return Signature(
        compiled.get("text"), compiled.get("code"), compiled.get("step"), compiled.get("service"), detail
    )


def _example(where: str, entry: object) -> dict[str, str]:
    if not isinstance(entry, dict):
        raise CausesError(f"{where}: must be an object")
    _keys(where, entry, EXAMPLE_KEYS, ("text", "code", "source"))
    if not all(isinstance(v, str) for v in entry.values()):
        raise CausesError(f"{where}: every value must be a string")
    return entry


# ---------------------------------------------------------------- classifying


def classify(
    causes: tuple[Cause, ...], *, text: str, code: str = "", step: str = "", service: str = ""
) -> Classified:
    """The first cause with a signature matching, and its detail (one printable line)."""
    for cause in causes:
        for sig in cause.signatures:
            found = _matches(sig, text, code, step, service)
            if found is None:
                continue
            detail = _detail(cause, sig, found, text=text, code=code, service=service)
            return Classified(cause.id, cause.blame, one_line(detail, DETAIL_LIMIT))
    last = causes[-1]
    headline = [line for line in text.splitlines() if line.strip()]
    return Classified(last.id, last.blame, one_line(headline[0] if headline else last.title, DETAIL_LIMIT))


def _matches(sig: Signature, text: str, code: str, step: str, service: str):
    """The text's match (True without a text pattern) when every field matches, else None."""
    for pattern, value in ((sig.code, code), (sig.step, step), (sig.service, service)):
        if pattern is not None and not pattern.fullmatch(value):
            return None
    if sig.text is None:
        return True
    return sig.text.search(text)


def _detail(cause: Cause, sig: Signature, found, *, text: str, code: str, service: str) -> str:
    line = ""
    groups: tuple = ()
    if found is not True:
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.end())
        line = text[start : end if end >= 0 else len(text)].strip()
        groups = tuple(g or "" for g in found.groups())
    if sig.detail is None:
        return line or cause.title
    values = {"line": line, "code": code, "signal": signal_name(code), "service": service or "the service"}
    if "{exception}" in sig.detail:
        values["exception"] = exception_line(text)
    return sig.detail.format(*groups, **values)


def signal_name(code: str) -> str:
    """SIGKILL for 137; the code itself where it stands for no signal."""
    if code.isdigit() and int(code) > 128:
        try:
            return signal.Signals(int(code) - 128).name
        except ValueError:
            pass
    return f"exit code {code}" if code else "an unknown exit"


def exception_line(text: str) -> str:
    """The exception line of the last traceback: the first unindented line after its header. Loggers
    (vLLM workers, `ERROR ... [file.py:N]`) put the same prefix on every line, so it is removed first."""
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if TRACEBACK in line]
    if not marks:
        return "no traceback"
    start = marks[-1]
    prefix = lines[start].split(TRACEBACK)[0]
    last = ""
    for raw in lines[start + 1 :]:
        text_ = (raw[len(prefix) :] if raw.startswith(prefix) else raw).rstrip("\r")
        if text_ and not text_[0].isspace():
            return text_
        if text_.strip():
            last = text_.strip()
    return last or "traceback cut off"  # the tail ended inside the traceback


def one_line(text: object, limit: int = 300) -> str:
    """TEXT as one printable line of at most LIMIT characters: whitespace runs become one space, other
    control characters are escaped. For text a peer or a server chose (an error body, a published value):
    it must not split a node's one-line message or drive the terminal that shows the job's output."""
    words = " ".join(str(text).split())
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in words)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def check(causes: tuple[Cause, ...]) -> list[str]:
    """Every example that does not classify as its own cause, one line each."""
    wrong = []
    for cause in causes:
        for example in cause.examples:
            got = classify(
                causes,
                text=example["text"],
                code=example["code"],
                step=example.get("step", ""),
                service=example.get("service", ""),
            )
            if got.id != cause.id:
                wrong.append(f"{cause.id}: example {example['text'][:80]!r} classifies as {got.id}")
    return wrong


# ---------------------------------------------------------------- command line


def read_tail(path: str, limit: int = 256 * 1024) -> str | None:
    """The last LIMIT bytes of PATH, a log's tail and never the whole log; None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="causes.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("classify", help="the cause of one failure: <id>\\t<blame>\\t<detail>")
    c.add_argument("--step", default="")
    c.add_argument("--code", default="")
    c.add_argument("--service", default="")
    c.add_argument("--text-file", required=True, help="what the node said of the failure")
    c.add_argument("--log", default=None, help="the failing service's log (its tail is added)")
    c.add_argument("--registry", default=REGISTRY)
    k = sub.add_parser("check", help="load the registry and classify its examples")
    k.add_argument("--registry", default=REGISTRY)
    args = p.parse_args(argv)
    try:
        causes = load(args.registry)
    except CausesError as exc:
        print(f"causes.py: {exc}", file=sys.stderr)
        return 2
    if args.command == "check":
        wrong = check(causes)
        for line in wrong:
            print(line, file=sys.stderr)
        return 1 if wrong else 0
    text = read_tail(args.text_file) or ""  # unreadable: nothing said, the cause is unknown
    if args.log:
        text += "\n" + "\n".join((read_tail(args.log) or "").splitlines()[-200:])
    got = classify(causes, text=text, code=args.code, step=args.step, service=args.service)
    print(f"{got.id}\t{got.blame}\t{got.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
