"""State listeners, run off the I/O loop.

Plain callables run one at a time, in order of the changes, on a one-thread executor
owned by the client (never on the event loop), so a listener may call the client,
blocking or not, without deadlocking it. Coroutine functions (``async def``) run as
tasks on the client's loop, where awaiting the client is safe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from typing import Any, Callable

from .types import State

log = logging.getLogger("concord")

Listener = Callable[[State], Any]


class Listeners:
    def __init__(self) -> None:
        self._fns: list[Listener] = []
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: Set by shutdown(): no new executor is made after it.
        self._closed = False

    def add(self, fn: Listener) -> None:
        with self._lock:
            if fn not in self._fns:
                self._fns.append(fn)

    def remove(self, fn: Listener) -> None:
        with self._lock:
            if fn in self._fns:
                self._fns.remove(fn)

    def dispatch(self, state: State) -> None:
        """Hands ``state`` to every listener; called on the loop, never waits."""
        with self._lock:
            if self._closed:
                return
            fns = list(self._fns)
            if fns and self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="concord-listener"
                )
            executor = self._executor
        for fn in fns:
            if inspect.iscoroutinefunction(fn):
                asyncio.get_running_loop().create_task(_run_async(fn, state))
            elif executor is not None:
                try:
                    executor.submit(_run, fn, state)
                except RuntimeError:  # shut down meanwhile
                    return

    def shutdown(self) -> None:
        """Stops the executor after the callbacks already queued; does not wait for them
        (a listener may be the caller)."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)


def _run(fn: Listener, state: State) -> None:
    try:
        fn(state)
    except Exception:
        log.exception("a Concord state listener raised")


async def _run_async(fn: Listener, state: State) -> None:
    try:
        await fn(state)
    except Exception:
        log.exception("a Concord state listener raised")
