"""LMCacheMPConnector, simulated: the real `lmcache server` must be alive; the L2 contents are modelled.

Start-up: like vLLM with the LMCache MP connector, refuse to start unless the server's ZMQ port answers
within lmcache.mp.mq_timeout. "Answers" means a ZMTP 3 peer greets us (signature 0xFF..0x7F), so a
random TCP listener does not count. Run time: every heartbeat_interval the server is probed again;
while it is down the connector runs without L2 (the real one degrades silently) and its contents are
gone. The L2 itself is a per-process chunk-hash LRU (sim.tokens.PrefixCache), because speaking the MP
protocol needs lmcache + torch + pyzmq in the engine's interpreter (see sim/README.md).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

from sim.kvconfig import LMCache
from sim.metrics import Metrics
from sim.tokens import PrefixCache, block_hashes

log = logging.getLogger("sim.lmcache")
ZMTP_SIGNATURE = b"\xff" + b"\x00" * 8 + b"\x7f"


def greets(host: str, port: int, *, timeout: float = 1.0) -> bool:
    """True when a ZMTP peer listens at host:port (it sends its 10-byte signature on connect)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(ZMTP_SIGNATURE)
            got = b""
            while len(got) < 10:
                chunk = sock.recv(10 - len(got))
                if not chunk:
                    return False
                got += chunk
            return got[0] == 0xFF and got[9] == 0x7F
    except OSError:
        return False


def wait_until_reachable(cfg: LMCache, *, clock=time.monotonic, sleep=time.sleep) -> None:
    """Blocks until the server greets, or raises ConnectionError after mq_timeout seconds."""
    deadline = clock() + cfg.mq_timeout
    while True:
        if greets(cfg.host, cfg.port, timeout=min(1.0, cfg.mq_timeout)):
            return
        if clock() >= deadline:
            raise ConnectionError(
                f"LMCache MP server tcp://{cfg.host}:{cfg.port} did not answer within "
                f"lmcache.mp.mq_timeout={cfg.mq_timeout:g} s; is `lmcache server` running?"
            )
        sleep(min(0.2, max(0.0, deadline - clock())))


class L2:
    """The simulated LMCache store for one prefill engine."""

    def __init__(self, cfg: LMCache, *, chunk: int, capacity_tokens: int, metrics: Metrics) -> None:
        self.cfg = cfg
        self.chunk = chunk
        self.cache = PrefixCache(block=chunk, capacity_tokens=capacity_tokens)
        self.metrics = metrics
        self.alive = True

    def lookup(self, tokens: list[str], *, local_hit: int, salt: str = "") -> int:
        """Prompt tokens L2 adds beyond the local prefix-cache hit (whole chunks, at most len-1); keyed by
        the request's cache_salt as LMCache keys by it."""
        if not self.alive:
            return 0
        self.metrics.inc("sim_l2_lookups")
        matched = self.cache.match(block_hashes(tokens, self.chunk, salt))
        matched = min(matched, (len(tokens) - 1) // self.chunk * self.chunk)
        extra = max(0, matched - local_hit)
        if extra:
            self.metrics.inc("sim_l2_hits")
            self.metrics.inc("sim_l2_hit_tokens", extra)
        return extra

    def store(self, tokens: list[str], *, salt: str = "") -> None:
        if self.alive:
            self.cache.insert(block_hashes(tokens, self.chunk, salt))

    async def heartbeat(self) -> None:
        """Probe the server forever; flip to no-L2 mode while it is unreachable."""
        while True:
            await asyncio.sleep(self.cfg.heartbeat_interval)
            alive = await asyncio.to_thread(greets, self.cfg.host, self.cfg.port)
            if alive != self.alive:
                log.warning(
                    "LMCache MP server tcp://%s:%d %s",
                    self.cfg.host,
                    self.cfg.port,
                    "is back (L2 empty)" if alive else "unreachable: running without L2",
                )
                if not alive:
                    self.cache.clear()
            self.alive = alive
            self.metrics.set("sim_l2_degraded", 0.0 if alive else 1.0)
