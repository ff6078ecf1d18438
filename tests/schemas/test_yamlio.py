"""The YAML loader: plain data, the line of every key, duplicate keys, and syntax errors with a line."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time

import pytest

from schemas.yamlio import (
    MAX_ALIAS_NODES,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    YamlSyntaxError,
    load_file,
    load_text,
)

from .conftest import ROOT, RUNNERS, rows

SMALL = """\
# comment
a:
  b: 1
  c:
  - x
  - {d: 2}
e: [1, 2]
"""


# fmt: off
@pytest.mark.parametrize(("path", "line"), [
    ((), 2), (("a",), 2), (("a", "b"), 3), (("a", "c"), 4), (("a", "c", 0), 5), (("a", "c", 1), 6),
    (("a", "c", 1, "d"), 6), (("e",), 7), (("e", 1), 7),
    (("a", "missing"), 2),  # a missing key points at its parent
    (("a", "c", 1, "missing", "deeper"), 6),
    (("nowhere",), 2),
])
# fmt: on
def test_line_of(path, line):
    assert load_text(SMALL).line_of(path) == line


def test_plain_data_with_yaml_types():
    doc = load_text("a: 1\nb: 0.5\nc: true\nd: null\ne: '8'\nf: 3_095_781\ng: [x]\n")
    assert doc.data == {"a": 1, "b": 0.5, "c": True, "d": None, "e": "8", "f": 3095781, "g": ["x"]}
    assert doc.duplicates == []


def test_merge_keys_resolve():
    assert load_text("base: &b {x: 1, y: 2}\nk:\n  <<: *b\n  y: 3\n").data["k"] == {"x": 1, "y": 3}


# fmt: off
@pytest.mark.parametrize(("text", "path", "line", "first"), [
    pytest.param("a: 1\nb: 2\na: 3\n", ("a",), 3, 1, id="top-level"),
    pytest.param("a:\n  x: 1\n  y: 2\n  x: 3\n", ("a", "x"), 4, 2, id="nested"),
    pytest.param("- k: 1\n  k: 2\n", (0, "k"), 2, 1, id="in-list-item"),
])
# fmt: on
def test_duplicate_keys_are_recorded(text, path, line, first):
    (dup,) = load_text(text).duplicates
    assert (dup.path, dup.line, dup.first_line) == (path, line, first)


# fmt: off
@pytest.mark.parametrize(("text", "line", "fragment"), [
    pytest.param("a:\n  b: [1, 2\nc: 3\n", 3, "invalid YAML", id="unclosed-flow"),
    pytest.param("a: 1\n b: 2\n", 2, "invalid YAML", id="bad-indent"),
    pytest.param("a: 1\n---\nb: 2\n", 2, "invalid YAML", id="two-documents"),
    pytest.param("a: *nowhere\n", 1, "invalid YAML", id="unknown-alias"),
    pytest.param("a: !foo bar\n", 1, "YAML tag '!foo' is not allowed", id="unknown-tag"),
    pytest.param("a: =\n", 1, "cannot read", id="bare-equals"),
    pytest.param("x: 1\na: !!int abc\n", 2, "cannot read !!int value", id="bad-int"),
    pytest.param("a: !!float x\n", 1, "cannot read", id="bad-float"),
    pytest.param("a: !!timestamp x\n", 1, "cannot read", id="bad-timestamp"),
    pytest.param("a: !!python/object:os.system ls\n", 1,
                 "YAML tag '!!python/object:os.system' is not allowed", id="python-tag"),
    pytest.param("a:\n  <<: 1\n", 2, "merging", id="bad-merge"),
    pytest.param("a: &x [*x]\n", 1, "recursive alias", id="recursive-alias"),
    pytest.param("a: " + "[" * 3000 + "]" * 3000 + "\n", 1, "nested deeper than 64 levels",
                 id="deep-nesting"),
    pytest.param("a: \x00\n", 1, "unacceptable character", id="nul-byte"),
    pytest.param("a: 1\nb: x\x07y\n", 2, "unacceptable character", id="control-character-line-2"),
])
# fmt: on
def test_malformed_yaml_is_a_syntax_error_with_a_line(text, line, fragment):
    with pytest.raises(YamlSyntaxError) as info:
        load_text(text, file="f.yaml")
    assert (info.value.file, info.value.line) == ("f.yaml", line)
    assert fragment in info.value.message
    assert "\n" not in info.value.message


def test_not_utf8_is_a_syntax_error(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(YamlSyntaxError) as info:
        load_file(path)
    assert info.value.line == 1 and "not UTF-8" in info.value.message


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_document_is_none(text):
    assert load_text(text).data is None


# ---------------------------------------------------------------- tags: plain data only

ALLOWED_HINT = "remove the tag; allowed: !!str, !!int, !!float, !!bool, !!null, !!timestamp, !!seq, !!map"


# fmt: off
@pytest.mark.parametrize(("text", "line", "path", "tag"), [
    pytest.param("a: !!python/object/apply:os.system [touch x]\n", 1, ("a",),
                 "!!python/object/apply:os.system", id="python-apply-on-a-list"),
    pytest.param("a: !!python/object/new:os.system {x: 1}\n", 1, ("a",), "!!python/object/new:os.system",
                 id="python-new-on-a-mapping"),
    pytest.param("- ok\n- !!python/name:os.system\n", 2, (1,), "!!python/name:os.system", id="python-name"),
    pytest.param("!!python/object/apply:os.system [id]\n", 1, (), "!!python/object/apply:os.system",
                 id="on-the-root"),
    pytest.param("x: 1\na: !!binary aGVsbG8=\n", 2, ("a",), "!!binary", id="binary"),
    pytest.param("a:\n  b: !custom {c: 1}\n", 2, ("a", "b"), "!custom", id="custom-on-a-mapping"),
    pytest.param("a: !custom [1]\n", 1, ("a",), "!custom", id="custom-on-a-list"),
    pytest.param("a: !!set {x, y}\n", 1, ("a",), "!!set", id="set"),
    pytest.param("a: !!omap [{b: 1}]\n", 1, ("a",), "!!omap", id="omap"),
    pytest.param("a: !!pairs [{b: 1}]\n", 1, ("a",), "!!pairs", id="pairs"),
    pytest.param("a: !!merge x\n", 1, ("a",), "!!merge", id="explicit-merge"),
    pytest.param("a: !<tag:yaml.org,2002:python/object/apply:os.system> [id]\n", 1, ("a",),
                 "!!python/object/apply:os.system", id="verbatim"),
    pytest.param("%TAG ! tag:yaml.org,2002:python/\n---\na: !object/apply:os.system [id]\n", 3, ("a",),
                 "!!python/object/apply:os.system", id="tag-directive"),
    pytest.param("? !!python/tuple [a, b]\n: 1\n", 1, (), "!!python/tuple", id="in-a-complex-key"),
    pytest.param("a:\n- x\n- !!str y\n- !!seq [!!python/none '']\n", 4, ("a", 2, 0), "!!python/none",
                 id="nested"),
])
# fmt: on
def test_non_standard_tag_is_refused_at_its_line(text, line, path, tag):
    with pytest.raises(YamlSyntaxError) as info:
        load_text(text, file="f.yaml")
    error = info.value
    assert (error.line, error.path) == (line, path)
    assert error.message == f"YAML tag {tag!r} is not allowed: configs are plain data"
    assert error.hint == ALLOWED_HINT


# fmt: off
@pytest.mark.parametrize(("text", "value"), [
    pytest.param("a: !!str 8\n", "8", id="str"),
    pytest.param("a: !!int '8'\n", 8, id="int"),
    pytest.param("a: !!float 1\n", 1.0, id="float"),
    pytest.param("a: !!bool true\n", True, id="bool"),
    pytest.param("a: !!null ''\n", None, id="null"),
    pytest.param("a: !!seq [1]\n", [1], id="seq"),
    pytest.param("a: !!map {b: 1}\n", {"b": 1}, id="map"),
    pytest.param("a: ! x\n", "x", id="non-specific"),
    # A plain date is a timestamp on its own (known-issues.yaml); writing the tag changes nothing.
    pytest.param("a: 2026-03-11\n", datetime.date(2026, 3, 11), id="plain-date"),
    pytest.param("a: !!timestamp 2026-03-11\n", datetime.date(2026, 3, 11), id="timestamp"),
])
# fmt: on
def test_core_schema_tags_are_read(text, value):
    assert load_text(text).data == {"a": value}


# ---------------------------------------------------------------- anchors, aliases and merge keys

MERGES = """\
base: &b {x: 1, y: 2}
other: &o {y: 20, z: 30}
k:
  <<: [*b, *o]
  y: 3
"""


def test_merge_keys_first_source_wins_and_written_keys_win_over_all():
    doc = load_text(MERGES)
    assert doc.data["k"] == {"x": 1, "z": 30, "y": 3}
    assert doc.duplicates == []  # overriding a merged key is what merge keys are for
    assert doc.line_of(("k", "x")) == 4  # a merged key points at its '<<'


def test_an_aliased_value_points_at_the_alias():
    doc = load_text("a: &a {b: {c: 1}}\nd: *a\n")
    assert doc.data["d"] == {"b": {"c": 1}}
    assert doc.line_of(("d", "b", "c")) == 2


# fmt: off
@pytest.mark.parametrize(("text", "line", "fragment", "hint"), [
    pytest.param("a: &x 1\nb: &x 2\n", 2, "duplicate anchor &x", "first defined on line 1",
                 id="duplicate-anchor"),
    pytest.param("a: &x {b: *x}\n", 1, "recursive alias *x inside its own anchor", "", id="recursive-in-map"),
    pytest.param("a: *x\nb: &x 1\n", 1, "found undefined alias *x", "", id="alias-before-anchor"),
    pytest.param("a:\n  <<: [1]\n", 2, "while merging, expected a mapping", "", id="merge-list-of-scalars"),
    pytest.param("a: 1\n---\nb: 2\n", 2, "expected a single document", "", id="second-document"),
    pytest.param("a: {&m <<: {x: 1}}\nb: [*m]\n", 2, "found undefined alias *m", "", id="anchored-merge-key"),
])
# fmt: on
def test_anchor_misuse_is_a_syntax_error(text, line, fragment, hint):
    with pytest.raises(YamlSyntaxError) as info:
        load_text(text, file="f.yaml")
    assert info.value.line == line and fragment in info.value.message and info.value.hint == hint


# ---------------------------------------------------------------- bounds: no file hangs, exhausts or crashes


def billion_laughs(levels: int = 9, width: int = 10) -> str:
    """The classic alias bomb: `width`**`levels` values in a few hundred bytes."""
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 30) -> str:
    """Merge keys repeating a mapping under new keys, level after level."""
    lines = ["m0: &m0 {a: 1, b: 2}"]
    lines += [f"m{i}: &m{i} {{<<: *m{i - 1}, x: *m{i - 1}, y: *m{i - 1}}}" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text", [billion_laughs(), merge_bomb()], ids=["billion-laughs", "merge-bomb"]
)
def test_alias_expansion_is_bounded(text):
    start = time.monotonic()
    with pytest.raises(YamlSyntaxError) as info:
        load_text(text, file="f.yaml")
    assert time.monotonic() - start < 5
    assert f"aliases expand to more than {MAX_ALIAS_NODES:,} values (an alias bomb?)" == info.value.message
    assert info.value.hint == "write the values out, or use fewer aliases of large anchors"


def test_aliases_below_the_bound_expand():
    doc = load_text(billion_laughs(levels=3, width=10))  # about 12,000 values through aliases
    assert len(doc.data["l3"]) == 10 and doc.data["l3"][9][9][9] == ["lol"] * 10


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH])
def test_nesting_up_to_the_bound_is_read(depth):
    assert load_text("a: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n").data is not None


@pytest.mark.parametrize(
    "text",
    ["a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n", "- " * (MAX_DEPTH + 1) + "x\n"],
    ids=["flow", "block"],
)
def test_nesting_beyond_the_bound_is_refused(text):
    with pytest.raises(YamlSyntaxError) as info:
        load_text(text, file="f.yaml")
    assert (info.value.line, info.value.message) == (1, f"nested deeper than {MAX_DEPTH} levels")


def test_too_many_values_are_refused():
    with pytest.raises(YamlSyntaxError) as info:
        load_text("[" + "0, " * MAX_NODES + "0]\n", file="f.yaml")
    assert info.value.message == f"more than {MAX_NODES:,} values in one file"


def test_text_above_the_size_bound_is_refused_before_parsing():
    with pytest.raises(YamlSyntaxError) as info:
        load_text("[" * (MAX_BYTES + 1), file="f.yaml")  # would be a syntax error if parsed
    assert info.value.line == 1 and "larger than the 8 MiB lint reads" in info.value.message


def test_file_above_the_size_bound_is_refused_before_reading_it_all(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as handle:
        handle.truncate(50 * 2**20)  # 50 MB of NUL bytes: a YAML error, if it were ever parsed
    with pytest.raises(YamlSyntaxError) as info:
        load_file(path)
    assert info.value.message == "file of 52,428,800 bytes is larger than the 8 MiB lint reads"
    assert "split it" in info.value.hint


HOSTILE_FILES = {
    "deep.yaml": ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than 64 levels"),
    "bomb.yaml": (billion_laughs(), "aliases expand to more than"),
    "huge.yaml": ("a: [" + "1, " * 3_000_000 + "1]\n", "larger than the 8 MiB lint reads"),
}


@pytest.mark.parametrize("name", HOSTILE_FILES)
def test_hostile_file_through_the_cli_is_one_finding(tmp_path, name):
    """In a child process with 1 GB of address space: before these bounds, 100,000 nested '[' crashed the
    interpreter (SIGSEGV) and the alias bomb ran out of memory."""
    text, fragment = HOSTILE_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
    code = limit + "from schemas.lint import entrypoint; entrypoint()"
    argv = [sys.executable, "-c", code, "--profile", "inferencex-legacy", "--runners", RUNNERS, path]
    argv = [str(a) for a in argv]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, (done.returncode, done.stderr[-500:])
    ((line, key_path, message, _),) = rows(done.stdout, path)
    assert fragment in message and "Traceback" not in done.stderr
