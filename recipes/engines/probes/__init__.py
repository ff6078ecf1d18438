"""Scripts that run inside the engines' virtualenvs, as files (standard library and the engine only); the
host imports probe_argdump from here to describe the simulator's parsers the same way."""
