"""docs/config-reference.md from what defines validity: the exported JSON Schemas (schemas/export.py), the
settings registry and the lint rules, never a hand-written list of keys. `--check` for CI.

Examples are the first value each key has in the repository's own files (configs, runners, changelog,
known issues); a key none of them sets gets one made from its type and bounds.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from schemas import export, rules
from schemas import settings as reg
from schemas.yamlio import YamlSyntaxError, load_file

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "config-reference.md"
# schema file -> the repository files whose values serve as its examples
EXAMPLES = {
    "master-config.schema.json": "configs/*-master.yaml",
    "runners.schema.json": "configs/runners.yaml",
    "launch.schema.json": "configs/launch.yaml",
    "models.schema.json": "configs/models.yaml",
    "perf-changelog.schema.json": "perf-changelog.yaml",
    "known-issues.schema.json": "configs/known-issues.yaml",
    "engine-builds.schema.json": "configs/engine-builds.yaml",
}
MAX_EXAMPLE = 70  # characters: a longer value is shown by its first item, or not at all


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    required: str
    allowed: str
    example: str
    description: str


@dataclass(frozen=True)
class Section:
    anchor: str
    name: str
    paths: tuple  # where the object sits in the file
    description: str
    rows: tuple


# ---------------------------------------------------------------- the JSON Schema, walked


def _split(prop: dict) -> tuple[dict, bool]:
    """(the non-null branch, whether null is allowed) of `X | None` fields."""
    branches = prop.get("anyOf")
    if branches is None:
        return prop, False
    rest = [b for b in branches if b.get("type") != "null"]
    return (rest[0] if len(rest) == 1 else {"anyOf": rest}), len(rest) < len(branches)


def _ref(schema: dict) -> str | None:
    return schema["$ref"].rsplit("/", 1)[-1] if "$ref" in schema else None


def _type(schema: dict, anchors: dict) -> str:
    ref = _ref(schema)
    if ref:
        return f"[{ref}](#{anchors[ref]})"
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), anchors)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of string to {_type(schema['additionalProperties'], anchors)}"
    if schema.get("format") == "date":
        return "date (YYYY-MM-DD)"
    return kind or "any"


def _bounds(schema: dict) -> list[str]:
    out = []
    low = ("> ", schema["exclusiveMinimum"]) if "exclusiveMinimum" in schema else None
    low = low or ((">= ", schema["minimum"]) if "minimum" in schema else None)
    if low and "maximum" in schema:
        out.append(f"{'(' if low[0] == '> ' else '['}{low[1]}, {schema['maximum']}]")
    elif low:
        out.append(f"{low[0]}{low[1]}")
    if "enum" in schema:
        out.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if schema.get("minLength") == 1:
        out.append("non-empty")
    if "pattern" in schema:
        out.append(f"matches `{schema['pattern']}`")
    if "minItems" in schema:
        out.append(f"at least {schema['minItems']} item{'s' * (schema['minItems'] != 1)}")
    return out


def _allowed(schema: dict) -> str:
    out = _bounds(schema)
    items = schema.get("items")
    if isinstance(items, dict) and not _ref(items) and _bounds(items):
        out.append("each " + ", ".join(_bounds(items)))
    return "; ".join(out) or "–"


def _required(name: str, prop: dict, required: set, nullable: bool) -> str:
    if name in required:
        return "required" + (" (may be null)" if nullable else "")
    if prop.get("default") is not None:
        return f"default `{_flow(prop['default'])}`"
    return "optional" if "default" in prop or nullable else "optional (default empty)"


# ---------------------------------------------------------------- examples


def _flow(value) -> str:
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
        .removesuffix("\n...\n")
        .strip()
    )


def _example(value) -> str:
    text = _flow(value)
    if len(text) <= MAX_EXAMPLE:
        return f"`{text}`"
    if isinstance(value, str):  # cut, and unquoted: a quote left open reads as part of the value
        return f"`{value[: MAX_EXAMPLE - 1]}…`"
    if isinstance(value, list) and value and len(_flow(value[:1])) <= MAX_EXAMPLE - 4:
        return f"`{_flow(value[:1])[:-1]}, …]`"
    if isinstance(value, list) and value and isinstance(value[0], str):
        return f"`[{value[0][: MAX_EXAMPLE - 4]}…]`"
    return "(see its fields)"


def _made_up(schema: dict) -> object:
    """A value of this type within its bounds, for keys no repository file sets."""
    if "enum" in schema:
        return schema["enum"][-1]
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
    if kind == "boolean":
        return True
    if kind == "array" and isinstance(schema.get("items"), dict):
        item = _made_up(schema["items"])
        return None if item is None else [item] * max(1, schema.get("minItems", 1))
    return None


def _walk(defs: dict, schema: dict, data, owner: str, out: dict) -> None:
    """Record the first value of every (object, key) in `data`, following `schema`."""
    schema, _ = _split(schema)
    ref = _ref(schema)
    if ref:
        owner, schema = ref, defs[ref]
    if isinstance(data, dict) and "properties" in schema:
        for key, value in data.items():
            if key in schema["properties"]:
                out.setdefault((owner, key), value)
                _walk(defs, schema["properties"][key], value, owner, out)
    elif isinstance(data, dict) and isinstance(schema.get("additionalProperties"), dict):
        for value in data.values():
            _walk(defs, schema["additionalProperties"], value, owner, out)
    elif isinstance(data, list) and isinstance(schema.get("items"), dict):
        for item in data:
            _walk(defs, schema["items"], item, owner, out)


def examples(name: str, schema: dict, owner: str) -> dict:
    out: dict = {}
    for path in sorted(ROOT.glob(EXAMPLES.get(name, "-"))):
        try:
            data = load_file(path).data
        except YamlSyntaxError:
            continue  # make lint reports it
        _walk(schema.get("$defs", {}), schema, data, owner, out)
    return out


# ---------------------------------------------------------------- sections


def _objects(schema: dict, owner: str) -> list[tuple[str, dict, tuple[str, ...]]]:
    """(name, object schema, paths) of every object in the file, in the order a reader meets them."""
    defs = schema.get("$defs", {})
    todo: list[tuple[str, dict, str]] = [(owner, schema, "")]
    top = schema.get("additionalProperties"), schema.get("items")
    if isinstance(top[0], dict) and (ref := _ref(top[0])) is not None:
        todo = [(ref, defs[ref], "<config-key>")]
    elif isinstance(top[1], dict) and (ref := _ref(top[1])) is not None:
        todo = [(ref, defs[ref], "[]")]
    out: list[tuple[str, dict, list[str]]] = []
    seen: dict[str, list[str]] = {}
    while todo:
        name, obj, path = todo.pop(0)
        if name in seen:
            seen[name].append(path)
            continue
        seen[name] = [path]
        out.append((name, obj, seen[name]))
        for key, prop in obj.get("properties", {}).items():
            ref, suffix = _contained(_split(prop)[0])
            if ref:
                todo.append((ref, defs[ref], f"{path}.{key}{suffix}".lstrip(".")))
    return [(name, obj, tuple(paths)) for name, obj, paths in out]


def _contained(schema: dict) -> tuple[str | None, str]:
    """The object a key holds, directly, as list items or as map values, and how its path goes on."""
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        items = schema["items"]  # an object, or one among a union's branches (a flag word or a range)
        return _ref(items) or next((r for b in items.get("anyOf", ()) if (r := _ref(b))), None), "[]"
    if isinstance(schema.get("additionalProperties"), dict):
        ref, suffix = _contained(schema["additionalProperties"])  # a map of maps: engine -> vendor -> ...
        return ref, ".<key>" + suffix
    return _ref(schema), ""


def sections(name: str, schema: dict, owner: str) -> list[Section]:
    found = examples(name, schema, owner)
    objects = _objects(schema, owner)
    stem = name.removesuffix(".schema.json")
    anchors = {obj_name: f"{stem}-{obj_name.lower()}" for obj_name, _, _ in objects}
    out = []
    for obj_name, obj, paths in objects:
        rows = []
        required = set(obj.get("required", ()))
        for key, prop in obj.get("properties", {}).items():
            inner, nullable = _split(prop)
            if (obj_name, key) in found:
                example = _example(found[(obj_name, key)])
            elif _contained(inner)[0]:
                example = "(see its fields)"
            else:
                made = _made_up(inner)
                example = f"`{_flow(made)}` (made up)" if made is not None else "–"
            rows.append(
                Row(
                    key=key,
                    type=_type(inner, anchors),
                    required=_required(key, prop, required, nullable),
                    allowed=_allowed(inner),
                    example=example,
                    description=(prop.get("description") or inner.get("description") or "").strip(),
                )
            )
        out.append(Section(anchors[obj_name], obj_name, paths, obj.get("description", ""), tuple(rows)))
    return out


# ---------------------------------------------------------------- markdown


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") or "–"


def _table(header: tuple, rows) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _where(path: str) -> str:
    return {"": "the top level", "[]": "each item of the top-level list"}.get(path, f"`{path}`")


def _file_part(name: str, model, title: str) -> list[str]:
    # the schema schemas/export.py writes, in the models' field order (the export sorts keys)
    schema = model.model_json_schema(by_alias=True, mode="validation")
    where = EXAMPLES.get(name, "")
    lines = [f"## {title}", "", f"Schema: [schemas/json/{name}](../schemas/json/{name})"]
    lines[-1] += f"; files: `{where}`." if where else "."
    for s in sections(name, schema, model.__name__):
        at = ", ".join(_where(p) for p in s.paths)
        lines += ["", f'<a id="{s.anchor}"></a>', f"### {s.name}", "", f"At {at}. {s.description}".strip()]
        if not s.rows:
            continue
        header = ("key", "type", "required / default", "allowed", "example", "description")
        lines += [""] + _table(
            header, [(f"`{r.key}`", r.type, r.required, r.allowed, r.example, r.description) for r in s.rows]
        )
    return lines


def _range(s: reg.Setting) -> str:
    if s.choices:
        return "one of " + ", ".join(f"`{c}`" for c in s.choices)
    if s.low is None and s.high is None:
        return {"ident": "a name: letters, digits, `._-`", "path": "an absolute path"}.get(s.kind, "–")
    if s.high is None:
        return f"{'>' if s.low_open else '≥'} {s.low}"
    if s.low is None:
        return f"≤ {s.high}"
    return f"{'(' if s.low_open else '['}{s.low}, {s.high}]"


def _settings_part() -> list[str]:
    rows = []
    for name, s in sorted(reg.REGISTRY.items()):
        default = "–" if s.default is None else f"`{_flow(s.default)}`"
        meaning = s.help + (f" Derived from {s.derived_from}; never set it." if s.kind == "derived" else "")
        meaning += " Prefill and decode must agree." if s.shared else ""
        flag = (
            ", ".join(f"`{f}`" for f in (s.flag, *s.renders) if f) or "–"
        )  # the flags it declares it renders
        engines = ", ".join(s.engines) if s.kind != "derived" else "–"
        rows.append((f"`{name}`", s.kind, default, engines, ", ".join(s.roles), _range(s), flag, meaning))
    return [
        "## Settings (`additional-settings`)",
        "",
        "Each item of a worker's `additional-settings` is `KEY=VALUE`, parsed against this registry",
        "([schemas/settings.py](../schemas/settings.py)) under the strict profile. An engine flag setting",
        "gives `--flag` when a true switch, `--flag=value` otherwise. A setting's engine flags are its",
        "alone: a model's flags (`configs/models.yaml`) and a runner's `engine-args` may not set them.",
        "",
        *_table(
            ("setting", "kind", "default", "engines", "roles", "range / choices", "engine flag", "meaning"),
            rows,
        ),
    ]


def _rule_text(rule) -> str:
    doc = inspect.getdoc(rule)
    if doc:
        return " ".join(doc.split("\n\n")[0].split())
    return rule.__name__.strip("_").replace("_", " ")  # no docstring: its name says it


def _profiles_of(rule) -> str:
    return ", ".join(p for p in rules.PROFILES if rule in rules.PROFILES[p])


def _rules_part() -> list[str]:
    groups = (
        (rules.INFERENCEX, "rules_inferencex.py"),
        (rules.NEWER, "rules_inferencex.py"),
        (rules.OLDER_ONLY, "rules_inferencex.py"),
        (rules.EXTENSIONS, "rules_inferencex.py"),
        (rules.STRICT, "rules_strict.py"),
        (rules.LOCAL, "rules_local.py"),
    )
    rows = [
        (f"`{r.__name__}`", _profiles_of(r), f"[{file}](../schemas/{file})", _rule_text(r))
        for group, file in groups
        for r in group
    ]
    return [
        "## Lint rules",
        "",
        "`make lint` checks each file against its schema, then runs these rules over every config entry",
        "([schemas/rules.py](../schemas/rules.py) names the profiles). `inferencex` is InferenceX's own",
        "newest validator: its rules, and the refusal of this repository's two extension keys, so its",
        "verdict on an entry is InferenceX's; `inferencex-legacy` is its older validator. `strict`, the",
        "default, is",
        "every rule both share and this repository's own; it accepts the two extension keys",
        "(docs/guides/validation.md).",
        "",
        *_table(("rule", "profiles", "defined in", "checks"), rows),
    ]


def render() -> str:
    lines = [
        "<!-- Generated by `make docs` from schemas/ (models, settings registry, rules); do not edit. -->",
        "# Config reference",
        "",
        "Every key of the files a recipe is made of, with its type, whether it is required, what is",
        "allowed and an example taken from this repository's own files.",
        "",
        *[f"- [{title}](#{_slug(title)})" for _, (_, title) in export.SCHEMAS.items()],
        "- [Settings (`additional-settings`)](#settings-additional-settings)",
        "- [Lint rules](#lint-rules)",
    ]
    for name, (model, title) in export.SCHEMAS.items():
        lines += [""] + _file_part(name, model, title)
    lines += [""] + _settings_part() + [""] + _rules_part()
    return "\n".join(lines) + "\n"


def _slug(title: str) -> str:
    """GitHub's heading anchor."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"stale {OUT.relative_to(ROOT)} (run `make docs`)", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
