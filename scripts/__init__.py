"""What runs on the nodes: stdlib Python and bash only, each tool run as a file (`python3 sync.py ...`).

Host-side code imports the two shared modules as `scripts.failures` (the failure vocabulary) and
`scripts.promtext` (Prometheus text); the tools themselves import their siblings by plain name.
"""

# The oldest python3 the node tools run on (`make check` holds scripts/*.py to it with vermin; a runner's
# node-setup python below it is refused by lint).
PYTHON_FLOOR = "3.8"
