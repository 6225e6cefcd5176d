"""Running one async test body against either client's recipes: ``Async(obj)`` makes
every method of a recipe awaitable (a sync recipe's on a worker thread, an aio
recipe's coroutine as it is, its plain methods as if they were coroutines)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import concord
import concord.aio

from conftest import SyncAdapter


class Async:
    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.obj, name)
        if not callable(attr):
            return attr
        if inspect.iscoroutinefunction(attr):
            return attr

        if isinstance(self.obj, _AIO_TYPES):

            async def plain(*args: Any, **kw: Any) -> Any:
                return attr(*args, **kw)

            return plain

        async def threaded(*args: Any, **kw: Any) -> Any:
            return await asyncio.to_thread(attr, *args, **kw)

        return threaded


_AIO_TYPES = (
    concord.aio.Lock,
    concord.aio.Semaphore,
    concord.aio.Election,
    concord.aio.LeaderLatch,
    concord.aio.LeaderSelector,
)


def make(c: Any, recipe: str, *args: Any, **kw: Any) -> Async:
    """``c.<recipe>(*args, **kw)`` of the client under test, made awaitable."""
    client = c.sync if isinstance(c, SyncAdapter) else c
    return Async(getattr(client, recipe)(*args, **kw))


def raw(c: Any) -> Any:
    """The client under test itself (concord.Client or concord.aio.Client)."""
    return c.sync if isinstance(c, SyncAdapter) else c
