"""Load YAML into plain data while remembering the line of every key and reporting duplicate keys; bounded,
so that no file, however hostile, makes lint hang, run out of memory or crash, and tag-checked, so that
nothing but plain data is ever read."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# libyaml when present: the real InferenceX changelog (400 kB) must lint in well under a second.
_Loader: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Bounds, each far above every real file: the InferenceX changelog (772 entries) is ~400 kB and ~8,700
# values three levels deep; its amd-master.yaml nests nine levels. Without them a 410-byte alias bomb ran
# 93 s into MemoryError, 100,000 nested '[' crashed the interpreter (SIGSEGV) and a 50 MB file took 2.3 GB.
MAX_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 64  # nested lists/mappings
MAX_NODES = 200_000  # values written in the file
MAX_ALIAS_NODES = 100_000  # values that aliases (*name) and merge keys (<<) repeat

_CORE = "tag:yaml.org,2002:"
# Tags a file may write: the core schema's. A plain date (2026-03-11) resolves to timestamp on its own
# (known-issues.yaml dates), so writing !!timestamp adds nothing and is allowed too. Refused: !!binary
# (bytes no field takes, a way to smuggle control characters), !!set/!!omap/!!pairs (no field is one:
# they would silently read as a mapping or list), !!python/... and every custom !tag.
SCALAR_TAGS = frozenset(_CORE + t for t in ("str", "int", "float", "bool", "null", "timestamp"))
SEQ_TAG, MAP_TAG, MERGE_TAG, STR_TAG = _CORE + "seq", _CORE + "map", _CORE + "merge", _CORE + "str"
ALLOWED_TAGS = "!!str, !!int, !!float, !!bool, !!null, !!timestamp, !!seq, !!map"

# A key path: str for mapping keys (any YAML scalar a key can be), int for sequence indices.
Path_ = tuple[Hashable, ...]


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
    lines: dict[Path_, int] = field(default_factory=dict)  # 1-based
    duplicates: list[Duplicate] = field(default_factory=list)

    def line_of(self, path: Path_) -> int:
        """Line of `path`, or of its nearest ancestor that has one (a missing key points at its parent; a
        value reached through an alias points at the alias)."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:cut]))
            if line is not None:
                return line
        return 1


class YamlSyntaxError(Exception):
    """A file that cannot be read as plain data: where, what, and (hint) what would be right."""

    def __init__(self, file: str, line: int, message: str, path: Path_ = (), hint: str = ""):
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message, self.path, self.hint = file, line, message, path, hint


def load_text(text: str, file: str = "<string>") -> Document:
    """Parse one YAML document; raise YamlSyntaxError with a line on malformed, oversized or tagged input."""
    if len(text) > MAX_BYTES:
        raise _too_large(file, len(text))
    doc = Document(file=file, data=None)
    loader = _Loader(text)
    try:
        _Builder(doc, loader).run()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise YamlSyntaxError(file, line, f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:  # ReaderError: a character YAML forbids, located by its offset
        line = text.count("\n", 0, getattr(exc, "position", 0) or 0) + 1
        raise YamlSyntaxError(file, line, f"invalid YAML: {(str(exc).splitlines() or [''])[0]}") from None
    finally:
        loader.dispose()
    return doc


def load_file(path: str | Path) -> Document:
    with open(path, "rb") as handle:
        raw = handle.read(MAX_BYTES + 1)  # never more: the size is refused before anything is parsed
    if len(raw) > MAX_BYTES:
        raise _too_large(str(path), Path(path).stat().st_size)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlSyntaxError(str(path), 1, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return load_text(text, file=str(path))


def _too_large(file: str, size: int) -> YamlSyntaxError:
    return YamlSyntaxError(
        file,
        1,
        f"file of {size:,} bytes is larger than the {MAX_BYTES // 2**20} MiB lint reads",
        hint="split it; the largest real file, InferenceX's changelog, is ~400 kB",
    )


_MERGE = object()  # the key of a merge (<<) whose value is not yet read
_NO_KEY = object()  # a mapping waiting for its next key
_COMPLEX_KEY = object()  # path part under a list or mapping used as a key (its lines are never asked for)


@dataclass
class _Open:
    """A list or mapping being read."""

    path: Path_
    value: list[object] | dict[Hashable, object]
    line: int
    anchor: str | None
    size: int = 1  # values in it, aliases expanded
    key: object = _NO_KEY
    key_line: int = 0
    merges: list[tuple[int, dict[Hashable, object]]] = field(default_factory=list)  # each << source, in order


class _Builder:
    """Reads the parser's events into dicts/lists/scalars (YAML 1.1 core types), recording lines, with no
    recursion (depth is bounded by MAX_DEPTH, not by the C stack) and aliases counted as they expand."""

    def __init__(self, doc: Document, loader: yaml.SafeLoader | yaml.CSafeLoader):
        self.doc, self.loader = doc, loader
        self.scalars = yaml.SafeLoader("")  # only its scalar constructors are used
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[object, int]] = {}  # name -> (value, size)
        self.anchor_lines: dict[str, int] = {}
        self.nodes = self.aliased = self.documents = 0

    def run(self) -> None:
        handlers: dict[object, Callable[[Any], None]] = {
            yaml.ScalarEvent: self._scalar,
            yaml.AliasEvent: self._alias,
            yaml.SequenceStartEvent: self._open,
            yaml.MappingStartEvent: self._open,
            yaml.SequenceEndEvent: self._close,
            yaml.MappingEndEvent: self._close,
            yaml.DocumentStartEvent: self._document,
        }
        while self.loader.check_event():
            event = self.loader.get_event()
            handler = handlers.get(type(event))
            if handler is not None:
                handler(event)

    # ------------------------------------------------------------ events

    def _document(self, event: yaml.DocumentStartEvent) -> None:
        self.documents += 1
        if self.documents > 1:
            raise self._error(event, "invalid YAML: expected a single document, found another")

    def _scalar(self, event: yaml.ScalarEvent) -> None:
        tag = event.tag
        if tag is None or tag == "!":
            # the stubs leave Resolver.resolve untyped; it returns the tag
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
        elif tag not in SCALAR_TAGS:
            raise self._tag_error(event, tag)
        self._count(event)
        value: object
        if tag == MERGE_TAG and self._at_key():
            value = _MERGE
        else:
            value = event.value if tag == STR_TAG else self._construct(tag, event)
        self._remember(event, value, 1)
        self._add(value, 1, _line(event))

    def _alias(self, event: yaml.AliasEvent) -> None:
        name = event.anchor
        if name in self.anchors:
            value, size = self.anchors[name]
            self.aliased += size
            if self.aliased > MAX_ALIAS_NODES:
                raise self._error(
                    event,
                    f"aliases expand to more than {MAX_ALIAS_NODES:,} values (an alias bomb?)",
                    "write the values out, or use fewer aliases of large anchors",
                )
            self._add(value, size, _line(event))
        elif any(o.anchor == name for o in self.stack):
            raise self._error(event, f"invalid YAML: recursive alias *{name} inside its own anchor")
        else:
            raise self._error(event, f"invalid YAML: found undefined alias *{name}")

    def _open(self, event: yaml.CollectionStartEvent) -> None:
        is_map = isinstance(event, yaml.MappingStartEvent)
        if event.tag not in (None, "!", MAP_TAG if is_map else SEQ_TAG):
            raise self._tag_error(event, event.tag)
        if len(self.stack) >= MAX_DEPTH:
            raise self._error(
                event, f"nested deeper than {MAX_DEPTH} levels", "real configs nest fewer than 10"
            )
        self._count(event)
        path = self._child_path()
        self.stack.append(_Open(path, {} if is_map else [], _line(event), event.anchor))

    def _close(self, event: yaml.CollectionEndEvent) -> None:
        top = self.stack.pop()
        value = self._merged(top) if top.merges else top.value
        self._remember_open(top, value)
        self._add(value, top.size, top.line)

    # ------------------------------------------------------------ building

    def _add(self, value: object, size: int, line: int) -> None:
        """Place a finished value in the open list or mapping (or as the document's root)."""
        if not self.stack:
            self.doc.data = None if value is _MERGE else value
            self.doc.lines.setdefault((), line)
            return
        top = self.stack[-1]
        top.size += size
        if isinstance(top.value, list):
            self.doc.lines[top.path + (len(top.value),)] = line
            top.value.append(value)
        elif top.key is _NO_KEY:
            top.key, top.key_line = _hashable(value), line
        else:
            self._set(top, value)
            top.key = _NO_KEY

    def _set(self, top: _Open, value: object) -> None:
        key, line = top.key, top.key_line
        if key is _MERGE:
            top.merges += [(line, source) for source in self._merge_sources(value, line)]
            return
        path = top.path + (key,)
        mapping = top.value
        assert isinstance(mapping, dict)  # a key is only ever open on a mapping
        if key in mapping:
            self.doc.duplicates.append(Duplicate(path, line, self.doc.lines[path]))
        self.doc.lines[path] = line
        mapping[key] = value

    def _merge_sources(self, value: object, line: int) -> list[dict[Hashable, object]]:
        sources = value if isinstance(value, list) else [value]
        mappings = [s for s in sources if isinstance(s, dict)]
        if len(mappings) != len(sources):
            raise YamlSyntaxError(
                self.doc.file,
                line,
                "invalid YAML: while merging, expected a mapping or a list of mappings after '<<'",
                self._child_path()[:-1],
            )
        return mappings

    def _merged(self, top: _Open) -> dict[Hashable, object]:
        """YAML merge keys: the first source to give a key wins; keys written in the mapping win over all
        (so overriding a merged key is not a duplicate)."""
        out: dict[Hashable, object] = {}
        assert isinstance(top.value, dict)  # merges are only ever read into a mapping
        for line, source in top.merges:
            for key, value in source.items():
                if key not in out and key not in top.value:
                    out[key] = value
                    self.doc.lines[top.path + (key,)] = line
        out.update(top.value)
        return out

    def _construct(self, tag: str, event: yaml.ScalarEvent) -> object:
        """A scalar as its YAML type; one no constructor can read is a syntax error."""
        # the C parser's marks are its own Mark type, which the stubs keep apart from yaml.Mark
        marks = (event.start_mark, event.end_mark)
        node = yaml.ScalarNode(tag, event.value, *marks, event.style)  # type: ignore[arg-type]
        try:
            return self.scalars.construct_object(node)
        except Exception as exc:  # a bare '=', or a typed scalar that is not (!!int abc)
            problem = (str(getattr(exc, "problem", None) or exc).splitlines() or [type(exc).__name__])[0]
            raise self._error(event, f"invalid YAML: cannot read {_short(tag)} value ({problem})") from None

    # ------------------------------------------------------------ bookkeeping

    def _at_key(self) -> bool:
        return bool(self.stack) and isinstance(self.stack[-1].value, dict) and self.stack[-1].key is _NO_KEY

    def _child_path(self) -> Path_:
        """Path of the value the next event starts."""
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.value, list):
            return top.path + (len(top.value),)
        return top.path + ((_COMPLEX_KEY if top.key is _NO_KEY else top.key),)

    def _count(self, event: yaml.NodeEvent) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self._error(event, f"more than {MAX_NODES:,} values in one file", "split the file")

    def _remember(self, event: yaml.NodeEvent, value: object, size: int) -> None:
        if event.anchor is not None and value is not _MERGE:  # an anchored '<<' is no value to alias
            self._anchor(event.anchor, value, size, _line(event))

    def _remember_open(self, top: _Open, value: object) -> None:
        if top.anchor is not None:
            self._anchor(top.anchor, value, top.size, top.line)

    def _anchor(self, name: str, value: object, size: int, line: int) -> None:
        if name in self.anchors:
            raise YamlSyntaxError(
                self.doc.file,
                line,
                f"invalid YAML: duplicate anchor &{name}",
                hint=f"first defined on line {self.anchor_lines[name]}",
            )
        self.anchors[name], self.anchor_lines[name] = (value, size), line

    def _tag_error(self, event: yaml.Event, tag: str) -> YamlSyntaxError:
        return self._error(
            event,
            f"YAML tag {_short(tag)!r} is not allowed: configs are plain data",
            f"remove the tag; allowed: {ALLOWED_TAGS}",
        )

    def _error(self, event: yaml.Event, message: str, hint: str = "") -> YamlSyntaxError:
        path = tuple(p for p in self._child_path() if p is not _COMPLEX_KEY and p is not _MERGE)
        return YamlSyntaxError(self.doc.file, _line(event), message, path, hint)


def _line(event: yaml.Event) -> int:
    mark = event.start_mark  # the parser marks every event
    return mark.line + 1 if mark is not None else 1


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


def _hashable(key: object) -> Hashable:
    """A mapping key as data: a list or mapping used as a key (YAML allows it) becomes its text."""
    return str(key) if isinstance(key, (list, dict)) else key
