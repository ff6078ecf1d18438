"""docs/ is what `make docs` writes from the configs, Plans and schemas as they are now."""

from __future__ import annotations

from recipes.pages import reference
from recipes.pages import site as pages


def test_recipe_pages_are_current(src):
    stale = pages.stale(pages.render_all(src))
    assert not stale, f"docs/recipes/ is stale ({', '.join(stale)}): run `make docs` and commit the result"


def test_config_reference_is_current():
    text = reference.OUT.read_text() if reference.OUT.is_file() else ""
    assert text == reference.render(), (
        "docs/config-reference.md is stale: run `make docs` and commit the result"
    )


def test_every_valid_config_key_has_a_page(src):
    names = {p.name for p in pages.PAGES.glob("*.md")}
    assert names == {f"{key}.md" for key in src.entries} | {"README.md"}, "run `make docs`"
    index = (pages.PAGES / "README.md").read_text()
    assert all(f"]({key}.md)" in index for key in src.entries), "the index lacks a page: run `make docs`"
