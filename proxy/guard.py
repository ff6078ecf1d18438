"""Ends a request's work when its client disconnects or one of its deadlines passes."""

from __future__ import annotations

import asyncio

from proxy.asgi import Receive
from proxy.errors import ClientGone, Expired, ProxyError


class Guard:
    """Cancels the task serving a request, recording why in `reason`.

    Cancelling the task is what closes the upstream connection wherever the task waits (prefill,
    decode headers, a stream read), so the engine aborts the request. One watcher task per request
    listens for the disconnect; deadlines are one timer per request that re-arms itself lazily, so a
    streamed chunk costs a single clock read instead of a timer or task per chunk.

    The watcher is never cancelled: once the response is complete the server's `receive()` answers
    http.disconnect and it ends by itself. Cancelling it left a reference cycle per request (its
    CancelledError's traceback holds the frame that holds this guard, which holds the task), about 30
    objects only the cyclic GC could free: gen-0 collections of ~18k such objects paused the proxy
    for 20-40 ms under load (measured with gc.callbacks), the tail of its TTFT.
    """

    def __init__(self, receive: Receive) -> None:
        self.reason: ProxyError | None = None
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._watcher = self._loop.create_task(self._watch(receive))
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._limit = 0.0
        self._last = 0.0
        self._what = ""

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self._closed:  # else: the response is complete, or about to be, and this is its echo
            self._cancel(ClientGone("client disconnected"))

    def expect_within(self, seconds: float, what: str) -> None:
        """From now on, cancel when `seconds` pass without `touch()`."""
        self._limit, self._what = seconds, what
        self._last = self._loop.time()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(self._last + seconds, self._check)

    def touch(self) -> None:
        self._last = self._loop.time()

    def _check(self) -> None:
        due = self._last + self._limit
        if self._loop.time() >= due:
            self._timer = None
            self._cancel(Expired(f"no {self._what} within {self._limit:g} s"))
        else:
            self._timer = self._loop.call_at(due, self._check)

    def _cancel(self, reason: ProxyError) -> None:
        if self.reason is None and self._task is not None:
            self.reason = reason
            self._task.cancel()

    def settle(self) -> None:
        """After the cancellation this guard caused was caught: the task goes on as not cancelled."""
        uncancel = getattr(self._task, "uncancel", None)  # Python >= 3.11 counts cancellations
        if uncancel is not None:
            uncancel()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
