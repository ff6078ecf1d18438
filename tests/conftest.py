"""Fixtures shared across test folders: the local SLURM cluster, up once per session (by `make
cluster-up`), down at the end unless it was already up before the tests started."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator

import pytest

from sim.cluster.layout import client_env, default_layout
from tests.cluster.harness import Cluster, make
from tests.ports import free_port as _free_port


def _slurm_obtainable() -> bool:
    installed = shutil.which("slurmctld", path=client_env(default_layout())["PATH"]) is not None
    return installed or os.geteuid() == 0  # cluster-up apt-get installs it when root


@pytest.fixture
def free_port() -> Callable[..., int]:
    """tests.ports.free_port, as a fixture."""
    return _free_port


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if not _slurm_obtainable():
        pytest.skip("slurm-wlm is not installed and we are not root to apt-get install it")
    was_up = make("cluster-status").returncode == 0
    up = make("cluster-up", timeout=600)  # a fresh machine installs slurm-wlm first (~10 s)
    if up.returncode != 0 and not was_up:
        make("cluster-down")  # whatever it did start
    assert up.returncode == 0, f"make cluster-up failed:\n{up.stdout}\n{up.stderr}"
    yield Cluster(default_layout())
    if not was_up:
        down = make("cluster-down")
        assert down.returncode == 0, f"make cluster-down failed:\n{down.stdout}\n{down.stderr}"


# Folders whose every test needs the local cluster (and mostly the tool virtualenvs too).
_CLUSTER_FOLDERS = {"integration", "cluster", "bench"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what `make test-unit` leaves out: tests on the local cluster (its folders, or the fixture)."""
    tests = os.path.dirname(__file__)
    for item in items:
        folder = os.path.relpath(str(item.path), tests).split(os.sep)[0]
        if folder in _CLUSTER_FOLDERS or "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
