"""`make docs`: the documentation generated from the same configs, schemas and Plans that launch jobs —
a page per recipe (site.py, views.py, templates/), the recorded verified results (verified.py) and the
config reference (reference.py)."""
