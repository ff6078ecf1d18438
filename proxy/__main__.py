"""`python -m proxy ...`: parse the command line, log to stderr, serve with uvicorn."""

from __future__ import annotations

import gc
import logging
import os
import resource
import sys

from proxy.app import App
from proxy.config import Config, parse_config
from proxy.server import serve

log = logging.getLogger("proxy")


def main() -> None:
    config = parse_config(sys.argv[1:], os.environ)
    # Only the proxy's own events at the chosen level: httpx would log every upstream request at INFO.
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("proxy").setLevel(config.log_level.upper())
    raise_open_files(config)
    # What is alive now (modules, config) stays alive: keep it out of every collection, and collect
    # the young generation less often. Cyclic GC was 5% of the CPU under load (py-spy --native).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    app = App(config)
    serve(app, config, app.refused)


def raise_open_files(config: Config) -> None:
    """Every client connection and both legs of its request each hold a descriptor. The soft limit is
    often 1024: out of descriptors, a connect to an engine fails and the engine leaves rotation."""
    need = config.limits.clients + 2 * config.max_concurrency + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        soft = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft != resource.RLIM_INFINITY and soft < need:
        log.warning(
            "open files limited to %d (ulimit -n), below the %d that --max-clients and "
            "--max-concurrency may use: lower them or raise the limit",
            soft,
            need,
        )


if __name__ == "__main__":
    main()
