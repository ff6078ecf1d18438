"""Failure log lines at a bounded rate: one per kind per interval, with a count of the ones held back."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable

INTERVAL = 10.0  # seconds between two lines about the same kind of failure


class Throttle:
    """Whether a line about `key` may be written now.

    A client sending garbage, or an engine failing every request, would otherwise write a line per
    request: 2,000 bad requests were 2,000 lines (and 336 tracebacks) before. Every failure is still
    counted in /metrics; the log keeps the first of each kind and then one per interval, saying how
    many it held back, so a flood is visible without being copied.
    """

    def __init__(self, interval: float = INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._state: dict[Hashable, tuple[float, int]] = {}  # key → (time of its last line, held back)

    def allow(self, key: Hashable) -> str | None:
        """None to stay silent; else what to add to the line: how many were held back since the last."""
        now = self._clock()
        last, held = self._state.get(key, (-math.inf, 0))
        if now - last < self._interval:
            self._state[key] = (last, held + 1)
            return None
        self._state[key] = (now, 0)
        return f" ({held} more like it since the last line)" if held else ""
