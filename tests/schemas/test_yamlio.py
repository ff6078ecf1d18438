"""The YAML loader: plain data, the line of every key, duplicate keys, and syntax errors with a line."""

from __future__ import annotations

import pytest

from schemas.yamlio import YamlSyntaxError, load_file, load_text

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
    pytest.param("a: !foo bar\n", 1, "cannot read !foo value", id="unknown-tag"),
    pytest.param("a: =\n", 1, "cannot read", id="bare-equals"),
    pytest.param("x: 1\na: !!int abc\n", 2, "cannot read tag:yaml.org,2002:int value", id="bad-int"),
    pytest.param("a: !!float x\n", 1, "cannot read", id="bad-float"),
    pytest.param("a: !!timestamp x\n", 1, "cannot read", id="bad-timestamp"),
    pytest.param("a: !!python/object:os.system ls\n", 1, "cannot read", id="python-tag"),
    pytest.param("a:\n  <<: 1\n", 2, "merging", id="bad-merge"),
    pytest.param("a: &x [*x]\n", 1, "recursive alias", id="recursive-alias"),
    pytest.param("a: " + "[" * 3000 + "]" * 3000 + "\n", 1, "nested too deeply", id="deep-nesting"),
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
