"""What a candidacy announces (its value: Campaign's, then Proclaim's) and the public
leader observer (``c.observe(name)``), against real servers, on both clients: the
value shown by get_leader / get_participants and by observers; proclaim while leading
and while waiting (announced at the next leadership); Election's value; an observer's
states in order, none repeated, None while there is no leader; one resumed across a
server restart (nothing repeated, later changes delivered); a server behind what the
client has seen not believed until it catches up; a stalled first host skipped at
open; cancel() from another thread; refusals at open."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

import concord
import concord.aio
from concord import LeaderChange

from conftest import Server, SyncAdapter, eventually, run_with
from recipe_util import make, raw


def _name() -> str:
    return f"o-{uuid.uuid4().hex[:10]}"


async def _true(v: bool) -> bool:
    return v


async def observe(c: Any, name: str, **kw: Any) -> Any:
    """An open observer of either client (the sync one opens in ``observe()``)."""
    if isinstance(c, SyncAdapter):
        return await asyncio.to_thread(c.sync.observe, name, **kw)
    o = c.observe(name, **kw)
    await o.start()
    return o


async def nxt(o: Any, timeout: float = 10.0) -> LeaderChange | None:
    if isinstance(o, concord.LeaderObserver):
        return await asyncio.to_thread(o.next, timeout)
    return await o.next(timeout)


def aio_of(o: Any) -> concord.aio.LeaderObserver:
    return o._aio if isinstance(o, concord.LeaderObserver) else o


def who(change: LeaderChange | None) -> tuple[str, bytes] | None:
    assert change is not None, "the observer ended"
    return None if change.leader is None else (change.leader.id, change.leader.value)


def test_values_are_announced_and_proclaimed(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        a = make(c, "LeaderLatch", name, id="a", value=b"a1")
        b = make(c, "LeaderLatch", name, id="b", value=b"b1")
        await a.start()
        assert await a.wait(5)
        await b.start()

        async def lined_up() -> bool:
            return len(await a.get_participants()) == 2

        await eventually("b in line", lined_up)
        leader = await b.get_leader()
        assert (leader.id, leader.value, leader.is_leader) == ("a", b"a1", True)
        assert [(p.id, p.value) for p in await a.get_participants()] == [("a", b"a1"), ("b", b"b1")]

        # While leading: announced at once, same leadership.
        term = a.fence.token
        assert await a.proclaim(b"a2") is True
        assert a.value == b"a2"
        leader = await b.get_leader()
        assert (leader.id, leader.value, leader.term) == ("a", b"a2", term)

        # While waiting: kept, and announced when it leads (its candidacy was made with b1).
        assert await b.proclaim(b"b2") is False
        assert b.value == b"b2"
        assert (await a.get_leader()).value == b"a2"
        await a.close()
        assert await b.wait(5)

        async def b2_announced() -> bool:
            leader = await a.get_leader()
            return leader is not None and (leader.id, leader.value) == ("b", b"b2")

        await eventually("b's new value announced", b2_announced)
        await b.close()

    run_with(kind, server.addr, body)


def test_a_selector_and_an_election_announce_their_values(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        client = raw(c)
        name = _name()
        seen: list[bytes] = []
        done = threading.Event()
        holder: list[Any] = []

        if kind == "sync":

            def take(lead: Any) -> None:
                sel = holder[0]
                seen.append(sel.get_leader().value)
                assert sel.proclaim(b"s2")
                seen.append(sel.get_leader().value)
                done.set()
                lead.wait(10)

        else:

            async def take(lead: Any) -> None:
                sel = holder[0]
                seen.append((await sel.get_leader()).value)
                assert await sel.proclaim(b"s2")
                seen.append((await sel.get_leader()).value)
                done.set()
                await lead.cancelled()

        sel = client.LeaderSelector(name, take, id="s", value=b"s1")
        holder.append(sel)
        s = make(c, "LeaderSelector", name, lambda lead: None)  # for its calls only
        if kind == "sync":
            await asyncio.to_thread(sel.start)
        else:
            await sel.start()
        await eventually("take_leadership ran", lambda: _true(done.is_set()))
        assert seen == [b"s1", b"s2"]
        assert (await s.get_leader()).value == b"s2"
        if kind == "sync":
            await asyncio.to_thread(sel.close)
        else:
            await sel.close()

        # Election: the identifier by default (kazoo's contenders), or a value given.
        el_name = _name()
        plain = make(c, "Election", el_name, "me")
        given = make(c, "Election", _name(), "you", value=b"v1")
        got: list[Any] = []

        def run_plain() -> None:
            got.append(plain.obj.leader.value)

        await plain.run(run_plain)
        if kind == "sync":

            def run_given() -> None:
                got.append(given.obj.leader.value)
                assert given.obj.proclaim(b"v2")
                got.append(given.obj.leader.value)

            await given.run(run_given)
        else:

            async def run_given_async() -> None:
                got.append(given.obj.leader.value)
                assert await given.obj.proclaim(b"v2")
                got.append(given.obj.leader.value)

            await given.run(run_given_async)
        assert got == [b"me", b"v1", b"v2"]
        assert given.obj.value == b"v2"
        assert await given.proclaim(b"v3") is False  # not leading

    run_with(kind, server.addr, body)


def test_an_observer_reports_each_leader_change_once_in_order(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        o = await observe(c, name)
        first = await nxt(o)
        assert who(first) is None  # no leader yet
        a = make(c, "LeaderLatch", name, id="a", value=b"x")
        b = make(c, "LeaderLatch", name, id="b", value=b"y")
        await a.start()
        assert await a.wait(5)
        ch = await nxt(o)
        assert who(ch) == ("a", b"x") and ch.leader.fence == a.fence and ch.leader.is_leader
        # b queues: the leader does not change, so nothing is reported.
        await b.start()

        async def lined_up() -> bool:
            return len(await a.get_participants()) == 2

        await eventually("b in line", lined_up)
        with pytest.raises(concord.TimeoutError):
            await nxt(o, 0.3)
        assert await a.proclaim(b"x2")
        value_change = await nxt(o)
        assert who(value_change) == ("a", b"x2") and value_change.leader.term == ch.leader.term
        await a.close()
        assert who(await nxt(o)) == ("b", b"y")
        await b.close()
        last = await nxt(o)
        assert who(last) is None
        assert aio_of(o).last == last
        zxids = [first.zxid, ch.zxid, value_change.zxid, last.zxid]
        assert zxids == sorted(zxids) and len(set(zxids[1:])) == 3
        assert raw(c).last_zxid >= last.zxid  # recorded: later reads ask for at least it
        o.cancel()
        assert await nxt(o) is None

    run_with(kind, server.addr, body)


def test_an_observer_resumes_across_a_server_restart(own_server: Server, kind: str) -> None:
    """The server is killed (-9) and started again on the same port and data: the
    observer opens its stream again, does not report the unchanged leader a second
    time, and reports the changes made after."""

    async def body(c: Any) -> None:
        name = _name()
        latch = make(c, "LeaderLatch", name, id="l", value=b"before")
        await latch.start()
        assert await latch.wait(5)
        o = await observe(c, name)
        assert who(await nxt(o)) == ("l", b"before")
        await asyncio.to_thread(own_server.restart)

        async def resumed() -> bool:
            return aio_of(o).resumes >= 1

        await eventually("the observer resumed", resumed, 15)
        with pytest.raises(concord.TimeoutError):
            await nxt(o, 0.3)  # the same leader: not reported again

        async def proclaimed() -> bool:
            try:
                return bool(await latch.proclaim(b"after"))
            except concord.ConcordError:
                return False

        await eventually("the latch leads and proclaims after the restart", proclaimed, 15)
        assert who(await nxt(o)) == ("l", b"after")
        await latch.close()
        assert who(await nxt(o)) is None
        o.cancel()

    run_with(kind, own_server.addr, body, retry=concord.Retry(deadline=15.0), session_timeout=10.0)


def test_cancel_stops_an_observer_waiting_in_another_thread(server: Server) -> None:
    with concord.Client(server.addr) as c:
        o = c.observe(_name())
        assert who(o.next(5)) is None
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.append(list(o)))
        t.start()
        time.sleep(0.1)  # the iteration waits (nothing would come)
        o.cancel()
        t.join(5)
        assert not t.is_alive() and out == [[]]


def test_refusals_are_raised_at_open(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        with pytest.raises(concord.BadArgumentsError):
            await observe(c, "a/b")  # a name is one path segment

    run_with(kind, server.addr, body)


def test_an_observer_does_not_believe_a_server_behind_what_the_client_has_seen(
    server: Server, kind: str
) -> None:
    """The client is made to have seen a zxid 5 txns ahead of the server (as after
    answers from a server ahead of this one): the state a stream begins with is older,
    so the observer reports nothing and asks again, until the server has applied 5
    more txns; then it reports the leader, at a zxid at or past what was seen."""

    async def body(c: Any) -> None:
        name = _name()
        latch = make(c, "LeaderLatch", name, id="l", value=b"v")
        await latch.start()
        assert await latch.wait(5)
        await c.create(f"/{name}", b"0")
        ahead = raw(c).last_zxid + 5
        core = raw(c).aio if isinstance(c, SyncAdapter) else raw(c)
        core._saw(ahead)
        o = await observe(c, name)
        with pytest.raises(concord.TimeoutError):
            await nxt(o, 0.3)
        assert aio_of(o).last_error is not None and "behind" in aio_of(o).last_error.message
        assert aio_of(o).resumes >= 1  # asked again
        for i in range(5):  # writes carry no min_zxid: the server applies them
            await c.set(f"/{name}", str(i).encode())
        change = await nxt(o, 10)
        assert who(change) == ("l", b"v") and change.zxid >= ahead
        o.cancel()
        await c.delete(f"/{name}")
        await latch.close()

    run_with(kind, server.addr, body)


def test_a_stalled_first_host_is_skipped_at_open(server: Server, own_server: Server, kind: str) -> None:
    """The first host is connected to, then SIGSTOPped: the observer's first stream
    there sends nothing, so after its open wait (OPEN_WAIT_S) it moves to the next
    host. No session (not started)."""
    from concord.aio.observe import OPEN_WAIT_S

    name = _name()
    hosts = f"{own_server.addr},{server.addr}"
    took: list[float] = []
    try:
        if kind == "sync":
            c = concord.Client(hosts, randomize_hosts=False)
            try:
                # Connected to the first host: streams have their own channel
                # (unary calls go over a blocking one), so open one stream there.
                with c.observe(_name()) as warm:
                    warm.next(5)
                own_server.stop()
                started = time.monotonic()
                with c.observe(name) as o:
                    took.append(time.monotonic() - started)
                    assert who(o.next(5)) is None
            finally:
                c.close()
        else:

            async def main() -> None:
                c = concord.aio.Client(hosts, randomize_hosts=False)
                try:
                    await c.exists("/")
                    own_server.stop()
                    started = time.monotonic()
                    async with c.observe(name) as o:
                        took.append(time.monotonic() - started)
                        assert who(await o.next(5)) is None
                finally:
                    await c.close()

            asyncio.run(asyncio.wait_for(main(), 15))
    finally:
        own_server.cont()
    assert OPEN_WAIT_S - 0.2 <= took[0] < OPEN_WAIT_S + 2, took


def test_a_quiet_election_keeps_its_stream(server: Server, kind: str) -> None:
    """Nothing changes for longer than SILENCE_S: the server's progress messages keep
    the stream alive (no resume), and none is reported as a change."""
    from concord.aio.observe import SILENCE_S

    name = _name()

    async def body(c: Any) -> None:
        o = await observe(c, name)
        assert who(await nxt(o)) is None
        with pytest.raises(concord.TimeoutError):
            await nxt(o, SILENCE_S + 1.0)
        assert aio_of(o).resumes == 0, aio_of(o).last_error
        o.cancel()

    run_with(kind, server.addr, body)
