"""`python -m recipes.pages`: the recipe pages (see site.py)."""

import sys

from .site import main

sys.exit(main(sys.argv[1:]))
