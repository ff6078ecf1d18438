"""Shared fixtures: what the pages are made of, read once per session."""

from __future__ import annotations

import pytest

from recipes.pages import site as pages


@pytest.fixture(scope="session")
def src():
    return pages.sources()


@pytest.fixture(scope="session")
def rendered_pages(src):
    """File name -> text of every page, with no recorded result (results are tested on their own)."""
    return pages.render_all(src, results_root=pages.PAGES / "no-such-folder")
