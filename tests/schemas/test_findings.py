"""Findings print as one line of plain text: whatever a key, value or file name holds, no line break, no
terminal control (C0, C1, DEL), no bidi override or isolate and no other unprintable character reaches the
output raw (schemas/findings.py one_line, used by Finding.format and the CLI's own messages)."""

from __future__ import annotations

import pytest

from schemas.findings import Finding, one_line

from .conftest import baseline, dump, rows, run_lint, write

# fmt: off
UNPRINTABLE = [
    pytest.param("\n", "\\n", id="line-feed"),
    pytest.param("\r", "\\r", id="carriage-return"),
    pytest.param("\t", "\\t", id="tab"),
    pytest.param("\x00", "\\x00", id="nul"),
    pytest.param("\x07", "\\x07", id="bell"),
    pytest.param("\x1b", "\\x1b", id="escape"),
    pytest.param("\x7f", "\\x7f", id="delete"),
    pytest.param("\x85", "\\x85", id="c1-next-line"),
    pytest.param("\x9b", "\\x9b", id="c1-csi"),
    pytest.param("\u061c", "\\u061c", id="arabic-letter-mark"),
    pytest.param("\u200e", "\\u200e", id="left-to-right-mark"),
    pytest.param("\u200f", "\\u200f", id="right-to-left-mark"),
    pytest.param("\u2028", "\\u2028", id="line-separator"),
    pytest.param("\u2029", "\\u2029", id="paragraph-separator"),
    *[pytest.param(chr(c), f"\\u{c:04x}", id=f"bidi-{c:04x}") for c in range(0x202A, 0x202F)],
    *[pytest.param(chr(c), f"\\u{c:04x}", id=f"bidi-isolate-{c:04x}") for c in range(0x2066, 0x206A)],
    pytest.param("\u200b", "\\u200b", id="zero-width-space"),
    pytest.param("\ud800", "\\ud800", id="lone-surrogate"),
]
# fmt: on


@pytest.mark.parametrize(("char", "escape"), UNPRINTABLE)
def test_finding_escapes_it_in_path_message_and_hint(char, escape):
    """Finding.format: every part of the line."""
    line = Finding(f"f{char}.yaml", 3, (f"k{char}", 0), f"bad {char!s} value", f"fix{char}").format()
    assert line == f"f{escape}.yaml:3: k{escape}[0]: bad {escape} value (fix{escape})"
    assert line.isprintable()


@pytest.mark.parametrize("text", ["plain ASCII", "ü, 1٣, 中文, 🙂", "a 'quoted' \"word\" $(x)"])
def test_printable_text_is_kept(text):
    assert one_line(text) == text


# YAML itself reads its line breaks (\n, \r, NEL) in a key or plain value as a break or a space, and
# refuses a lone surrogate.
SKIP = ("line-feed", "carriage-return", "tab", "c1-next-line", "lone-surrogate")
IN_YAML = [p for p in UNPRINTABLE if p.id not in SKIP]


@pytest.mark.parametrize(("char", "escape"), IN_YAML)
def test_cli_lines_are_printable(tmp_path, char, escape):
    """Through the CLI: a config key and a value carrying the character (written as a YAML escape)."""
    entry = baseline()
    entry["model"] = f"amd/Kimi{char}"
    file = write(tmp_path, "master.yaml", dump({f"key{char}": entry}))
    code, out, err = run_lint(file)
    assert code == 1 and char not in out
    assert all(line.isprintable() for line in out.splitlines()), out
    found = rows(out, file)
    assert any(r[1] == f"key{escape}" and "is not a config key" in r[2] for r in found), out
    model = f"'amd/Kimi{escape}' is not a model id"
    assert any(r[1] == f"key{escape}.model" and model in r[2] for r in found), out


def test_usage_error_escapes_the_file_name():
    code, out, err = run_lint("no\x1b]0;owned\x07such.yaml")
    assert (code, out) == (2, "")
    assert err == "lint: no such file: no\\x1b]0;owned\\x07such.yaml\n"
