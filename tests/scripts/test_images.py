"""`sync.py image-ready` against a `docker` whose image store is a folder: a node that holds the image the
lock names passes; one that lacks it loads the runner's archive, or with a preloaded image fails at once,
named; another build under the same tag fails; a load that cannot give the locked image fails. Nothing
pulls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SYNC = Path(__file__).resolve().parents[2] / "scripts" / "sync.py"
REF = "vllm/vllm-openai-rocm:v0.33.0"
ID = "sha256:" + "a" * 64
# `docker image inspect` answers from $STORE/image (the id held, if any); `docker load` copies the archive's
# content (an id) there; every call is logged, so a pull would show.
FAKE_DOCKER = """#!/usr/bin/env bash
echo "$*" >> "$STORE/calls"
case "$1 $2" in
  "image inspect")
    [[ -s $STORE/image ]] && cat "$STORE/image" && exit 0
    echo "Error: No such image: $5" >&2
    exit 1 ;;
  "load --input") cat "$3" > "$STORE/image"; echo "Loaded image: vllm/vllm-openai-rocm:v0.33.0"; exit 0 ;;
esac
echo "unexpected: $*" >&2
exit 9
"""


@pytest.fixture
def node(tmp_path: Path) -> dict:
    store = tmp_path / "store"
    store.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    archive = tmp_path / "shared" / "vllm_vllm-openai-rocm_v0.33.0.tar"
    archive.parent.mkdir()
    archive.write_text(ID + "\n")
    lock = tmp_path / "lock.json"
    lock.write_text(
        json.dumps({"image_staging": {"mode": "archive", "id": ID, "archive_file": str(archive)}})
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STORE": str(store)}
    return {"store": store, "lock": lock, "archive": archive, "env": env}


def ready(node: dict, how: str = "--archive") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SYNC), "image-ready", "--image", REF, "--lock", str(node["lock"]), how],
        env=node["env"], capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def calls(node: dict) -> str:
    return (node["store"] / "calls").read_text()


def test_a_node_holding_the_locked_image_passes_and_loads_nothing(node):
    (node["store"] / "image").write_text(ID + "\n")
    done = ready(node)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"image {REF}: {ID} on this node\n"
    assert "load" not in calls(node) and "pull" not in calls(node)


def test_a_node_without_it_loads_the_archive(node):
    done = ready(node)
    assert done.returncode == 0, done.stderr
    assert f"image {REF}: {ID}, loaded from {node['archive']}" in done.stdout
    assert f"load --input {node['archive']}" in calls(node) and "pull" not in calls(node)


def test_a_preloaded_image_missing_on_a_node_fails_at_once_naming_it(node):
    done = ready(node, "--preloaded")
    assert done.returncode == 1
    assert done.stderr.startswith(f"image not ready: this node has no {REF}; the runner's image-staging is "
                                  "preloaded")  # fmt: skip
    assert "load" not in calls(node) and "pull" not in calls(node)


def test_another_build_under_the_tag_is_refused_when_preloaded(node):
    (node["store"] / "image").write_text("sha256:" + "b" * 64 + "\n")
    done = ready(node, "--preloaded")
    assert done.returncode == 1
    assert f"holds {REF} as sha256:bbbb" in done.stderr and f"lock.json names {ID}" in done.stderr


def test_an_archive_that_no_longer_holds_the_locked_image_fails(node):
    node["archive"].write_text("sha256:" + "c" * 64 + "\n")  # replaced since make submit saved it
    done = ready(node)
    assert done.returncode == 1
    assert "the archive changed since make submit saved it" in done.stderr


def test_an_archive_missing_on_the_node_says_the_shared_file_system(node):
    node["archive"].unlink()
    done = ready(node)
    assert done.returncode == 1
    assert "is not a file on this node (is the shared file system mounted here?)" in done.stderr
