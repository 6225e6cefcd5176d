"""User callbacks of watches and caches (DataWatch and ChildrenWatch functions,
cache listeners), run off the I/O loop: one thread per client ("concord-watch"),
one at a time, in the order their changes happened, as kazoo's handler thread does.
A callback may call the client, blocking or not. ``async def`` callbacks are run on
the client's loop from that thread, one after the other, so their order holds too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from typing import Any, Callable

log = logging.getLogger("concord")


class Serial:
    """A one-thread executor made on first use; ``shutdown()`` is final."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any] | None:
        """Queues ``fn(*args)``; None once shut down."""
        with self._lock:
            if self._closed:
                return None
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=self._name
                )
            executor = self._executor
        try:
            return executor.submit(fn, *args)
        except RuntimeError:  # shut down meanwhile
            return None

    def shutdown(self) -> None:
        """Stops after the callbacks queued; does not wait (a callback may be the caller)."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)


def call_user(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> Any:
    """Runs a user callback on the callback thread: a coroutine function on ``loop``
    (waiting for it), a plain one here. Exceptions are logged and give None."""
    try:
        if inspect.iscoroutinefunction(fn):
            return asyncio.run_coroutine_threadsafe(fn(*args), loop).result()
        return fn(*args)
    except Exception:
        log.exception("a Concord watch callback raised")
        return None
