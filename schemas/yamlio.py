"""Load YAML into plain data while remembering the line of every key and reporting duplicate keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

# libyaml when present: the real InferenceX changelog (400 kB) must lint in well under a second.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Path_ = tuple  # a key path: str for mapping keys, int for sequence indices


@dataclass(frozen=True)
class Duplicate:
    path: Path_  # path of the duplicated key
    line: int  # where the repeated key stands
    first_line: int  # where it stood first


@dataclass
class Document:
    """Plain data plus where each piece came from."""

    file: str
    data: object
    lines: dict = field(default_factory=dict)  # Path_ -> 1-based line
    duplicates: list = field(default_factory=list)

    def line_of(self, path: Path_) -> int:
        """Line of `path`, or of its nearest ancestor that has one (a missing key points at its parent)."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:cut]))
            if line is not None:
                return line
        return 1


class YamlSyntaxError(Exception):
    def __init__(self, file: str, line: int, message: str):
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message = file, line, message


def load_text(text: str, file: str = "<string>") -> Document:
    """Parse one YAML document; raise YamlSyntaxError with a line on malformed input."""
    try:
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise YamlSyntaxError(file, line, f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:  # ReaderError: a character YAML forbids, located by its offset
        line = text.count("\n", 0, getattr(exc, "position", 0) or 0) + 1
        raise YamlSyntaxError(file, line, f"invalid YAML: {(str(exc).splitlines() or [''])[0]}") from None
    doc = Document(file=file, data=None)
    if root is not None:
        try:
            doc.data = _Builder(doc).build(root, ())
        except RecursionError:  # an alias inside its own anchor (&a [*a]) or absurd nesting
            raise YamlSyntaxError(
                file, root.start_mark.line + 1, "invalid YAML: nested too deeply or a recursive alias"
            ) from None
        doc.lines.setdefault((), root.start_mark.line + 1)
    return doc


def load_file(path: str | Path) -> Document:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise YamlSyntaxError(str(path), 1, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return load_text(text, file=str(path))


class _Builder:
    """Turns composed nodes into dicts/lists/scalars, recording lines; scalars use YAML 1.1 core types."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.scalars = yaml.SafeLoader("")  # only its scalar constructors are used

    def build(self, node, path: Path_):
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            out = []
            for i, item in enumerate(node.value):
                self.doc.lines[path + (i,)] = item.start_mark.line + 1
                out.append(self.build(item, path + (i,)))
            return out
        return self._construct(node)

    def _construct(self, node):
        """A scalar (or complex key) as its YAML type; one no constructor can read is a syntax error."""
        try:
            return self.scalars.construct_object(node, deep=True)
        except Exception as exc:  # unknown tag (!foo, a bare '='), or a typed scalar that is not (!!int abc)
            problem = (str(getattr(exc, "problem", None) or exc).splitlines() or [type(exc).__name__])[0]
            raise YamlSyntaxError(
                self.doc.file,
                node.start_mark.line + 1,
                f"invalid YAML: cannot read {node.tag} value ({problem})",
            ) from None

    def _mapping(self, node, path: Path_) -> dict:
        try:
            self.scalars.flatten_mapping(node)  # resolves YAML merge keys (<<)
        except yaml.MarkedYAMLError as exc:  # '<<' onto something that is not a mapping
            mark = exc.problem_mark or node.start_mark
            raise YamlSyntaxError(self.doc.file, mark.line + 1, f"invalid YAML: {exc.problem}") from None
        out: dict = {}
        for key_node, value_node in node.value:
            key = self._construct(key_node)
            if isinstance(key, (list, dict)):
                key = str(key)
            line = key_node.start_mark.line + 1
            if key in out:
                self.doc.duplicates.append(Duplicate(path + (key,), line, self.doc.lines[path + (key,)]))
            self.doc.lines[path + (key,)] = line
            out[key] = self.build(value_node, path + (key,))
        return out
