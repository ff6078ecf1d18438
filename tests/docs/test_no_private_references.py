"""The repository speaks for itself: no tracked file points at the maintainers' private notes (a facts file
or a folder beside the checkout that users do not have). Upstream facts live in docs/upstream-facts.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
# A citation of the private facts file in any of the forms it took, or a path into the private folder.
PRIVATE = re.compile(rb"FACTS(?: ?\xc2\xa7| section|\.md| \d)|\.\./shared\b|/work/shared\b")
BINARY_PROBE = 8192  # a NUL byte in the first bytes marks a binary file, as git itself decides


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to check")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, timeout=30
    ).stdout
    return [name for name in out.decode().split("\0") if name and name != SELF]


def test_upstream_facts_page_exists():
    assert (ROOT / "docs" / "upstream-facts.md").is_file()


def test_no_tracked_file_cites_private_references():
    found = []
    for name in tracked_files():
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, or a symlink to nothing
            continue
        data = path.read_bytes()
        if b"\0" in data[:BINARY_PROBE]:
            continue
        for m in PRIVATE.finditer(data):
            line = data.count(b"\n", 0, m.start()) + 1
            found.append(f"{name}:{line}: {m[0].decode(errors='replace')}")
    assert not found, (
        "private references (state the fact, or link docs/upstream-facts.md#<anchor>):\n" + "\n".join(found)
    )
