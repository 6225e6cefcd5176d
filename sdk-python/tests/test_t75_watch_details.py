"""Watch details kazoo users expect, on both clients: DataWatch functions of three
parameters get the event, ChildrenWatch's ``send_event``, the public NodeCache and
ChildrenCache; and the bound on the callbacks queued for a slow listener (one LAGGED
notice, the cache still converges), a slow watch function or state listener (skips
to the newest state), with the mailbox itself tested without a server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import concord
from concord import CacheEvent, CacheEventType, State
from concord._callbacks import LISTENER_BACKLOG, Mailbox, Serial
from concord._listeners import STATE_BACKLOG, Listeners
from concord.aio import cache as aio_cache

from conftest import Server, SyncAdapter, eventually, run_with


class Rec:
    """Records every call's arguments (as a tuple) and can block in a call until
    released."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def record(self, *args: Any) -> None:
        with self.lock:
            self.calls.append(args)
        self.entered.set()
        if not self.gate.wait(20):
            raise AssertionError("the gate was never opened")

    def snapshot(self) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.calls)

    async def has(self, n: int, timeout_s: float = 10.0) -> None:
        async def cond() -> bool:
            return len(self.snapshot()) >= n

        await eventually(f"{n} calls (got {self.snapshot()[-3:]})", cond, timeout_s)


def aio_of(c: Any) -> concord.aio.Client:
    return c.sync._aio if isinstance(c, SyncAdapter) else c


async def data_watch(c: Any, path: str, fn: Any) -> Any:
    if isinstance(c, SyncAdapter):
        return await asyncio.to_thread(lambda: c.sync.DataWatch(path)(fn))
    return c.DataWatch(path)(fn)


async def children_watch(c: Any, path: str, fn: Any, **kw: Any) -> Any:
    if isinstance(c, SyncAdapter):
        return await asyncio.to_thread(lambda: c.sync.ChildrenWatch(path, **kw)(fn))
    return c.ChildrenWatch(path, **kw)(fn)


async def started(c: Any, factory: str, path: str, listener: Any = None) -> Any:
    """A started cache of ``factory`` ("Cache", "NodeCache", "ChildrenCache"), with
    ``listener`` added before the start; waits for its initial snapshot."""
    if isinstance(c, SyncAdapter):
        cache = getattr(c.sync, factory)(path)
        if listener is not None:
            cache.add_listener(listener)
        await asyncio.to_thread(cache.start)
        assert await asyncio.to_thread(cache.wait_initialized, 10)
    else:
        cache = getattr(c, factory)(path)
        if listener is not None:
            cache.add_listener(listener)
        await cache.start()
        assert await cache.wait_initialized(10)
    return cache


async def close(c: Any, cache: Any) -> None:
    if isinstance(c, SyncAdapter):
        await asyncio.to_thread(cache.close)
    else:
        await cache.aclose()


# -- kazoo's call shapes ---------------------------------------------------------------


def test_data_watch_with_three_parameters_gets_the_event(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.ensure_path(root)
        path = f"{root}/cfg"
        rec = Rec()

        def three(data: bytes | None, stat: concord.Stat | None, event: CacheEvent | None) -> None:
            rec.record(data, stat, event)

        two = Rec()

        def plain(data: bytes | None, stat: concord.Stat | None) -> None:
            two.record(data, stat)

        await data_watch(c, path, three)
        await data_watch(c, path, plain)
        await rec.has(1)
        await c.create(path, b"1")
        await c.set(path, b"2")
        await c.delete(path)
        await rec.has(4)
        await two.has(4)
        calls = rec.snapshot()
        assert calls[0] == (None, None, None)
        assert [(d, e.type, e.path) for d, _, e in calls[1:]] == [
            (b"1", CacheEventType.CREATED, path),
            (b"2", CacheEventType.CHANGED, path),
            (None, CacheEventType.DELETED, path),
        ]
        assert calls[2][2].type == "CHANGED" and calls[2][2].old.data == b"1"  # kazoo's strings
        assert all(len(a) == 2 for a in two.snapshot())

    run_with(kind, server.addr, body)


def test_children_watch_send_event(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root)
        rec = Rec()
        w = await children_watch(c, root, rec.record, send_event=True)
        await rec.has(1)
        await c.create(f"{root}/a")
        await rec.has(2)
        await c.set(f"{root}/a", b"x")  # data: no call
        await c.create(f"{root}/b")
        await rec.has(3)
        await c.delete(f"{root}/a")
        await rec.has(4)
        calls = rec.snapshot()
        assert calls[0] == ([], None)
        assert [(n, e.type, e.path) for n, e in calls[1:]] == [
            (["a"], CacheEventType.CREATED, f"{root}/a"),
            (["a", "b"], CacheEventType.CREATED, f"{root}/b"),
            (["b"], CacheEventType.DELETED, f"{root}/a"),
        ]
        w.close()

    run_with(kind, server.addr, body)


def test_node_cache_and_children_cache(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root, b"r")
        await c.create(f"{root}/a", b"1")
        seen: list[CacheEvent] = []
        node = await started(c, "NodeCache", root, seen.append)
        kids = await started(c, "ChildrenCache", root)
        current = node.current()
        assert current is not None and current.data == b"r" and node.get(root) == current
        assert [n.path for n in kids.current()] == [f"{root}/a"] and kids.names() == ["a"]
        await c.set(root, b"s")
        await c.create(f"{root}/b", b"2")
        await c.create(f"{root}/a/deep")  # a grandchild: not in the ChildrenCache

        async def converged() -> bool:
            n = node.current()
            return n is not None and n.data == b"s" and kids.names() == ["a", "b"]

        await eventually("both caches current", converged)
        kid = kids.get(f"{root}/b")
        assert kid is not None and kid.data == b"2" and len(kids) == 2
        await c.delete(f"{root}/a/deep")
        await c.delete(f"{root}/a")
        await c.delete(f"{root}/b")
        await c.delete(root)

        async def gone() -> bool:
            return node.current() is None and kids.names() == [] and len(seen) >= 4

        await eventually("the node gone from both", gone)
        assert [e.type for e in seen] == [
            CacheEventType.CREATED,
            CacheEventType.INITIALIZED,
            CacheEventType.CHANGED,
            CacheEventType.DELETED,
        ]
        await close(c, node)
        await close(c, kids)

    run_with(kind, server.addr, body)


def test_node_and_children_cache_context_managers(server: Server, root: str) -> None:
    with concord.Client(server.addr) as c:
        c.create(root, b"x")
        with c.NodeCache(root) as node, c.ChildrenCache(root) as kids:
            assert node.wait_initialized(10) and kids.wait_initialized(10)
            assert node.current() is not None and kids.current() == []

    async def main() -> None:
        async with concord.aio.Client(server.addr) as c:
            async with c.NodeCache(root) as node, c.ChildrenCache(root) as kids:
                assert await node.wait_initialized(10) and await kids.wait_initialized(10)
                n = node.current()
                assert n is not None and n.data == b"x" and kids.names() == []

    asyncio.run(main())


# -- slow listeners and functions ------------------------------------------------------

#: Changes made while a listener blocks: more than twice its backlog.
BURST = 3 * 800


async def burst(c: Any, path: str) -> None:
    """BURST changes of ``path``'s data, in transactions of 800 (one event each)."""
    for t_no in range(BURST // 800):
        t = c.transaction()
        for i in range(800):
            t.set_data(path, b"%d" % (t_no * 800 + i + 1))
        await t.commit()


def test_a_blocked_listener_lags_once_and_the_cache_converges(server: Server, root: str, kind: str) -> None:
    gate = threading.Event()

    async def body(c: Any) -> None:
        try:
            await checks(c)
        finally:
            gate.set()  # never leave the callback thread blocked

    async def checks(c: Any) -> None:
        path = f"{root}/n"
        await c.ensure_path(root)
        await c.create(path, b"0")
        rec = Rec()
        rec.gate = gate  # the first call (the root's CREATED) blocks
        cache = await started(c, "Cache", root, rec.record)
        assert await asyncio.to_thread(rec.entered.wait, 10)
        await burst(c, path)

        async def converged() -> bool:
            n = cache.get(path)
            return n is not None and n.stat.version == BURST

        await eventually("the cache has every change", converged)
        core = cache._aio if isinstance(c, SyncAdapter) else cache
        box = next(iter(core._listeners.values()))
        assert len(box) <= LISTENER_BACKLOG and box.high_water == LISTENER_BACKLOG
        executor = aio_of(c)._callbacks._executor
        assert executor is not None and executor._work_queue.qsize() <= 2
        rec.gate.set()
        # The first call, the n/CREATED and INITIALIZED queued after it, the burst:
        queued = 2 + BURST
        await rec.has(1 + 1 + LISTENER_BACKLOG, timeout_s=20)
        calls = [a[0] for a in rec.snapshot()]
        assert calls[0].type is CacheEventType.CREATED
        lagged = [e for e in calls if e.type is CacheEventType.LAGGED]
        assert len(lagged) == 1 and calls[1] is lagged[0], calls[:3]
        assert lagged[0].missed == queued - LISTENER_BACKLOG and lagged[0].path is None
        rest = calls[2:]
        assert len(rest) == LISTENER_BACKLOG
        assert [e.node.stat.version for e in rest] == list(range(BURST - LISTENER_BACKLOG + 1, BURST + 1))
        await c.set(path, b"after")  # it goes on after the gap
        await rec.has(len(calls) + 1)
        last = rec.snapshot()[-1][0]
        assert last.type is CacheEventType.CHANGED and last.node.data == b"after"
        await close(c, cache)

    run_with(kind, server.addr, body)


def test_a_blocked_data_watch_skips_to_the_newest_state(server: Server, root: str, kind: str) -> None:
    gate = threading.Event()

    async def body(c: Any) -> None:
        try:
            await checks(c)
        finally:
            gate.set()  # never leave the callback thread blocked

    async def checks(c: Any) -> None:
        path = f"{root}/n"
        await c.ensure_path(root)
        await c.create(path, b"0")
        rec = Rec()
        rec.gate = gate

        def fn(data: bytes | None, stat: concord.Stat | None) -> None:
            rec.record(data, stat)

        w = await data_watch(c, path, fn)
        assert await asyncio.to_thread(rec.entered.wait, 10)
        await burst(c, path)

        async def converged() -> bool:
            n = w._state.nodes.get(path)
            return n is not None and n.stat.version == BURST

        await eventually("the watch has every change", converged)
        assert w.skipped > 0 and len(w._box) <= LISTENER_BACKLOG
        rec.gate.set()

        async def newest() -> bool:
            s = rec.snapshot()[-1][1]
            return s is not None and s.version == BURST

        await eventually("the newest state", newest, 20)
        versions = [s.version for _, s in rec.snapshot()]
        assert versions == sorted(versions) and len(versions) <= 1 + LISTENER_BACKLOG
        assert len(versions) - 1 + w.skipped == BURST
        w.close()

    run_with(kind, server.addr, body)


# -- the mailbox alone ---------------------------------------------------------------


def test_mailbox_bounds_and_notices() -> None:
    serial = Serial("test-mailbox")
    gate = threading.Event()

    got: list[Any] = []
    done = threading.Event()
    serial.submit(gate.wait, 10)  # the thread is busy: everything queues
    lagging = Mailbox(serial, got.append, bound=10, on_lag=lambda n: got.append(("lagged", n)))
    newest: list[Any] = []
    skipping = Mailbox(serial, newest.append, bound=10, lag=False)
    for i in range(1000):
        lagging.put(i)
        skipping.put(i)
    assert len(lagging) == 10 and len(skipping) <= 10
    assert serial._executor is not None and serial._executor._work_queue.qsize() == 2
    gate.set()
    serial.submit(done.set)
    deadline = time.monotonic() + 5
    while not (len(got) == 11 and newest and newest[-1] == 999) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == [("lagged", 990)] + list(range(990, 1000))
    assert newest[-1] == 999 and len(newest) <= 10 and skipping.dropped == 1000 - len(newest)
    lagging.put("again")
    deadline = time.monotonic() + 5
    while got[-1] != "again" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got[-1] == "again" and got.count(("lagged", 990)) == 1
    serial.shutdown()


def test_takes_event_counts_named_positional_parameters() -> None:
    assert aio_cache._takes_event(lambda d, s, e: None, 2)
    assert not aio_cache._takes_event(lambda d, s: None, 2)
    assert not aio_cache._takes_event(lambda *a: None, 2)

    class Holder:
        def method(self, d: Any, s: Any, e: Any) -> None: ...

    assert aio_cache._takes_event(Holder().method, 2)


def test_a_blocked_state_listener_skips_to_the_newest_state() -> None:
    listeners = Listeners()
    gate = threading.Event()
    heard: list[State] = []

    def slow(state: State) -> None:
        gate.wait(10)
        heard.append(state)

    listeners.add(slow)
    cycle = [State.SUSPENDED, State.RECONNECTED]
    try:
        for i in range(1000):  # the first blocks; the rest queue, at most STATE_BACKLOG
            listeners.dispatch(cycle[i % 2])
        box = listeners._fns[slow]
        assert box is not None and len(box) <= STATE_BACKLOG
        listeners.dispatch(State.LOST)
    finally:
        gate.set()
    deadline = time.monotonic() + 5
    while (not heard or heard[-1] is not State.LOST) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert heard[-1] is State.LOST and heard[0] is State.SUSPENDED
    assert len(heard) <= 1 + STATE_BACKLOG
    listeners.shutdown()
