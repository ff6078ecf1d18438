"""make submit's image staging (recipes/staging.py stage_image) against a `docker` whose image store is a
folder: a runner's archive gets the image once (pulled on the submit host only if it lacks it), a later
submission reuses it, a half-written or replaced archive is refused, a host without docker says how to stage
by hand; a preloaded image is recorded by the id this host knows, if any. The id goes into lock.json, where
every node's host check holds its runtime to it (tests/scripts/test_images.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from recipes import staging
from recipes.render import render_config

SEED = "kimik2.5-fp4-mi355x-vllm-disagg-agentic"
REF = "vllm/vllm-openai-rocm:v0.33.0"
ID = "sha256:" + "d" * 64
FAKE_DOCKER = """#!/usr/bin/env bash
echo "$*" >> "$STORE/calls"
case "$1 $2" in
  "image inspect")
    [[ -s $STORE/image ]] || { echo "Error: No such image" >&2; exit 1; }
    printf '"%s" ["vllm/vllm-openai-rocm@sha256:%s"]\\n' "$(cat "$STORE/image")" "$(printf e%.0s {1..64})" ;;
  "pull vllm/vllm-openai-rocm:v0.33.0")
    echo "v0.33.0: Pulling from vllm/vllm-openai-rocm"
    echo "$IMAGE_ID" > "$STORE/image" ;;
  "save -o") cat "$STORE/image" > "$3" ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""


@pytest.fixture
def docker(tmp_path: Path, monkeypatch) -> Path:
    store = tmp_path / "store"
    store.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("STORE", str(store))
    monkeypatch.setenv("IMAGE_ID", ID)
    monkeypatch.delenv("DOCKER", raising=False)
    return store


@pytest.fixture
def plan(configs, tmp_path):
    seed = render_config(SEED, configs)[0].plan
    container = dataclasses.replace(seed.container, image_archive=str(tmp_path / "shared" / "images"))
    return dataclasses.replace(seed, container=container)


def test_the_archive_is_made_once_and_reused(plan, docker, tmp_path):
    said: list[str] = []
    first = staging.stage_image(plan, said.append)
    target = tmp_path / "shared" / "images" / "vllm_vllm-openai-rocm_v0.33.0.tar"
    digests = ["vllm/vllm-openai-rocm@sha256:" + "e" * 64]
    assert first == {"mode": "archive", "archive_file": str(target), "reference": REF, "id": ID,
                     "repo_digests": digests, "size": target.stat().st_size}  # fmt: skip
    assert target.read_text() == ID + "\n"
    assert json.loads(target.with_suffix(".json").read_text())["id"] == ID
    assert said[0] == f"image {REF}: pulling on this host (once; the nodes load it from {target.parent})"
    assert (docker / "calls").read_text().count("pull ") == 1
    assert staging.stage_image(plan, said.append) == first  # the next submission reuses it
    assert (docker / "calls").read_text().count("save ") == 1
    assert said[-1] == f"image {REF}: already staged in {target}"


def test_an_archive_that_does_not_match_its_record_is_refused(plan, docker, tmp_path):
    staging.stage_image(plan, lambda _: None)
    target = tmp_path / "shared" / "images" / "vllm_vllm-openai-rocm_v0.33.0.tar"
    target.write_text("half")  # another copy interrupted, or replaced by hand
    with pytest.raises(
        staging.StagingError, match="does not match its record .*: remove both and submit again"
    ):
        staging.stage_image(plan, lambda _: None)


def test_without_docker_here_the_message_says_how_to_stage_by_hand(plan, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER", "no-such-docker")
    with pytest.raises(staging.StagingError, match=r"docker save -o .*\.tar vllm/vllm-openai-rocm:v0\.33\.0"):
        staging.stage_image(plan, lambda _: None)


def test_a_preloaded_image_records_the_id_this_host_knows(plan, docker):
    preloaded = dataclasses.replace(plan, container=dataclasses.replace(plan.container, image_archive=None))
    said: list[str] = []
    assert staging.stage_image(preloaded, said.append) == {"mode": "preloaded", "reference": REF, "id": None}
    assert "lock.json names no id" in said[0]
    (docker / "image").write_text(ID + "\n")
    assert staging.stage_image(preloaded, said.append)["id"] == ID
    assert "pull" not in (docker / "calls").read_text()  # a preloaded image is never pulled here


def test_the_dry_run_says_where_the_image_comes_from(plan, tmp_path):
    lines = staging.dry_run_lines(plan)
    assert lines[0] == (
        f"# staged image {REF}: saved once into {tmp_path}/shared/images/vllm_vllm-openai-rocm_v0.33.0.tar "
        "(pulled on this host if it lacks it), loaded by a node that lacks it; its id in lock.json, checked "
        "on every node's host before any container starts; the containers run it with --pull never"
    )
