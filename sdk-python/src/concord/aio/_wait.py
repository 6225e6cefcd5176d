"""``within``: an await with a time limit, as ``asyncio.wait_for`` without its Python
3.11 flaw: there, a cancellation that arrives as the awaited thing completes is
swallowed (the result is returned and the caller's task goes on as if never
cancelled), so a ``close()`` or ``cancel()`` of a task waiting with a timeout could be
lost. ``asyncio.wait`` does not swallow it."""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], limit: float | None) -> T:
    """The result of ``aw``, or asyncio.TimeoutError after ``limit`` seconds (None: no
    limit). ``aw`` is cancelled when it is abandoned (the limit passed, or the caller
    was cancelled)."""
    if limit is None:
        return await aw
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(limit, 0.0))
    finally:
        if not task.done():
            task.cancel()
    if not done:
        raise asyncio.TimeoutError
    return task.result()
