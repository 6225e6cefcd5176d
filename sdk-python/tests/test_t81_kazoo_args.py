"""kazoo code that names a kazoo recipe means what it meant in kazoo, or fails loudly
(issue 46), on both clients: ``Lock.acquire(True, 0.5)`` (kazoo's blocking, timeout)
raises LockTimeout after half a second instead of reading 0.5 as a timeout of one;
the older order ``acquire(0.5)`` is refused; ``Semaphore(name, identifier,
max_leases)`` in kazoo's order; a path where a name belongs (kazoo's ``Lock("/locks/x")``)
is refused at construction; ChildrenWatch's ``allow_session_lost`` in kazoo's
position."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

import concord
import concord.aio

from conftest import Server, SyncAdapter, eventually, run_with
from recipe_util import make, raw


def _name() -> str:
    return f"k-{uuid.uuid4().hex[:10]}"


def test_lock_acquire_takes_kazoos_positional_order(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a, b = make(c, "Lock", name, "a"), make(c, "Lock", name, "b")
        assert await a.acquire(True, 5)
        # kazoo: acquire(blocking=True, timeout=0.5) -> LockTimeout after 0.5 s.
        started = time.monotonic()
        with pytest.raises(concord.LockTimeout) as caught:
            await b.acquire(True, 0.5)
        waited = time.monotonic() - started
        assert isinstance(caught.value, concord.TimeoutError)
        assert caught.value.code is concord.ErrorCode.TIMEOUT
        assert name in str(caught.value)
        assert waited < 5, waited  # not the server's margin, nor for ever
        assert await a.contenders() == ["a"]  # b left the queue
        # Non-blocking: False, as kazoo's.
        assert await b.acquire(False) is False
        assert await b.acquire(blocking=False) is False
        with pytest.raises(concord.LockTimeout):
            await b.acquire(timeout=0.2)
        await a.release()
        assert await b.acquire(True, 5) is True
        await b.release()

    run_with(kind, server.addr, body)


def test_lock_acquire_refuses_other_shapes(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a, b = make(c, "Lock", name, "a"), make(c, "Lock", name, "b")
        assert await a.acquire()
        for args, kw, what in [
            ((0.5,), {}, "blocking must be a bool"),  # the old order: timeout first
            ((5, True), {}, "blocking must be a bool"),
            ((True, "1"), {}, "timeout must be a number"),
            ((True, -1), {}, "negative timeout"),
            ((True, None, False), {}, "ephemeral=False"),
        ]:
            with pytest.raises(concord.BadArgumentsError, match=what):
                await b.acquire(*args, **kw)
        assert await a.contenders() == ["a"]  # nothing queued
        mutex = make(c, "SemaphoreMutex", name, "m")
        with pytest.raises(concord.BadArgumentsError, match="blocking must be a bool"):
            await mutex.acquire(0.5)
        with pytest.raises(concord.LockTimeout):
            await mutex.acquire(True, 0.2)
        await a.release()

    run_with(kind, server.addr, body)


def test_semaphore_takes_kazoos_order(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        # kazoo: Semaphore(path, identifier=None, max_leases=1)
        s0 = make(c, "Semaphore", name, "s0", 2)
        s1 = make(c, "Semaphore", name, "s1", 2)
        s2 = make(c, "Semaphore", name, "s2", 2)
        assert await s0.acquire(True, 5) and await s1.acquire(True, 5)
        assert sorted(await s0.lease_holders()) == ["s0", "s1"]
        with pytest.raises(concord.LockTimeout):
            await s2.acquire(True, 0.3)
        assert await s2.acquire(False) is False
        await s0.release()
        assert await s2.acquire(True, 5)
        await s1.release()
        await s2.release()
        # The older order, max_leases second, is refused rather than misread.
        for args in [(3,), (3, "x")]:
            with pytest.raises(concord.BadArgumentsError, match="identifier must be a str"):
                make(c, "Semaphore", name, *args)
        with pytest.raises(concord.BadArgumentsError, match="max_leases must be an int"):
            make(c, "Semaphore", name, "x", "3")
        with pytest.raises(concord.BadArgumentsError, match="blocking must be a bool"):
            await s0.acquire(0.5)

    run_with(kind, server.addr, body)


@pytest.mark.parametrize("recipe", ["Lock", "SemaphoreMutex", "Semaphore", "Election", "LeaderLatch", "LeaderSelector"])
def test_a_path_where_a_name_belongs_is_refused_at_construction(server: Server, kind: str, recipe: str) -> None:
    async def body(c: Any) -> None:
        extra = (lambda lead: None,) if recipe == "LeaderSelector" else ()
        for bad in ["/locks/x", "locks/x", "/x", "", ".", ".."]:
            with pytest.raises(concord.BadArgumentsError, match="one non-empty path segment") as caught:
                make(c, recipe, bad, *extra)
            assert caught.value.code is concord.ErrorCode.BAD_ARGUMENTS
        with pytest.raises(concord.BadArgumentsError, match='e.g. "x"'):
            make(c, recipe, "/locks/x", *extra)
        with pytest.raises(concord.BadArgumentsError, match="must be a str"):
            make(c, recipe, 7, *extra)
        make(c, recipe, "x", *extra)  # a name is fine

    run_with(kind, server.addr, body)


def test_election_run_refuses_what_is_not_callable(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        e = make(c, "Election", _name(), "e")
        with pytest.raises(concord.BadArgumentsError, match="not callable"):
            await e.run("not a function")
        assert await e.contenders() == []  # it never campaigned

    run_with(kind, server.addr, body)


def test_children_watch_takes_kazoos_order_and_allow_session_lost(own_server: Server, kind: str) -> None:
    """kazoo: ChildrenWatch(path, func, allow_session_lost=True, send_event=False).
    With allow_session_lost=False it ends when the session does; by default it
    outlives it (a watch needs no session)."""

    async def body(w: Any) -> None:
        root = f"/{_name()}"
        await w.create(root, b"")
        c: Any = (
            concord.aio.Client(own_server.addr, session_timeout=1.0)
            if kind == "aio"
            else SyncAdapter(concord.Client(own_server.addr, session_timeout=1.0))
        )
        await c.start()
        try:
            seen: dict[str, list[list[str]]] = {"kept": [], "ended": [], "events": []}
            lock = threading.Lock()

            def rec(key: str) -> Any:
                def fn(children: list[str], *event: Any) -> None:
                    with lock:
                        seen[key].append(list(children))

                return fn

            client = raw(c)

            async def watch(*args: Any) -> Any:
                if kind == "aio":
                    return client.ChildrenWatch(root, *args)
                return await asyncio.to_thread(client.ChildrenWatch, root, *args)

            kept = await watch(rec("kept"))
            ended = await watch(rec("ended"), False)
            with_event = await watch(rec("events"), True, True)  # positional send_event
            assert ended.allow_session_lost is False and kept.allow_session_lost is True
            with pytest.raises(concord.BadArgumentsError, match="allow_session_lost must be a bool"):
                await watch(rec("kept"), "no")

            async def heard(key: str, want: list[str]) -> bool:
                with lock:
                    return bool(seen[key]) and seen[key][-1] == want

            for key in seen:
                await eventually(f"{key}: first call", lambda key=key: heard(key, []))
            await w.create(f"{root}/a", b"")
            for key in seen:
                await eventually(f"{key}: a", lambda key=key: heard(key, ["a"]))
            # Lose the session: the server stopped beyond the 1 s TTL.
            own_server.stop()
            try:
                await eventually("the session is lost", lambda: _state(c, concord.State.LOST), 15)
            finally:
                own_server.cont()
            await eventually("the watch that ends with its session ends", lambda: _true(ended.stopped))
            assert not kept.stopped and not with_event.stopped
            await w.create(f"{root}/b", b"")
            await eventually("the kept watch goes on", lambda: heard("kept", ["a", "b"]))
            await eventually("the kept watch goes on", lambda: heard("events", ["a", "b"]))
            with lock:
                assert ["a", "b"] not in seen["ended"]
        finally:
            await c.close()

    run_with(kind, own_server.addr, body)


async def _state(c: Any, state: concord.State) -> bool:
    return raw(c).state is state


async def _true(v: bool) -> bool:
    return v


def test_a_cancelled_election_run_returns_none_as_kazoos(server: Server, kind: str) -> None:
    """kazoo: ``election.cancel()`` (from another thread) makes a waiting
    ``run(func)`` return None without running func; this raised CancelledError."""

    async def body(c: Any) -> None:
        name = _name()
        leader, waiter = make(c, "Election", name, "a"), make(c, "Election", name, "b")
        release = threading.Event()
        ran: list[str] = []

        def work(who: str) -> str:
            ran.append(who)
            if who == "a":
                release.wait(10)
            return who

        first = asyncio.ensure_future(leader.run(work, "a"))
        await eventually("a leads", lambda: _true(ran == ["a"]))
        second = asyncio.ensure_future(waiter.run(work, "b"))

        async def b_waits() -> bool:
            return await leader.contenders() == ["a", "b"]

        await eventually("b waits", b_waits)
        await waiter.cancel()
        assert await asyncio.wait_for(second, 10) is None
        assert ran == ["a"] and await leader.contenders() == ["a"]
        release.set()
        assert await asyncio.wait_for(first, 10) == "a"
        # The same object runs again afterwards, and leads.
        assert await asyncio.wait_for(waiter.run(work, "b"), 10) == "b"
        if kind == "aio":
            # The task running run() cancelled is still a cancellation.
            release.clear()
            held = asyncio.ensure_future(leader.run(work, "a"))
            await eventually("a leads again", lambda: _true(ran.count("a") == 2))
            waiting = asyncio.ensure_future(waiter.run(work, "b"))
            await eventually("b waits again", b_waits)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            release.set()
            assert await asyncio.wait_for(held, 10) == "a"

    run_with(kind, server.addr, body)
