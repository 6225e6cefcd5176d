"""Election, LeaderLatch and LeaderSelector against real servers, on both clients:
one leader at a time and handover in queue order, leadership dropped on SUSPENDED
(the server SIGSTOPped for less than the TTL) and regained on RECONNECTED, a
selector's take_leadership told to stop, auto-requeue cycling in queue order."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

import concord
from concord import LatchEvent, State

from conftest import Server, eventually, run_with
from recipe_util import make, raw


def _name() -> str:
    return f"e-{uuid.uuid4().hex[:10]}"


class Events:
    """A latch listener that records what it hears, and on which thread."""

    def __init__(self) -> None:
        self.events: list[LatchEvent] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def is_leader(self) -> None:
        self._add(LatchEvent.IS_LEADER)

    def not_leader(self) -> None:
        self._add(LatchEvent.NOT_LEADER)

    def _add(self, e: LatchEvent) -> None:
        with self._lock:
            self.events.append(e)
            self.threads.add(threading.current_thread().name)

    def snapshot(self) -> list[LatchEvent]:
        with self._lock:
            return list(self.events)


def test_latches_have_one_leader_at_a_time_and_hand_over_in_order(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        latches = [make(c, "LeaderLatch", name, id=f"p{i}") for i in range(3)]
        heard = [Events() for _ in latches]
        for latch, ev in zip(latches, heard):
            await latch.add_listener(ev)
        violations: list[list[int]] = []
        sampling = True

        async def sample() -> None:
            while sampling:
                now = [j for j, latch in enumerate(latches) if latch.obj.has_leadership()]
                if len(now) > 1:
                    violations.append(now)
                await asyncio.sleep(0.002)

        sampler = asyncio.ensure_future(sample())
        await latches[0].start()
        assert await latches[0].wait(5)
        for n, latch in enumerate(latches[1:], 2):
            await latch.start()  # campaigns in a task: wait until it is in line

            async def lined_up() -> bool:
                return len(await latches[0].get_participants()) == n

            await eventually(f"{n} candidates", lined_up)
        parts = await latches[0].get_participants()
        assert [p.id for p in parts] == ["p0", "p1", "p2"]
        assert [p.is_leader for p in parts] == [True, False, False]
        assert (await latches[1].get_leader()).id == "p0"
        assert not await latches[1].wait(0.2)

        # A second recipe of this session with a taken id is refused.
        with pytest.raises(concord.NodeExistsError):
            await make(c, "LeaderLatch", name, id="p1").start()

        for i in range(3):
            leaders = [j for j, latch in enumerate(latches[i:], i) if await latch.has_leadership()]
            assert leaders == [i]
            assert latches[i].fence is not None
            await latches[i].close()
            assert not await latches[i].has_leadership() and latches[i].fence is None
            if i + 1 < 3:
                assert await latches[i + 1].wait(5)
                # Never two at once: the closed one stopped leading before the next led.
                now = [j for j, latch in enumerate(latches) if await latch.has_leadership()]
                assert now == [i + 1]
        sampling = False
        await sampler
        assert violations == []
        assert await latches[0].get_participants() == []
        await eventually("the listeners hear it", lambda: _heard(heard[0], [LatchEvent.IS_LEADER]))
        for ev in heard[1:]:
            await eventually("the listeners hear it", lambda: _heard(ev, [LatchEvent.IS_LEADER]))
        assert all(not t.startswith("concord-io") for ev in heard for t in ev.threads)
        with pytest.raises(concord.ConcordError):
            await latches[0].wait(0.1)  # closed

    run_with(kind, server.addr, body)


async def _heard(ev: Events, want: list[LatchEvent]) -> bool:
    return ev.snapshot() == want


def test_suspended_drops_leadership_and_reconnected_regains_it(own_server: Server, kind: str) -> None:
    """SIGSTOP for less than the 3 s TTL: the latch stops leading and the selector's
    take_leadership is told to stop at SUSPENDED; after RECONNECTED the latch leads
    again with the same term (the server says its candidacy still leads) and the
    auto-requeued selector leads again."""

    async def body(c: Any) -> None:
        name = _name()
        latch = make(c, "LeaderLatch", name, id="only")
        ev = Events()
        await latch.add_listener(ev)
        await latch.start()
        assert await latch.wait(5)
        term = latch.fence.token

        runs: list[int] = []
        stopped = threading.Event()

        if kind == "aio":

            async def take(lead: Any) -> None:
                runs.append(lead.term)
                try:
                    await lead.cancelled()
                finally:
                    stopped.set()

        else:

            def take(lead: Any) -> None:
                runs.append(lead.term)
                lead.wait(20)
                stopped.set()

        selector = make(c, "LeaderSelector", _name(), take, id="sel", auto_requeue=True)
        await selector.start()
        await eventually("the selector leads", lambda: _true(len(runs) == 1))
        assert await selector.has_leadership()

        own_server.stop()
        try:
            await eventually("SUSPENDED", lambda: _true(raw(c).state is State.SUSPENDED), 5)
            await eventually("the latch stops leading", lambda: _not(latch.has_leadership()), 2)
            await eventually("take_leadership is told to stop", lambda: _true(stopped.is_set()), 2)
            assert not await selector.has_leadership()
        finally:
            own_server.cont()
        await eventually("RECONNECTED", lambda: _true(raw(c).state is State.RECONNECTED), 5)
        assert await latch.wait(5)
        assert latch.fence.token == term  # the same candidacy
        await eventually("the selector leads again", lambda: _true(len(runs) == 2), 5)
        assert runs[1] > runs[0]  # a new place in line: a new term
        await eventually(
            "the listener hears it",
            lambda: _heard(ev, [LatchEvent.IS_LEADER, LatchEvent.NOT_LEADER, LatchEvent.IS_LEADER]),
        )
        await selector.close()
        await latch.close()

    run_with(kind, own_server.addr, body, session_timeout=3.0)


async def _true(v: bool) -> bool:
    return v


async def _not(aw: Any) -> bool:
    return not await aw


def test_a_lost_session_ends_the_latch_and_the_selector(own_server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        latch = make(c, "LeaderLatch", _name(), id="x")
        await latch.start()
        assert await latch.wait(5)
        stopped = threading.Event()

        def take(lead: Any) -> None:
            lead.wait(20)
            stopped.set()

        selector = make(c, "LeaderSelector", _name(), take, id="y", auto_requeue=True)
        await selector.start()
        await eventually("the selector leads", selector.has_leadership)
        own_server.stop()
        try:
            await eventually("LOST", lambda: _true(raw(c).state is State.LOST), 5)
        finally:
            own_server.cont()
        assert not await latch.has_leadership()
        with pytest.raises(concord.SessionExpiredError):
            await latch.wait(1)
        assert latch.state is concord.RecipeState.CLOSED
        await eventually("take_leadership is told to stop", lambda: _true(stopped.is_set()), 2)
        await eventually("the selector ends", lambda: _true(selector.state is concord.RecipeState.CLOSED), 2)
        assert not await selector.has_leadership()

    run_with(kind, own_server.addr, body, session_timeout=1.0)


def test_selectors_with_auto_requeue_take_turns_in_queue_order(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        order: list[str] = []
        go = threading.Event()
        lock = threading.Lock()

        def recorder(who: str) -> Any:
            def take(lead: Any) -> None:
                go.wait(10)  # until both are in line
                with lock:
                    order.append(who)

            async def take_async(lead: Any) -> None:
                await asyncio.to_thread(go.wait, 10)
                with lock:
                    order.append(who)

            return take if kind == "sync" else take_async

        a = make(c, "LeaderSelector", name, recorder("a"), id="a", auto_requeue=True)
        b = make(c, "LeaderSelector", name, recorder("b"), id="b", auto_requeue=True)
        await a.start()
        await eventually("a leads", a.has_leadership)
        await b.start()

        async def both() -> bool:
            return [p.id for p in await a.get_participants()] == ["a", "b"]

        await eventually("both in line", both)
        assert (await b.get_leader()).id == "a"
        go.set()
        await eventually("six turns", lambda: _true(len(order) >= 6))
        await a.close()
        await b.close()
        assert order[:6] == ["a", "b", "a", "b", "a", "b"]
        # A Campaign cancelled by close() while the server committed its join leaves
        # the queue a moment later (the server's guard removes it).
        await eventually("both left the line", lambda: _empty(a))

    run_with(kind, server.addr, body)


def test_a_selector_without_auto_requeue_leads_once_until_requeued(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        runs: list[int] = []
        sel = make(c, "LeaderSelector", _name(), lambda lead: runs.append(lead.term), id="once")
        await sel.start()
        await eventually("it leads once", lambda: _true(len(runs) == 1))
        await eventually("it resigns", lambda: _empty(sel))
        assert await sel.requeue()
        await eventually("it leads again", lambda: _true(len(runs) == 2))
        await sel.close()

    run_with(kind, server.addr, body)


async def _empty(sel: Any) -> bool:
    return await sel.get_participants() == []


def test_election_run_campaigns_runs_and_resigns(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        first, second = make(c, "Election", name, "one"), make(c, "Election", name, "two")
        release = threading.Event()
        ran: list[str] = []

        def work(who: str) -> str:
            ran.append(who)
            if who == "one":
                release.wait(10)
            return who.upper()

        t1 = asyncio.ensure_future(first.run(work, "one"))
        await eventually("one leads", lambda: _true(ran == ["one"]))
        t2 = asyncio.ensure_future(second.run(work, "two"))

        async def two_waits() -> bool:
            return await first.contenders() == ["one", "two"]

        await eventually("two waits its turn", two_waits)
        assert ran == ["one"]
        third = make(c, "Election", name, "three")
        t3 = asyncio.ensure_future(third.run(work, "three"))

        async def three_waits() -> bool:
            return await first.contenders() == ["one", "two", "three"]

        await eventually("three waits its turn", three_waits)
        await third.cancel()
        assert await asyncio.wait_for(t3, 10) is None  # kazoo's: run returns
        assert await first.contenders() == ["one", "two"]
        release.set()
        assert await asyncio.wait_for(t1, 10) == "ONE"
        assert await asyncio.wait_for(t2, 10) == "TWO"
        assert ran == ["one", "two"]
        assert await first.contenders() == []

    run_with(kind, server.addr, body)


async def _resign_leader(c: Any, name: str) -> concord.Participant:
    """Resigns election ``name``'s leader from outside its recipe (as an operator
    would: the server lets the identity owning its session)."""
    from concord.aio import recipes as aio_recipes

    client = raw(c)
    leader = await make(c, "LeaderLatch", name).get_leader()
    assert leader is not None
    if isinstance(client, concord.Client):
        await asyncio.to_thread(client._io.run, aio_recipes._resign(client.aio, leader.key, leader.term))
    else:
        await aio_recipes._resign(client, leader.key, leader.term)
    return leader


def test_a_latch_whose_candidacy_is_resigned_by_someone_else_stops_leading(
    server: Server, kind: str
) -> None:
    """Someone else resigns the leading latch's candidacy while it is connected: it
    hears it on the Observe stream, says NOT_LEADER and queues again. The next one
    leads at once; until the first hears it, its fence is refused already."""

    async def body(c: Any) -> None:
        name = _name()
        a, b = make(c, "LeaderLatch", name, id="a"), make(c, "LeaderLatch", name, id="b")
        heard = Events()
        await a.add_listener(heard)
        await a.start()
        assert await a.wait(5)
        await b.start()

        async def line(ids: list[str]) -> bool:
            return [p.id for p in await a.get_participants()] == ids

        await eventually("b in line", lambda: line(["a", "b"]))
        old = a.fence
        await c.create(f"/{name}", b"0")
        gone = await _resign_leader(c, name)
        assert gone.id == "a" and gone.fence == old
        assert await b.wait(5)
        # Until a hears it (milliseconds), both say they lead: only b's fence works.
        with pytest.raises(concord.FencedError):
            await c.set(f"/{name}", b"a", fence=old)
        await c.set(f"/{name}", b"b", fence=b.fence)
        await eventually("a stops leading", lambda: _true(not a.obj.has_leadership()))
        await eventually("a hears it", lambda: _heard(heard, [LatchEvent.IS_LEADER, LatchEvent.NOT_LEADER]))
        assert a.fence is None
        await eventually("a queues again, behind b", lambda: line(["b", "a"]))
        # And leads again when b goes.
        await b.close()
        assert await a.wait(5)
        assert a.fence is not None and a.fence.token > gone.term
        await c.delete(f"/{name}")
        await a.close()

    run_with(kind, server.addr, body)


def test_a_selector_whose_candidacy_is_resigned_by_someone_else_is_told_to_stop(
    server: Server, kind: str
) -> None:
    async def body(c: Any) -> None:
        name = _name()
        terms: list[int] = []
        stopped: list[int] = []

        def take(lead: Any) -> None:
            terms.append(lead.term)
            if lead.wait(10):
                stopped.append(lead.term)

        async def take_async(lead: Any) -> None:
            terms.append(lead.term)
            try:
                await asyncio.wait_for(lead.cancelled(), 10)
                stopped.append(lead.term)
            except asyncio.CancelledError:
                stopped.append(lead.term)
                raise

        sel = make(c, "LeaderSelector", name, take if kind == "sync" else take_async, id="s", auto_requeue=True)
        await sel.start()
        await eventually("it leads", lambda: _true(len(terms) == 1))
        gone = await _resign_leader(c, name)
        assert gone.term == terms[0]
        await eventually("it is told to stop", lambda: _true(stopped[:1] == terms[:1]))
        await eventually("it leads again (auto_requeue)", lambda: _true(len(terms) == 2))
        assert terms[1] > terms[0]
        await sel.close()
        await eventually("it left the line", lambda: _empty(sel))

    run_with(kind, server.addr, body)
