"""Container image references: parsing, the public allow-list, and what counts as pinned."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Publishers whose images are public and maintained; "registry/org". One place to extend.
ALLOWED_PUBLISHERS = (
    "docker.io/vllm",
    "docker.io/rocm",
    "docker.io/lmsysorg",
    "nvcr.io/nvidia",
)
# Tags that move: an image behind them today is not the image behind them tomorrow.
FLOATING_TAGS = frozenset({"latest", "nightly", "main", "master", "dev", "stable", "edge", "release", "rocm"})

_REGISTRY = r"[a-z0-9.-]+(?::[0-9]+)?|localhost(?::[0-9]+)?"
_REPO = r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
# The registry ends at '/' (Docker's spelling) or '#' (enroot's, as pyxis takes it: nvcr.io#nvidia/x:tag).
_REF = re.compile(
    rf"(?:(?P<registry>{_REGISTRY})(?P<sep>[/#]))?(?P<repo>{_REPO})(?::(?P<tag>{_TAG}))?"
    rf"(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
# The same shape without group names, for the schema (JSON Schema patterns are ECMAScript regexes).
REFERENCE = rf"(?:(?:{_REGISTRY})[/#])?{_REPO}(?::{_TAG})?(?:@{_DIGEST})?"
REFERENCE_WORDS = (
    "[registry/]org/name[:tag][@sha256:<digest>] in ASCII, as in vllm/vllm-openai-rocm:v0.33.0 (or pyxis's "
    "registry#org/name:tag)"
)


@dataclass(frozen=True)
class ImageRef:
    registry: str
    org: str  # first path component ("library" for official Docker Hub images)
    repo: str  # full path below the registry
    tag: str | None
    digest: str | None

    @property
    def publisher(self) -> str:
        return f"{self.registry}/{self.org}"


def parse_image(ref: str) -> ImageRef | None:
    """Split an image reference; None when it is not a valid reference at all."""
    match = _REF.fullmatch(ref)
    if not match:
        return None
    registry, repo = match["registry"], match["repo"]
    hostless = registry and not ("." in registry or ":" in registry or registry.startswith("localhost"))
    if hostless and match["sep"] == "/":
        repo, registry = f"{registry}/{repo}", None  # "vllm/x": the first part is an org, not a host
    registry = registry or "docker.io"
    if "/" not in repo:
        repo = f"library/{repo}"
    return ImageRef(registry, repo.split("/")[0], repo, match["tag"], match["digest"])


def spelled_for(ref: str, runtime: str) -> str:
    """The reference as a container runtime takes it: pyxis (enroot) ends a registry other than Docker
    Hub's with '#', docker with '/'. Otherwise the reference as written."""
    parsed = parse_image(ref)
    if parsed is None or parsed.registry == "docker.io" and "#" not in ref:
        return ref
    if runtime == "pyxis":
        return ref if "#" in ref else ref.replace("/", "#", 1)
    return ref.replace("#", "/", 1)


def image_problems(ref: str) -> list[tuple[str, str]]:
    """(problem, fix) pairs for an image that is not public and pinned; empty when it is."""
    parsed = parse_image(ref)
    example = "e.g. vllm/vllm-openai-rocm:v0.33.0"
    if parsed is None:
        return [(f"{ref!r} is not a valid image reference", f"registry/org/name:tag, {example}")]
    out = []
    if parsed.publisher not in ALLOWED_PUBLISHERS:
        allowed = ", ".join(p.removeprefix("docker.io/") + "/" for p in ALLOWED_PUBLISHERS)
        what = (
            "a personal or unlisted namespace" if parsed.registry == "docker.io" else "an unlisted registry"
        )
        out.append(
            (
                f"image publisher '{parsed.publisher.removeprefix('docker.io/')}' is {what}; "
                "recipes must use public, maintained images",
                f"use one of {allowed} ({example})",
            )
        )
    if parsed.digest is None:
        if parsed.tag is None:
            out.append(
                ("image has no tag (means :latest, which moves)", f"pin a release tag or digest, {example}")
            )
        elif parsed.tag.lower() in FLOATING_TAGS or not any(c.isdigit() for c in parsed.tag):
            out.append(
                (
                    f"image tag '{parsed.tag}' floats (it names no release, date or commit)",
                    f"pin a release tag or @sha256 digest, {example}",
                )
            )
    return out


def engine_version(ref: str) -> tuple[int, ...] | None:
    """Release version encoded in a tag like v0.17.1 or 0.17.1-rocm; None for nightlies and others."""
    parsed = parse_image(ref)
    if parsed is None or not parsed.tag:
        return None
    match = re.match(r"v?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?(?:$|[-+._])", parsed.tag)
    if not match:
        return None
    return tuple(int(g) for g in match.groups(default="0"))
