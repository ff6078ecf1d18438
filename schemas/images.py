"""Container image references: parsing, the public allow-list, and what counts as pinned."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
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


# ---------------------------------------------------------------- the GPU vendor an image is built for


@dataclass(frozen=True)
class VendorRule:
    """Images of `repository` (registry/org/name, an fnmatch glob) whose tag fully matches `tag` (a regex; a
    digest-only reference has the empty tag) are built for `vendor`'s GPUs."""

    repository: str
    tag: str
    vendor: str  # a launch profile's gpu-vendor: amd, nvidia, or none (a CPU build)
    family: str  # how a hint names the family


# The one place an image's GPU vendor is read from its name, first match wins. Each line is how its publisher
# names its builds; an image no line matches has no vendor lint can tell, and is never refused by a guess.
IMAGE_VENDORS = (
    VendorRule("docker.io/vllm/vllm-openai-rocm", ".*", "amd", "vllm/vllm-openai-rocm"),
    VendorRule("docker.io/vllm/vllm-openai-cpu", ".*", "none", "vllm/vllm-openai-cpu"),
    VendorRule("docker.io/vllm/vllm-openai", ".*", "nvidia", "vllm/vllm-openai"),
    VendorRule("docker.io/lmsysorg/sglang-rocm", ".*", "amd", "lmsysorg/sglang-rocm"),
    VendorRule("docker.io/lmsysorg/sglang", ".*-rocm.*", "amd", "lmsysorg/sglang:*-rocm*"),
    # SGLang's CUDA builds: the bare release tag, or the release and its CUDA version (v0.5.23-cu129); the
    # tags of forks and other platforms (-minicpm-sala, -npu, -xeon) match nothing here.
    VendorRule(
        "docker.io/lmsysorg/sglang",
        r"v[0-9]+(?:\.[0-9]+)+(?:\.post[0-9]+)?(?:-cu[0-9]+)?",
        "nvidia",
        "lmsysorg/sglang:v<release>",
    ),
    VendorRule("docker.io/rocm/*", ".*", "amd", "rocm/*"),
    VendorRule("nvcr.io/nvidia/*", ".*", "nvidia", "nvcr.io/nvidia/*"),
)
# Repositories that publish one release under the same tag for each vendor: the counterpart of an image of
# one is the other's at that tag (vLLM's release pipeline pushes vllm/vllm-openai and vllm/vllm-openai-rocm).
SAME_TAG_REPOSITORIES = {
    ("docker.io/vllm/vllm-openai", "amd"): "vllm/vllm-openai-rocm",
    ("docker.io/vllm/vllm-openai-rocm", "nvidia"): "vllm/vllm-openai",
}
VENDOR_WORDS = {"amd": "AMD GPUs (ROCm)", "nvidia": "NVIDIA GPUs (CUDA)", "none": "CPUs"}


def image_vendor(ref: str) -> str | None:
    """The GPU vendor `ref` is built for (amd, nvidia, none: a CPU build), by IMAGE_VENDORS; None when its
    name does not say."""
    parsed = parse_image(ref)
    if parsed is None:
        return None
    repository = f"{parsed.registry}/{parsed.repo}"
    for rule in IMAGE_VENDORS:
        if fnmatch.fnmatchcase(repository, rule.repository) and re.fullmatch(rule.tag, parsed.tag or ""):
            return rule.vendor
    return None


def vendor_families(vendor: str) -> str:
    """The image families of `vendor`, as a hint lists them."""
    return ", ".join(rule.family for rule in IMAGE_VENDORS if rule.vendor == vendor)


def vendor_counterpart(ref: str, vendor: str, siblings: Iterable[str] = ()) -> str | None:
    """The image of `vendor` that stands for `ref`: one of `siblings` (the images of `ref`'s engine build;
    globs are skipped) built for `vendor`, else the same tag of the repository that publishes it for
    `vendor` (SAME_TAG_REPOSITORIES); None when neither says."""
    for sibling in siblings:
        if not any(c in sibling for c in "*?[") and image_vendor(sibling) == vendor:
            return sibling
    parsed = parse_image(ref)
    other = SAME_TAG_REPOSITORIES.get((f"{parsed.registry}/{parsed.repo}", vendor)) if parsed else None
    if other is None or parsed is None or parsed.tag is None:
        return None
    return f"{other}:{parsed.tag}"
