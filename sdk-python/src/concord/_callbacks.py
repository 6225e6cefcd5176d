"""User callbacks of watches and caches (DataWatch and ChildrenWatch functions,
cache listeners), run off the I/O loop: one thread per client ("concord-watch"),
one at a time, in the order their changes happened, as kazoo's handler thread does.
A callback may call the client, blocking or not. ``async def`` callbacks are run on
the client's loop from that thread, one after the other, so their order holds too.
"""

from __future__ import annotations

import asyncio
import collections
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


#: How many callbacks one listener or watch function may fall behind by (the Rust
#: SDK's ``LISTENER_BACKLOG``). Past it a listener loses its oldest events and is told
#: so once (``CacheEventType.LAGGED``); a DataWatch or ChildrenWatch function skips to
#: the newest state.
LISTENER_BACKLOG = 1024


class Mailbox:
    """The callbacks queued for one listener (or watch function), at most ``bound``.

    ``put`` never waits: past the bound it drops the oldest item (``lag=True``: the
    count of dropped items is handed to ``on_lag`` before the next item, once per gap)
    or every queued item but the newest (``lag=False``: for functions that report a
    state, whose newest call supersedes the others). At most one drain of a mailbox is
    queued on the serial thread at a time, and a drain runs one item and requeues
    itself, so a slow listener neither grows the thread's queue nor starves the others.
    """

    def __init__(
        self,
        serial: Serial,
        run: Callable[..., Any],
        *,
        bound: int | None = None,
        lag: bool = True,
        on_lag: Callable[[int], Any] | None = None,
    ) -> None:
        self._serial = serial
        self._run = run
        self._bound = max(1, bound if bound is not None else LISTENER_BACKLOG)
        self._lag = lag
        self._on_lag = on_lag
        self._lock = threading.Lock()
        self._items: collections.deque[tuple[Any, ...]] = collections.deque()
        self._scheduled = False
        #: Items dropped since the last lag notice (lag=True).
        self._missed = 0
        #: Items dropped in all (both modes): diagnostics.
        self.dropped = 0
        #: The most items ever queued at once (never above the bound).
        self.high_water = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def put(self, *args: Any) -> None:
        """Queues ``run(*args)``; any thread, never waits."""
        with self._lock:
            if len(self._items) >= self._bound:
                if self._lag:
                    self._items.popleft()
                    self._missed += 1
                    self.dropped += 1
                else:
                    self.dropped += len(self._items)
                    self._items.clear()
            self._items.append(args)
            self.high_water = max(self.high_water, len(self._items))
            if self._scheduled:
                return
            self._scheduled = True
        if self._serial.submit(self._drain_one) is None:
            with self._lock:
                self._scheduled = False

    def _drain_one(self) -> None:
        with self._lock:
            missed, self._missed = self._missed, 0
            item = self._items.popleft() if (self._items and not missed) else None
        if missed and self._on_lag is not None:
            self._on_lag(missed)
        elif item is not None:
            self._run(*item)
        with self._lock:
            if not self._items and not self._missed:
                self._scheduled = False
                return
        if self._serial.submit(self._drain_one) is None:
            with self._lock:
                self._scheduled = False
