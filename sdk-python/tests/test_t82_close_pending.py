"""A client's close() leaves nothing pending on its loop (issue 46: asyncio's "Task
was destroyed but it is pending!" at close() in about one run in ten). A client with
a latch, a selector, a lock, a watch, caches, DataWatch, ChildrenWatch and a leader
observer is closed ten times over on each client, with the recipes closed first or
left to the client's close: after the aio client's close() no task running SDK code
is pending, and neither loop reports anything to its exception handler (a task
destroyed pending, a grpc callback on a closed loop) once closed and collected."""

from __future__ import annotations

import asyncio
import gc
import uuid
from typing import Any

import concord
import concord.aio

from conftest import Server

ROUNDS = 10


class Reports:
    """A loop exception handler that keeps what the loop reports."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.messages.append(f"{context.get('message')}: {context.get('task') or context.get('exception')!r}")


def _sdk_tasks(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    """Pending tasks that run SDK code (grpc's own tasks are not the SDK's)."""
    pending = []
    for t in asyncio.all_tasks(loop):
        code = getattr(t.get_coro(), "cr_code", None)
        if not t.done() and code is not None and "/concord/" in code.co_filename:
            pending.append(t)
    return pending


async def _use_aio(c: concord.aio.Client, i: int, root: str) -> None:
    name = f"cp-{uuid.uuid4().hex[:8]}"
    latch = c.LeaderLatch(name, id="l")
    await latch.start()

    async def take(lead: Any) -> None:
        await lead.cancelled()

    selector = c.LeaderSelector(name + "s", take, id="s")
    await selector.start()
    c.DataWatch(root, lambda data, stat: None)
    c.ChildrenWatch(root, lambda children: None)
    cache = c.Cache(root)
    await cache.start()
    node = c.NodeCache(root)
    await node.start()
    watch = c.watch(root, recursive=True)
    await watch.start()
    observer = c.observe(name)
    await observer.start()
    lock = c.Lock(name)
    assert await lock.acquire(True, 10)
    assert await latch.wait(10)
    await c.create(f"{root}/n", b"", ephemeral=True)
    if i % 2:
        assert await selector.close()
        await latch.close()


def test_an_aio_close_leaves_nothing_pending(server: Server) -> None:
    reports = Reports()
    left: list[str] = []
    for i in range(ROUNDS):
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(reports)

        async def main() -> None:
            async with concord.aio.Client(server.addr) as c:
                root = f"/cp-{uuid.uuid4().hex[:8]}"
                await c.create(root, b"")
                await asyncio.wait_for(_use_aio(c, i, root), 20)
                await c.delete(root, recursive=True)

        try:
            loop.run_until_complete(main())
            left += [repr(t) for t in _sdk_tasks(loop)]
            # What asyncio.run does last: grpc's own tasks, cancelled and run out.
            rest = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in rest:
                t.cancel()
            if rest:
                loop.run_until_complete(asyncio.wait(rest, timeout=5))
        finally:
            loop.close()
        gc.collect()
    gc.collect()
    assert left == []
    assert reports.messages == []


def test_a_sync_close_leaves_nothing_pending(server: Server) -> None:
    reports = Reports()
    for i in range(ROUNDS):
        c = concord.Client(server.addr)
        c._io.loop.set_exception_handler(reports)
        try:
            c.start()
            root = f"/cp-{uuid.uuid4().hex[:8]}"
            c.create(root, b"")
            name = f"cp-{uuid.uuid4().hex[:8]}"
            latch = c.LeaderLatch(name, id="l")
            latch.start()
            selector = c.LeaderSelector(name + "s", lambda lead: lead.wait(10), id="s")
            selector.start()
            c.DataWatch(root, lambda data, stat: None)
            c.ChildrenWatch(root, lambda children: None)
            cache = c.Cache(root)
            cache.start()
            lock = c.Lock(name)
            assert lock.acquire(True, 10)
            assert latch.wait(10)
            c.create(f"{root}/n", b"", ephemeral=True)
            if i % 2:
                assert selector.close()
                latch.close()
            c.delete(root, recursive=True)
        finally:
            c.close()
        gc.collect()
    gc.collect()
    assert reports.messages == []
