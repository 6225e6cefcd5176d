"""State listeners, run off the I/O loop.

Plain callables run one at a time, in order of the changes, on a one-thread executor
owned by the client (never on the event loop), so a listener may call the client,
blocking or not, without deadlocking it. Each has a mailbox of ``STATE_BACKLOG``
states: one that falls further behind skips to the newest state (the states queued
before it are dropped), as the Rust SDK's state listeners do, so it never hears a
stale state last. Coroutine functions (``async def``) run as tasks on the client's
loop, where awaiting the client is safe. A removed listener gets none of the states
still queued for it; with ``true_removes`` (the client's state listeners, as kazoo's),
one that returns True is removed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from typing import Any, Callable

from ._callbacks import Mailbox, Serial
from .types import State

log = logging.getLogger("concord")

Listener = Callable[[State], Any]

#: States a plain listener may fall behind by before it skips to the newest.
STATE_BACKLOG = 16


class Listeners:
    def __init__(self, *, true_removes: bool = False) -> None:
        #: Each plain listener's mailbox; None for a coroutine function.
        self._fns: dict[Listener, Mailbox | None] = {}
        #: kazoo's rule for state listeners: one that returns True is removed.
        self._true_removes = true_removes
        self._lock = threading.Lock()
        self._serial = Serial("concord-listener")
        #: The coroutine listeners' tasks still running (a close waits for them).
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, fn: Listener) -> None:
        with self._lock:
            if fn not in self._fns:
                if inspect.iscoroutinefunction(fn):
                    self._fns[fn] = None
                else:
                    self._fns[fn] = self._mailbox(fn)

    def _mailbox(self, fn: Listener) -> Mailbox:
        def run(state: State) -> None:
            self._run(fn, box, state)

        box = Mailbox(self._serial, run, bound=STATE_BACKLOG, lag=False)
        return box

    def remove(self, fn: Listener) -> None:
        """Removes ``fn``: the states not handed to it yet are dropped (a call that
        runs already runs on)."""
        with self._lock:
            self._fns.pop(fn, None)

    def _registered(self, fn: Listener, box: Mailbox | None) -> bool:
        with self._lock:
            return fn in self._fns and self._fns[fn] is box

    def _run(self, fn: Listener, box: Mailbox, state: State) -> None:
        """Calls a plain listener with ``state`` unless it was removed (or removed and
        added again: a new mailbox) meanwhile; True from it removes it, if that is
        the rule."""
        if not self._registered(fn, box):
            return
        try:
            remove = fn(state)
        except Exception:
            log.exception("a Concord state listener raised")
            return
        if remove is True and self._true_removes:
            self._remove_if(fn, box)

    def _remove_if(self, fn: Listener, box: Mailbox | None) -> None:
        with self._lock:
            if fn in self._fns and self._fns[fn] is box:
                del self._fns[fn]

    def dispatch(self, state: State) -> None:
        """Hands ``state`` to every listener; called on the loop, never waits."""
        with self._lock:
            fns = list(self._fns.items())
        for fn, box in fns:
            if box is None:
                task = asyncio.get_running_loop().create_task(self._run_async(fn, state))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                box.put(state)

    def pending(self) -> list[asyncio.Task[None]]:
        """The coroutine listeners' tasks not finished yet."""
        return [t for t in self._tasks if not t.done()]

    def shutdown(self) -> None:
        """Stops the thread after the callbacks already queued; does not wait for them
        (a listener may be the caller). No listener is called after it."""
        self._serial.shutdown()

    async def _run_async(self, fn: Listener, state: State) -> None:
        if not self._registered(fn, None):
            return
        try:
            remove = await fn(state)
        except Exception:
            log.exception("a Concord state listener raised")
            return
        if remove is True and self._true_removes:
            self._remove_if(fn, None)
