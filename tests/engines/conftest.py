"""Shared by the engine-check tests: the shipped plans (rendered once), engine builds and the real tools."""

from __future__ import annotations

import json
import os

import pytest

from recipes.engines.__main__ import engine_builds
from recipes.engines.judge import ROOT, tools_of
from recipes.render import load, render_config


@pytest.fixture(scope="session")
def builds() -> tuple:
    return engine_builds()


@pytest.fixture(scope="session")
def plans() -> dict:
    """plan.json of every variant of every shipped config, by (config key, variant)."""
    loaded = load(None)
    out = {}
    for key in sorted(loaded.entries):
        for r in render_config(key, loaded):
            out[(r.plan.config_key, r.plan.variant)] = json.loads(r.files["plan.json"])
    return out


def need_tools(builds) -> tuple:
    """The engine tools (`make tools`); missing, a test is skipped saying so (under CI=true it fails)."""
    tools = tuple(t for t in tools_of(builds) if t.installed)
    missing = [t.venv.name for t in tools if not t.python.is_file()]
    if missing:
        message = f"{', '.join(missing)} missing: run `make tools` (they hold the real engines' parsers)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return tools


__all__ = ["ROOT", "need_tools"]
