"""What a component version must look like to be a real, reproducible release or commit."""

from __future__ import annotations

import re

_RELEASE = re.compile(r"^v?\d+(\.\d+){1,3}((a|b|rc|\.?post|\.?dev)\d+)*(\+[A-Za-z0-9]+([.][A-Za-z0-9]+)*)?$")
_COMMIT = re.compile(r"^(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}$")


def is_real_version(value: str) -> bool:
    """A PEP 440-style release (0.1.17, 0.5.5.dev104+rocm7.2) or a git commit (7-40 hex)."""
    return bool(_RELEASE.fullmatch(value) or _COMMIT.fullmatch(value))


VERSION_HINT = "a release such as 0.1.17 or a git commit hash"
