"""`make check-engines`: every rendered engine command line judged by the real engine its image carries.

Host side (this package, the project's .venv): plan.json files (rendered, or read from a folder) ->
engine lines with representative runtime values and a stub model folder (lines.py, stubs.py) -> one probe
process per engine, inside that engine's tool virtualenv (judge.py) -> one verdict per line (__main__.py).
Inside the engines' virtualenvs: probes/ (standard library and the engine only, run as files). Engine
builds and their parsers: configs/engine-builds.yaml; the virtualenvs' locks: locks/.
"""
