"""Print one extra's requirements from pyproject.toml, so `make tools` installs pins kept only there.

`python -m sim.cluster.extras lmcache --only torch` prints `torch==2.13.0`: the Makefile installs it
first, alone, so pip takes the CPU wheel and lmcache (which asks for any torch) keeps it.
"""

from __future__ import annotations

import argparse
import sys

from schemas.pins import requirements


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.cluster.extras", description=__doc__)
    parser.add_argument("extra")
    parser.add_argument("--only", help="just this distribution's requirement (nothing if the extra has none)")
    args = parser.parse_args()
    try:
        print("\n".join(requirements(args.extra, args.only)))
    except KeyError:
        print(f"pyproject.toml has no extra {args.extra!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
