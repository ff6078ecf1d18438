"""docs/ is what `make docs` writes from the configs, Plans and schemas as they are now."""

from __future__ import annotations

from recipes.pages import numbers, reference
from recipes.pages import site as pages
from scripts import failures


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


def test_reference_pages_are_current():
    stale = numbers.stale()
    assert not stale, f"docs/reference/ is stale ({', '.join(stale)}): run `make docs` and commit the result"


def test_every_exit_code_and_port_has_a_meaning():
    codes = {n for n in dir(failures) if n.startswith("EXIT_")}
    assert codes == set(numbers.EXIT_MEANINGS), "describe each exit code in recipes/pages/numbers.py"
    assert all(meaning for *_, meaning in numbers._ports()), "describe each port in schemas/launch.py"
    assert len({getattr(failures, n) for n in codes}) == len(codes), "two exit codes share a number"
