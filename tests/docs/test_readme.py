"""README.md stays a newcomer's page (small, with the three checklists), and every relative link of the README
and docs/ resolves to a file, and to a heading or anchor of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_BYTES = 15_000
CHECKLISTS = ("### Add a model", "### Add a runner", "### Add a config")
LINKED = [
    README,
    ROOT / "proxy" / "README.md",
    ROOT / "sim" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"(`+).*?\1", re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)
_ANCHOR = re.compile(r"<a (?:id|name)=\"([^\"]+)\"")


def test_readme_is_small():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, (
        f"README.md is {size} bytes (at most {MAX_README_BYTES}): move detail to a guide"
    )


def test_readme_has_the_three_checklists():
    headings = README.read_text().splitlines()
    assert all(h in headings for h in CHECKLISTS), CHECKLISTS


def test_readme_lines_are_readable():
    long = [n for n, line in enumerate(README.read_text().splitlines(), 1) if len(line) > 200]
    assert not long, f"README.md lines over 200 characters: {long}"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    return "".join(c for c in text.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    out, seen = set(_ANCHOR.findall(text)), {}
    for heading in _HEADING.findall(text):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    text = _CODE.sub("", _FENCE.sub("", path.read_text()))
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_slug_is_githubs():
    assert slug("Held against a launch known to work: `make parity`") == (
        "held-against-a-launch-known-to-work-make-parity"
    )
    assert slug("InferenceX's master files as they are") == "inferencexs-master-files-as-they-are"
