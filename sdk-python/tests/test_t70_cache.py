"""DataWatch, ChildrenWatch and Cache on both clients: the calls kazoo users expect,
off the I/O loop; a cache that equals the server's tree after a few hundred seeded
random changes with a server restart and a forced rebuild in between; the pure cache
state's differences."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import concord
from concord import CacheEvent, CacheEventType, ErrorCode, Stat
from concord._cache_state import CacheState, Scope, ScopeKind, diff
from concord.aio import cache as aio_cache
from concord.errors import Origin, make_error
from concord.events import EventKind, Node, WatchEvent

from conftest import Server, SyncAdapter, eventually, run_with
from test_t60_watch import _break_after


class Calls:
    """Records a callback's arguments and the threads it ran on; returns False (stop)
    when ``stop_at`` says so."""

    def __init__(self, stop_at: Any = None) -> None:
        self.calls: list[Any] = []
        self.threads: set[str] = set()
        self.stop_at = stop_at
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        with self._lock:
            self.calls.append(args if len(args) > 1 else args[0])
            self.threads.add(threading.current_thread().name)
        if self.stop_at is not None and self.stop_at(*args):
            return False
        return None

    def snapshot(self) -> list[Any]:
        with self._lock:
            return list(self.calls)

    async def has(self, n: int) -> None:
        async def cond() -> bool:
            return len(self.snapshot()) >= n

        await eventually(f"{n} calls (got {self.snapshot()})", cond)


async def data_watch(c: Any, path: str, fn: Any) -> Any:
    if isinstance(c, SyncAdapter):
        return await asyncio.to_thread(lambda: c.sync.DataWatch(path)(fn))
    return c.DataWatch(path)(fn)


async def children_watch(c: Any, path: str, fn: Any) -> Any:
    if isinstance(c, SyncAdapter):
        return await asyncio.to_thread(lambda: c.sync.ChildrenWatch(path)(fn))
    return c.ChildrenWatch(path)(fn)


def data_of(calls: list[Any]) -> list[Any]:
    return [None if d is None else d for d, _ in calls]


def test_data_watch_sequence(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.ensure_path(root)
        path = f"{root}/cfg"
        rec = Calls(stop_at=lambda data, stat: data == b"3")
        await data_watch(c, path, rec)
        await rec.has(1)
        assert rec.snapshot() == [(None, None)]
        await c.create(path, b"1")
        await rec.has(2)
        await c.set(path, b"2")
        await c.create(f"{path}/child")  # children do not call a DataWatch
        await c.delete(f"{path}/child")
        await c.delete(path)
        await c.create(path, b"3")  # the function returns False here
        await rec.has(5)
        await c.set(path, b"4")
        # A second watch sees b"4"; its call runs after any the first would get.
        after = Calls()
        await data_watch(c, path, after)
        await after.has(1)
        calls = rec.snapshot()
        assert [d for d, _ in calls] == [None, b"1", b"2", None, b"3"]
        assert [s.version for d, s in calls if s is not None] == [0, 1, 0]
        assert all(isinstance(s, Stat) for d, s in calls if d is not None)
        assert after.snapshot()[0][0] == b"4"
        assert rec.threads and all(t.startswith("concord-watch") for t in rec.threads)

    run_with(kind, server.addr, body)


def test_children_watch_sequence(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        rec = Calls(stop_at=lambda names: names == ["a", "c"])
        await children_watch(c, root, rec)
        await rec.has(1)
        await c.create(root)
        await c.create(f"{root}/a", b"1")
        await rec.has(2)
        await c.create(f"{root}/b")
        await rec.has(3)
        await c.set(f"{root}/a", b"2")  # data: no call
        await c.create(f"{root}/a/deep")  # a grandchild: no call
        await c.delete(f"{root}/b")
        await rec.has(4)
        await c.create(f"{root}/c")  # ["a", "c"]: the function returns False
        await rec.has(5)
        await c.create(f"{root}/d")
        after = Calls()
        await children_watch(c, root, after)
        await after.has(1)
        assert rec.snapshot() == [[], ["a"], ["a", "b"], ["a"], ["a", "c"]]
        assert after.snapshot() == [["a", "c", "d"]]
        assert all(t.startswith("concord-watch") for t in rec.threads)

    run_with(kind, server.addr, body)


# -- the tree cache --------------------------------------------------------------------


async def server_tree(c: Any, root: str) -> dict[str, tuple[bytes, int]]:
    out: dict[str, tuple[bytes, int]] = {}

    async def walk(path: str) -> None:
        data, stat = await c.get(path)
        out[path] = (data, stat.version)
        for name in await c.get_children(path):
            await walk(f"{path}/{name}")

    if await c.exists(root) is not None:
        await walk(root)
    return out


def cached(nodes: list[Node]) -> dict[str, tuple[bytes, int]]:
    return {n.path: (n.data, n.stat.version) for n in nodes}


class Mirror:
    """A tree rebuilt from a cache's listener events alone."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.initialized = 0
        self.created_before_init: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, event: CacheEvent) -> None:
        with self._lock:
            if event.type is CacheEventType.INITIALIZED:
                self.initialized += 1
                return
            assert event.node is not None
            if event.type is CacheEventType.DELETED:
                del self.nodes[event.node.path]
            else:
                if event.type is CacheEventType.CHANGED:
                    assert event.old is not None and event.node.path in self.nodes
                if not self.initialized:
                    self.created_before_init.append(event.node.path)
                self.nodes[event.node.path] = (event.node.data, event.node.stat.version)

    def copy(self) -> dict[str, tuple[bytes, int]]:
        with self._lock:
            return dict(self.nodes)


def _force_rebuild(core: aio_cache._Core, after_events: int, gate: threading.Event) -> None:
    """The cache's first watch breaks after ``after_events`` events and its resume is
    refused with ZXID_COMPACTED: the cache must rebuild from a fresh snapshot, which
    it may open only once ``gate`` is set (so that the tree has changed meanwhile)."""
    make = core._new_watch
    made = {"n": 0}

    async def compacted(request: Any) -> Any:
        raise make_error(ErrorCode.ZXID_COMPACTED, "history compacted", origin=Origin.SERVER)

    def new_watch() -> Any:
        w = make()
        made["n"] += 1
        if made["n"] == 1:
            _break_after(w, after_events)
            opened = w._open

            async def open_once(request: Any) -> Any:
                w._open = compacted  # type: ignore[method-assign]
                return await opened(request)

            w._open = open_once  # type: ignore[method-assign]
        else:
            start = w.start

            async def gated_start() -> Any:
                for _ in range(1000):
                    if gate.is_set():
                        break
                    await asyncio.sleep(0.01)
                return await start()

            w.start = gated_start  # type: ignore[method-assign]
        return w

    core._new_watch = new_watch  # type: ignore[method-assign]


async def random_changes(c: Any, rng: random.Random, root: str, paths: list[str], n: int) -> None:
    for _ in range(n):
        roll = rng.random()
        leaves = [p for p in paths if not any(q.startswith(p + "/") for q in paths)]
        if roll < 0.35 or len(paths) < 3:
            parent = rng.choice([root] + [p for p in paths if p.count("/") < root.count("/") + 3])
            path = f"{parent}/n{rng.randrange(1000)}"
            if path not in paths:
                await c.create(path, rng.randbytes(rng.randrange(8)))
                paths.append(path)
        elif roll < 0.7:
            await c.set(rng.choice(paths), rng.randbytes(rng.randrange(8)))
        elif roll < 0.9:
            leaf = rng.choice(leaves)
            await c.delete(leaf)
            paths.remove(leaf)
        else:
            t = c.transaction()
            a, b = f"{root}/m{rng.randrange(1000)}", f"{root}/m{rng.randrange(1000)}"
            fresh = [p for p in dict.fromkeys([a, b]) if p not in paths]
            for p in fresh:
                t.create(p, b"m")
            t.set_data(root, rng.randbytes(4))
            results = await t.commit()
            assert not any(isinstance(r, Exception) for r in results), results
            paths.extend(fresh)


def test_cache_equals_the_tree_after_random_changes_a_restart_and_a_rebuild(
    own_server: Server, kind: str
) -> None:
    root = "/cache"
    rng = random.Random(13)

    async def body(c: Any) -> None:
        await c.create(root, b"r")
        await c.create(f"{root}/seed", b"s")
        paths = [f"{root}/seed"]
        cache = await (c.Cache(root) if isinstance(c, SyncAdapter) else asyncio.sleep(0, c.Cache(root)))
        core = cache._aio if isinstance(cache, concord.Cache) else cache
        mirror = Mirror()
        cache.add_listener(mirror)
        gate = threading.Event()
        _force_rebuild(core, after_events=40, gate=gate)
        if isinstance(cache, concord.Cache):
            await asyncio.to_thread(cache.start)
            assert await asyncio.to_thread(cache.wait_initialized, 10)
        else:
            await cache.start()
            assert await cache.wait_initialized(10)
        assert cache.get(f"{root}/seed") is not None and cache.get(f"{root}/seed").data == b"s"

        await random_changes(c, rng, root, paths, 100)

        async def compacted() -> bool:
            err = core.last_error
            return err is not None and err.code is ErrorCode.ZXID_COMPACTED

        await eventually("the cache's watch cannot resume", compacted)
        # Changes while the cache cannot see them: the rebuild must emit them.
        await random_changes(c, rng, root, paths, 50)
        gate.set()

        async def rebuilt() -> bool:
            return core.rebuilds == 1 and core.initialized and core.streams == 2

        await eventually("the cache rebuilds", rebuilt)
        await random_changes(c, rng, root, paths, 20)
        await asyncio.to_thread(own_server.restart)
        await c.exists(root)  # retried until the server is back
        await random_changes(c, rng, root, paths, 130)

        target = c.last_zxid

        async def caught_up() -> bool:
            return cache.zxid >= target

        await eventually(f"the cache reaches zxid {target} (at {cache.zxid})", caught_up, 20)
        tree = await server_tree(c, root)
        zxid, nodes = cache.snapshot()
        assert [n.path for n in nodes] == sorted(n.path for n in nodes)
        assert cached(nodes) == tree
        assert len(tree) > 20

        async def mirrored() -> bool:
            return mirror.copy() == tree

        await eventually("the listener's events rebuild the tree", mirrored)
        assert mirror.initialized == 1
        assert mirror.created_before_init == [root, f"{root}/seed"]
        assert core.rebuilds == 1
        assert core.reconnects >= 2  # the forced rebuild and the restart
        if isinstance(cache, concord.Cache):
            await asyncio.to_thread(cache.close)
        else:
            await cache.aclose()

    run_with(kind, own_server.addr, body, retry=concord.Retry(deadline=20.0))


def test_cache_context_managers(server: Server, root: str) -> None:
    with concord.Client(server.addr) as c:
        c.create(root, b"x")
        with c.Cache(root) as cache:
            assert cache.wait_initialized(10)
            assert cache.get(root) is not None and len(cache) == 1

    async def main() -> None:
        async with concord.aio.Client(server.addr) as c:
            async with c.Cache(root) as cache:
                assert await cache.wait_initialized(10)
                assert cache.get(root) is not None and cache.get(root).data == b"x"

    asyncio.run(main())


# -- the pure state ----------------------------------------------------------------


def _node(path: str, data: bytes, version: int = 0, czxid: int = 1) -> Node:
    return Node(path, data, Stat(czxid=czxid, mzxid=czxid + version, version=version))


def test_a_rebuild_emits_only_the_differences() -> None:
    old = {p: _node(p, b"") for p in ("/a", "/a/b", "/a/b/c", "/a/d")}
    new = dict(old)
    del new["/a/b"], new["/a/b/c"]
    new["/a/d"] = _node("/a/d", b"x", version=1)
    new["/a/e"] = _node("/a/e", b"")
    events = diff(old, new)
    assert [(e.type.name, e.node.path) for e in events if e.node] == [
        ("DELETED", "/a/b/c"),
        ("DELETED", "/a/b"),
        ("CHANGED", "/a/d"),
        ("CREATED", "/a/e"),
    ]


def test_state_keeps_its_scope_and_initializes_once() -> None:
    state = CacheState(Scope(ScopeKind.CHILDREN, "/p"))
    state.begin_snapshot()
    for p in ("/p", "/p/a", "/p/a/deep"):
        state.on_snapshot_node(_node(p, b""))
    events = state.on_snapshot_done(5)
    assert [e.type for e in events] == [CacheEventType.CREATED, CacheEventType.INITIALIZED]
    assert list(state.nodes) == ["/p/a"]
    state.on_progress(9)
    assert state.zxid == 9
    ev = WatchEvent(EventKind.DELETED, "/p/a", 10)
    assert [e.type for e in state.on_event(ev)] == [CacheEventType.DELETED]
    state.begin_snapshot()
    assert state.on_snapshot_done(11) == []  # no INITIALIZED again, nothing changed


def test_kazoo_call_forms(server: Server, root: str) -> None:
    """``c.DataWatch(path, fn)`` without the decorator; what the decorator returns is
    still callable as the function; ``close()`` from any thread stops it."""
    with concord.Client(server.addr) as c:
        rec = Calls()
        w = c.DataWatch(root, rec)
        asyncio.run(rec.has(1))
        assert rec.snapshot() == [(None, None)]
        w(b"direct", None)
        assert rec.snapshot()[-1] == (b"direct", None)
        w.close()

        async def stopped() -> bool:
            return w.stopped

        asyncio.run(eventually("the watch stops", stopped))
        names = Calls()
        c.ChildrenWatch(root, names)
        c.create(root)
        c.create(f"{root}/x")
        asyncio.run(names.has(2))
        assert names.snapshot()[-1] == ["x"]
