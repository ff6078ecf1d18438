"""Every engine's builder implements recipes/engine.py's Engine, signature for signature: the plan asks
nothing else of an engine, and a module missing a function (or taking other arguments) fails here, not in
the middle of a render."""

from __future__ import annotations

import inspect

import pytest

from recipes.build import ENGINES
from recipes.engine import Engine

MEMBERS = [name for name, _ in inspect.getmembers(Engine, inspect.isfunction) if not name.startswith("_")]


def test_the_interface_is_what_the_plan_asks():
    assert sorted(MEMBERS) == [
        "caveats",
        "check",
        "engine_env",
        "flushes_caches",
        "has_metrics",
        "l1_budget",
        "proof_roles",
        "router_metrics_port",
        "router_service",
        "served_model",
        "services",
        "shell_env",
        "shell_notes",
        "transport",
        "uses_rdma",
        "watch_signatures",
    ]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_implements_it(engine):
    module = ENGINES[engine]
    for name in MEMBERS:
        want = [p for p in inspect.signature(getattr(Engine, name)).parameters if p != "self"]
        assert list(inspect.signature(getattr(module, name)).parameters) == want, (engine, name)
