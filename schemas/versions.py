"""What a component version must look like to be a real, reproducible release or commit."""

from __future__ import annotations

import re

# ASCII digits only: re's Unicode digit class would take '0.1.١٧' for a release.
_RELEASE = re.compile(
    r"v?[0-9]+(\.[0-9]+){1,3}((a|b|rc|\.?post|\.?dev)[0-9]+)*(\+[A-Za-z0-9]+([.][A-Za-z0-9]+)*)?", re.ASCII
)
_COMMIT = re.compile(r"(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}", re.ASCII)


def is_real_version(value: str) -> bool:
    """A PEP 440-style release (0.1.17, 0.5.5.dev104+rocm7.2) or a git commit (7-40 hex)."""
    return bool(_RELEASE.fullmatch(value) or _COMMIT.fullmatch(value))


VERSION_HINT = "a release such as 0.1.17 or a git commit hash"
