"""Lock and Semaphore against real servers, on both clients: exclusion and queue
order, a timed-out acquire leaves no waiter, fenced writes refused after release and
after the session is lost, a semaphore admits exactly n."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import concord
from concord import State

from conftest import Server, eventually, run_with
from recipe_util import make, raw


def _name() -> str:
    return f"l-{uuid.uuid4().hex[:10]}"


def test_a_lock_excludes_and_serves_its_queue_in_order(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a, b, d = (make(c, "Lock", name, identifier=i) for i in ("a", "b", "d"))
        assert await a.acquire()
        assert a.is_acquired and a.token and a.fence.token == a.token
        got: list[str] = []

        async def take(lock: Any, who: str) -> None:
            assert await lock.acquire()
            got.append(who)

        tb = asyncio.ensure_future(take(b, "b"))

        async def queued(n: int) -> bool:
            return len(await a.contenders()) == n

        await eventually("b queues", lambda: queued(2))
        td = asyncio.ensure_future(take(d, "d"))
        await eventually("d queues", lambda: queued(3))
        assert await a.contenders() == ["a", "b", "d"]
        assert got == [] and not b.is_acquired

        # Re-entrant through the same object: only the last release releases.
        assert await a.acquire()
        assert a.hold_count == 2
        assert await a.release()
        assert a.is_acquired and await a.validate()
        first = a.token
        assert await a.release()
        assert not a.is_acquired
        await asyncio.wait_for(tb, 10)
        assert got == ["b"] and b.is_acquired and not td.done()
        assert b.token > first  # tokens only grow
        assert await b.release()
        await asyncio.wait_for(td, 10)
        assert got == ["b", "d"]
        assert await d.release()
        assert await a.contenders() == []
        assert not await a.release()  # nothing held

    run_with(kind, server.addr, body)


def test_a_timed_out_acquire_leaves_no_waiter(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a, b = make(c, "Lock", name, identifier="a"), make(c, "Lock", name, identifier="b")
        assert await a.acquire(timeout=5)
        with pytest.raises(concord.LockTimeout):
            await b.acquire(timeout=0.3)
        assert not await b.acquire(blocking=False)
        assert not b.is_acquired and b.fence is None
        assert await a.contenders() == ["a"]
        await a.release()
        assert await b.acquire(timeout=5)
        await b.release()

    run_with(kind, server.addr, body)


def test_a_fenced_write_is_refused_after_release(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        lock = make(c, "Lock", _name())
        await c.create(root, b"0")
        if kind == "aio":
            async with raw(c).Lock(lock.name) as held:
                await c.set(root, b"1", fence=held.fence)
                fence = held.fence
        else:

            def guarded() -> concord.Fence:
                with raw(c).Lock(lock.name) as held:
                    raw(c).set(root, b"1", fence=held.fence)
                    return held.fence

            fence = await asyncio.to_thread(guarded)
        with pytest.raises(concord.FencedError):
            await c.set(root, b"2", fence=fence)
        data, _ = await c.get(root)
        assert data == b"1"

    run_with(kind, server.addr, body)


def test_a_lost_session_ends_its_holds(own_server: Server, kind: str) -> None:
    """The holder's session is lost (the server SIGSTOPped beyond its 1 s TTL): its
    fence is refused, it no longer holds, a waiting acquire of it fails and the
    lock passes on."""

    async def body(w: Any) -> None:
        holder = concord.aio.Client(own_server.addr, session_timeout=1.0) if kind == "aio" else None
        sync_holder = concord.Client(own_server.addr, session_timeout=1.0) if kind == "sync" else None
        from conftest import SyncAdapter

        h: Any = holder if holder is not None else SyncAdapter(sync_holder)
        try:
            await h.start()
            name = _name()
            lock = make(h, "Lock", name, identifier="h")
            assert await lock.acquire()
            fence = lock.fence
            await w.create("/fenced", b"0")
            await w.set("/fenced", b"1", fence=fence)
            other = make(h, "Lock", name, identifier="h2")
            waiting = asyncio.ensure_future(other.acquire())
            mine = make(w, "Lock", name, identifier="w")

            async def queued() -> bool:
                return len(await mine.contenders()) == 2

            await eventually("the second acquire queues", queued)
            own_server.stop()
            try:
                await eventually("the holder's session is lost", lambda: _is(h, State.LOST), 5)
            finally:
                own_server.cont()
            with pytest.raises(concord.SessionExpiredError):
                await asyncio.wait_for(waiting, 5)
            assert not lock.is_acquired and lock.fence is None
            with pytest.raises(concord.SessionExpiredError):
                await lock.acquire()
            assert await mine.acquire(timeout=10)

            async def refused() -> bool:
                try:
                    await w.set("/fenced", b"2", fence=fence)
                except concord.FencedError:
                    return True
                return False

            await eventually("the lost hold's fence is refused", refused)
            assert (await w.get("/fenced"))[0] == b"1"
            await mine.release()
        finally:
            if holder is not None:
                await holder.close()
            if sync_holder is not None:
                await asyncio.to_thread(sync_holder.close)

    run_with(kind, own_server.addr, body)


async def _is(c: Any, state: State) -> bool:
    return bool(c.state is state)


def test_a_semaphore_admits_exactly_n(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        sems = [make(c, "Semaphore", name, identifier=f"s{i}", max_leases=2) for i in range(3)]
        assert await sems[0].acquire()
        assert await sems[1].acquire()
        assert sems[0].fence != sems[1].fence
        with pytest.raises(concord.LockTimeout):
            await sems[2].acquire(timeout=0.3)
        assert sorted(await sems[0].lease_holders()) == ["s0", "s1"]
        lease = await sems[2].acquire_lease(timeout=0.2)
        assert lease is None
        waiting = asyncio.ensure_future(sems[2].acquire())
        await asyncio.sleep(0)  # let it queue (or not): the count below decides
        await sems[0].release()
        await asyncio.wait_for(waiting, 10)
        assert sorted(await sems[0].lease_holders()) == ["s1", "s2"]
        with pytest.raises(concord.BadArgumentsError):
            await make(c, "Semaphore", name, max_leases=3).acquire(timeout=1)
        await sems[1].release()
        await sems[2].release()
        lease = await sems[0].acquire_lease()
        assert lease is not None and lease.token > 0
        await sems[0].return_lease(lease)
        assert await sems[0].lease_holders() == []

    run_with(kind, server.addr, body)


def test_a_cancelled_acquire_leaves_no_waiter(server: Server) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a, b = c.Lock(name, identifier="a"), c.Lock(name, identifier="b")
        assert await a.acquire()
        waiting = asyncio.ensure_future(b.acquire())

        async def queued(n: int) -> bool:
            return len(await a.contenders()) == n

        await eventually("b queues", lambda: queued(2))
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await eventually("b left the queue", lambda: queued(1))
        assert not b.is_acquired
        await a.release()
        assert await a.contenders() == []

    run_with("aio", server.addr, body)


def test_acquires_cancelled_at_any_point_leave_the_lock_free(server: Server) -> None:
    """Cancels 30 acquires of a free lock at every point of their first milliseconds:
    one the server answered as it was cancelled holds the lock with its answer lost,
    so the SDK adopts that place again (same owner id) and releases it."""

    async def body(c: Any) -> None:
        name = _name()
        lock, probe = c.Lock(name, identifier="x"), c.Lock(name, identifier="probe")
        for i in range(30):
            task = asyncio.ensure_future(lock.acquire())
            await asyncio.sleep(i * 0.0003)  # the point of cancelling, not a wait for anything
            task.cancel()
            try:
                if await task:
                    await lock.release()
            except asyncio.CancelledError:
                pass

        async def free() -> bool:
            return await probe.contenders() == []

        await eventually("no place of the cancelled acquires is left", free, 5)
        assert await probe.acquire(timeout=5)
        await probe.release()

    run_with("aio", server.addr, body)


def test_a_semaphore_mutex_is_not_reentrant(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        m = make(c, "SemaphoreMutex", name, identifier="m")
        other = make(c, "Lock", name, identifier="o")
        assert await m.acquire()
        first = m.token
        assert m.is_acquired and m.hold_count == 1 and m.fence.token == first
        # A second acquire through the holder waits like anyone's: not in time here.
        with pytest.raises(concord.LockTimeout):
            await m.acquire(timeout=0.3)
        assert not await m.acquire(blocking=False)
        assert m.is_acquired and m.token == first and await m.validate()
        assert await m.contenders() == ["m"]
        # ... and gets the lock once the hold is released from elsewhere.
        again = asyncio.ensure_future(m.acquire())
        await eventually("the second acquire queues", lambda: _count(m, 2))
        assert await m.release()
        await asyncio.wait_for(again, 10)
        assert m.is_acquired and m.token > first
        with pytest.raises(concord.LockTimeout):
            await other.acquire(timeout=0.2)
        assert await m.release()
        assert not await m.release()
        assert await other.acquire(timeout=5)
        await other.release()
        assert await m.contenders() == []

    run_with(kind, server.addr, body)


async def _count(lock: Any, n: int) -> bool:
    return len(await lock.contenders()) == n


def test_acquire_many_is_all_or_nothing(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a = make(c, "Semaphore", name, identifier="a", max_leases=3)
        b = make(c, "Semaphore", name, identifier="b", max_leases=3)
        probe = make(c, "Lock", name)  # its contenders(): holders and waiters
        with pytest.raises(concord.BadArgumentsError):
            await a.acquire_many(4)
        with pytest.raises(concord.BadArgumentsError):
            await a.acquire_many(0)
        two = await a.acquire_many(2, timeout=5)
        assert two is not None and len(two) == 2 and len({le.token for le in two}) == 2
        assert await a.lease_holders() == ["a", "a"]
        # Two asked, one free: none kept after the timeout.
        assert await b.acquire_many(2, timeout=0.3) is None
        assert await a.lease_holders() == ["a", "a"]
        assert await _count(probe, 2)
        # A wait that gets the rest once the leases come back.
        waiting = asyncio.ensure_future(b.acquire_many(3, timeout=10))
        await eventually("b holds one and waits", lambda: _count(probe, 4))
        for le in two:
            await a.return_lease(le)
        got = await asyncio.wait_for(waiting, 10)
        assert got is not None and len(got) == 3
        assert await a.lease_holders() == ["b", "b", "b"]
        for le in got:
            await b.return_lease(le)
        assert await a.lease_holders() == []

    run_with(kind, server.addr, body)


def test_a_cancelled_acquire_many_gives_back_what_it_got(server: Server) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a = c.Semaphore(name, identifier="a", max_leases=2)
        b = c.Semaphore(name, identifier="b", max_leases=2)
        probe = c.Lock(name)
        held = await a.acquire_lease()
        assert held is not None
        waiting = asyncio.ensure_future(b.acquire_many(2))
        await eventually("b holds one and waits", lambda: _count(probe, 3))
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await eventually("b gives back what it got", lambda: _count(probe, 1))
        assert await a.lease_holders() == ["a"]
        await a.return_lease(held)

    run_with("aio", server.addr, body)
