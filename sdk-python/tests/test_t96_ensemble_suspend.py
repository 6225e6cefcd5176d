"""A LeaderLatch on a 3-server ensemble whose leader is SIGSTOPped, on both clients.

The client under test names the leader first, so its session's keep-alives, its
latch's calls and Observe stream and an observer are on the server that stops. A
stopped server keeps its connections open and answers nothing, so the client can
only tell by the silence of its pings (a process killed with -9, as in
test_t95_failover.py, breaks them at once, and the client moves on before any
SUSPENDED). With a 2 s TTL and a suspend share of 0.3 the client goes SUSPENDED 0.6 s
after its last answered ping, and the latch stops leading then (NOT_LEADER), well
before the server could expire the session (2 s) and hand the leadership on; its
keep-alives move to a follower 1 s after the last answer (1.5 ping intervals):
RECONNECTED, the same session. The latch then asks the server whether its
candidacy, key and term, still leads: it does (the followers elect a new leader,
which gives every session a full TTL), so it leads again with the same term
(docs/sdk.md "LeaderLatch": SUSPENDED stops leading and keeps the place; RECONNECTED
leads again only if the server says it still leads), and announces the value
proclaimed while it was SUSPENDED (refused then: not leading). The other two
participants, on clients that prefer the followers, never lead meanwhile. The
observer, silent on the stopped server, moves with the keep-alives and reports those
values.
The stopped server is sent SIGCONT (and killed) in the finalizer whatever happens."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, Iterator

import pytest

import concord
import concord.aio
from concord import LatchEvent, State

from conftest import SyncAdapter, run_with
from recipe_util import Async, make, raw
from test_t50_ensemble import SIZE, Ensemble
from test_t90_elections import Events
from test_t92_observe import aio_of, nxt, observe, who

TTL_S = 2.0
SHARE = 0.3
CLIENT = dict(
    session_timeout=TTL_S,
    suspend_share=SHARE,
    call_timeout=1.0,
    retry=concord.Retry(deadline=10.0, max_delay=0.3),
    # Each test orders its hosts: the client starts at the first.
    randomize_hosts=False,
)
#: What the SUSPENDED timing may be late by (the loop, the listener hop, sampling).
SLACK_S = 0.25


@pytest.fixture
def ensemble() -> Iterator[Ensemble]:
    e = Ensemble()
    try:
        yield e
    finally:
        for s in e.servers:
            if s.stopped:
                s.cont()
        e.kill()


def test_a_latch_whose_server_stops_is_suspended_and_leads_again(ensemble: Ensemble, kind: str) -> None:
    leader = ensemble.leader(list(range(SIZE)))
    rest = [i for i in range(SIZE) if i != leader]
    order = [leader] + rest
    hosts = ",".join(ensemble.servers[i].addr for i in order)
    others_hosts = [
        ",".join(ensemble.servers[i].addr for i in (rest[j], rest[1 - j], leader)) for j in range(2)
    ]
    name = f"suspend-{uuid.uuid4().hex[:8]}"

    async def body(c: Any) -> None:
        others = [concord.aio.Client(h, **CLIENT) for h in others_hosts]  # type: ignore[arg-type]
        for o in others:
            await o.start()
        try:
            session = raw(c).session_id
            states: list[tuple[State, float]] = []
            lock = threading.Lock()

            def on_state(state: State) -> None:
                with lock:
                    states.append((state, time.monotonic()))

            c.add_listener(on_state)
            latches = [make(c, "LeaderLatch", name, id="p0", value=b"p0")] + [
                Async(o.LeaderLatch(name, id=f"p{i + 1}")) for i, o in enumerate(others)
            ]
            heard = Events()
            await latches[0].add_listener(heard)
            await latches[0].start()
            assert await latches[0].wait(10)
            term = latches[0].fence.token
            for latch in latches[1:]:
                await latch.start()

            async def lined_up() -> bool:
                return len(await latches[0].get_participants()) == 3

            await _eventually("3 candidates", lined_up, 10)
            o = await observe(c, name)
            assert who(await nxt(o)) == ("p0", b"p0")

            # Sample who leads every 2 ms: never two, and when p0 stopped leading.
            violations: list[list[int]] = []
            p0_down: list[float] = []
            sampling = True

            async def sample() -> None:
                while sampling:
                    now = [j for j, latch in enumerate(latches) if latch.obj.has_leadership()]
                    if len(now) > 1:
                        violations.append(now)
                    if 0 not in now and not p0_down:
                        p0_down.append(time.monotonic())
                    await asyncio.sleep(0.002)

            sampler = asyncio.ensure_future(sample())
            stopped_at = time.monotonic()
            ensemble.servers[leader].stop()

            async def suspended() -> bool:
                with lock:
                    return any(s is State.SUSPENDED for s, _ in states)

            await _eventually("SUSPENDED", suspended, 3)
            await _eventually("p0 stops leading", lambda: _v(bool(p0_down)), 1)
            with lock:
                t_suspended = next(t for s, t in states if s is State.SUSPENDED)
            # By the suspend share of the TTL after its last answered ping (before the stop).
            assert t_suspended - stopped_at <= SHARE * TTL_S + SLACK_S, t_suspended - stopped_at
            assert p0_down[0] - stopped_at <= SHARE * TTL_S + SLACK_S, p0_down[0] - stopped_at
            # Not leading now: the value waits for the next leadership.
            assert await latches[0].proclaim(b"during") is False

            async def reconnected() -> bool:
                with lock:
                    return any(s is State.RECONNECTED for s, _ in states)

            await _eventually("RECONNECTED", reconnected, 5)
            # The server says p0's candidacy still leads: it leads again, same term.
            assert await latches[0].wait(5)
            assert latches[0].fence.token == term
            assert raw(c).session_id == session

            # The ensemble elects a new leader among the others; p0 leads on, alone.
            await asyncio.to_thread(ensemble.leader, rest)

            async def alone() -> bool:
                now = [j for j, latch in enumerate(latches) if latch.obj.has_leadership()]
                return now == [0]

            await _eventually("p0 leads alone", alone, 5)
            leader_now = await latches[1].get_leader()
            assert (leader_now.id, leader_now.term) == ("p0", term)

            # Leading again, it announced the value proclaimed while SUSPENDED.
            async def announced() -> bool:
                p = await latches[1].get_leader()
                return p is not None and p.value == b"during"

            await _eventually("the value proclaimed while suspended is announced", announced, 5)
            # The new leader accepts p0's fence: its leadership is real.
            await c.create(f"/{name}", b"p0", fence=latches[0].fence)

            # The observer left the silent server with the keep-alives.
            change = await nxt(o, 5)
            assert who(change) == ("p0", b"during") and change.leader.term == term
            assert await latches[0].proclaim(b"after")
            change = await nxt(o, 5)
            assert who(change) == ("p0", b"after") and change.leader.term == term
            o.cancel()

            sampling = False
            await sampler
            assert violations == []
            with lock:
                got = [s for s, _ in states]
            assert State.LOST not in got
            assert got[:2] == [State.SUSPENDED, State.RECONNECTED], got
            assert heard.snapshot() == [LatchEvent.IS_LEADER, LatchEvent.NOT_LEADER, LatchEvent.IS_LEADER]
            for latch in latches:
                await latch.close()
        finally:
            for o in others:
                await o.close()

    run_with(kind, hosts, body, **CLIENT)  # type: ignore[arg-type]


async def _v(v: bool) -> bool:
    return v


async def _eventually(what: str, cond: Any, timeout_s: float) -> None:
    """Polls ``cond()`` every 5 ms until it holds; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def test_an_observer_leaves_a_server_that_goes_silent(ensemble: Ensemble, kind: str) -> None:
    """An observer on a client with no session (so no keep-alives to follow) whose
    stream's server, a follower, is SIGSTOPped: the stream asks for progress, so after
    SILENCE_S with nothing it moves to the next host and reports the leader elected
    meanwhile there."""
    from concord.aio.observe import SILENCE_S

    leader = ensemble.leader(list(range(SIZE)))
    silent = next(i for i in range(SIZE) if i != leader)
    order = [silent] + [i for i in range(SIZE) if i != silent]
    hosts = ",".join(ensemble.servers[i].addr for i in order)
    name = f"silent-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with concord.aio.Client(ensemble.servers[leader].addr, **CLIENT) as other:  # type: ignore[arg-type]
            latch = other.LeaderLatch(name, id="b", value=b"b")
            if kind == "sync":
                c = concord.Client(hosts, **CLIENT)  # type: ignore[arg-type]
            else:
                c = concord.aio.Client(hosts, **CLIENT)  # type: ignore[arg-type]
            try:
                o = await observe(SyncAdapter(c) if kind == "sync" else c, name)
                assert who(await nxt(o)) is None
                stopped_at = time.monotonic()
                ensemble.servers[silent].stop()
                await latch.start()
                assert await latch.wait(10)
                change = await nxt(o, SILENCE_S + 5)
                took = time.monotonic() - stopped_at
                assert who(change) == ("b", b"b")
                assert SILENCE_S - 0.5 <= took < SILENCE_S + 3, took
                assert aio_of(o).resumes >= 1
                o.cancel()
            finally:
                await latch.close()
                if kind == "sync":
                    await asyncio.to_thread(c.close)
                else:
                    await c.close()

    asyncio.run(asyncio.wait_for(main(), 30))
