"""docs/config-reference.md is derived from the schemas, the settings registry and the rules: every key,
setting and rule is in it, whatever is added later."""

from __future__ import annotations

import re

import pytest

from recipes.pages.reference import render, sections
from schemas import export, rules
from schemas import settings as reg
from schemas.config import MasterConfig, MasterEntry


@pytest.fixture(scope="module")
def text():
    return render()


def section(text: str, anchor: str) -> str:
    start = text.index(f'<a id="{anchor}"></a>')
    end = text.find("<a id=", start + 1)
    return text[start : end if end > 0 else len(text)]


def test_every_master_entry_field_is_listed_with_its_kebab_key(text):
    entry = section(text, "master-config-masterentry")
    for name, field in MasterEntry.model_fields.items():
        key = field.alias or name
        assert f"| `{key}` |" in entry, key


def test_every_key_of_every_schema_file_is_listed(text):
    for name, (model, _) in export.SCHEMAS.items():
        schema = model.model_json_schema(by_alias=True, mode="validation")
        objects = {**schema.get("$defs", {}), model.__name__: schema}
        for obj_name, obj in objects.items():
            for key in obj.get("properties", {}):
                anchor = f"{name.removesuffix('.schema.json')}-{obj_name.lower()}"
                assert f"| `{key}` |" in section(text, anchor), (name, obj_name, key)


def test_every_setting_is_listed_with_kind_default_and_flag(text):
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `([A-Z][A-Z0-9_]*)` \|.*$", text, re.M)}
    assert set(reg.REGISTRY) <= set(rows)
    for name, s in reg.REGISTRY.items():
        cells = [c.strip() for c in rows[name].strip("|").split("|")]
        flags = ", ".join(f"`{f}`" for f in (s.flag, *s.renders) if f) or "–"  # every flag it renders
        assert cells[1] == s.kind and cells[6] == flags, name
        assert (cells[2] == "–") == (s.default is None), name
        assert cells[3] == (", ".join(s.engines) if s.kind != "derived" else "–"), name  # lint enforces it


def test_every_lint_rule_is_listed_under_its_profile(text):
    lint_part = text[text.index("## Lint rules") :]
    for rule in rules.RULES.values():
        profiles = ", ".join(p for p in rules.PROFILES if rule in rules.PROFILES[p])
        assert re.search(rf"^\| `{rule.__name__}` \| {profiles} \|", lint_part, re.M), rule.__name__


def test_examples_come_from_the_repository_files():
    schema = MasterConfig.model_json_schema(by_alias=True, mode="validation")
    rows = {r.key: r for s in sections("master-config.schema.json", schema, "MasterConfig") for r in s.rows}
    assert rows["image"].example.startswith("`") and "made up" not in rows["image"].example
    assert rows["scenarios"].example == "(see its fields)"


def test_rendering_is_deterministic(text):
    assert render() == text
