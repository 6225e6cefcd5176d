"""The recipes and a cache on a 3-server ensemble whose leader is killed with -9, on
both clients. The client under test names the leader first, so its session, its
lock's and latch's calls and its cache's watch are on the server that dies. Across
the failover: the lock holder keeps its lock and its fence (the session survives) and
a competitor still waits; three LeaderLatch participants (the first one on the
client under test, the others on clients of their own) never have two leaders and
end with exactly one, the same; the cache ends equal to the tree, with changes made
before, during and after the election."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import concord
import concord.aio
from concord import LatchEvent, State

from conftest import SyncAdapter, eventually, run_with
from recipe_util import Async, make, raw
from test_t50_ensemble import SIZE, Ensemble
from test_t90_elections import Events
from test_t70_cache import cached, server_tree

#: Every client here starts at its list's first host, as each test orders it.
RETRY = dict(
    session_timeout=5.0,
    call_timeout=2.0,
    retry=concord.Retry(deadline=20.0, max_delay=0.5),
    randomize_hosts=False,
)


async def _again(op: Any, gone: type[Exception] | None = None) -> None:
    """``op()`` until it is done: a write whose outcome is unknown (the leader died
    with it) is sent again; ``gone`` (NodeExistsError of a create, NoNodeError of a
    delete) on a retry means the first one was applied."""
    for attempt in range(100):
        try:
            await op()
            return
        except concord.ConcordError as err:
            if gone is not None and attempt > 0 and isinstance(err, gone):
                return
            if not (err.retry_safe or err.indeterminate):
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("a write kept failing")


async def churn(c: Any, rng: random.Random, root: str, live: set[str], n: int) -> None:
    """``n`` seeded creates, sets and deletes among 12 children of ``root``."""
    for _ in range(n):
        path = f"{root}/k{rng.randrange(12)}"
        data = rng.randbytes(rng.randrange(1, 8))
        if path not in live:
            await _again(lambda: c.create(path, data), concord.NodeExistsError)
            live.add(path)
        elif rng.random() < 0.7:
            await _again(lambda: c.set(path, data))
        else:
            await _again(lambda: c.delete(path), concord.NoNodeError)
            live.discard(path)


async def _ends_leading(ev: Events) -> bool:
    got = ev.snapshot()
    return len(got) >= 1 and got[0] is LatchEvent.IS_LEADER and got[-1] is LatchEvent.IS_LEADER


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def test_recipes_and_a_cache_survive_the_leaders_death(kind: str) -> None:
    ensemble = Ensemble()
    try:
        leader = ensemble.leader(list(range(SIZE)))
        order = [leader] + [i for i in range(SIZE) if i != leader]
        hosts = ",".join(ensemble.servers[i].addr for i in order)
        # The other participants prefer a follower (a surviving server) first.
        others_hosts = ",".join(ensemble.servers[i].addr for i in order[1:] + order[:1])

        async def body(c: Any) -> None:
            root = "/failover"
            lock_name, latch_name = _name("lock"), _name("latch")
            rng = random.Random(95)
            others = [concord.aio.Client(others_hosts, **RETRY) for _ in range(2)]  # type: ignore[arg-type]
            for o in others:
                await o.start()
            writer = others[0]
            try:
                session = raw(c).session_id
                states: list[State] = []
                c.add_listener(states.append)
                await c.create(root, b"r")
                live: set[str] = set()

                # A cache on the client under test; its watch is on the leader.
                if isinstance(c, SyncAdapter):
                    cache: Any = c.sync.Cache(root)
                    await asyncio.to_thread(cache.start)
                    assert await asyncio.to_thread(cache.wait_initialized, 10)
                    core = cache._aio
                else:
                    cache = core = c.Cache(root)
                    await cache.start()
                    assert await cache.wait_initialized(10)

                # A lock held through the failover, with a fenced write on each side.
                lock = make(c, "Lock", lock_name, identifier="holder")
                assert await lock.acquire(timeout=10)
                token, fence = lock.token, lock.fence
                await c.create(f"{root}/fenced", b"0", fence=fence)  # not churned: kept
                rival = Async(others[1].Lock(lock_name, identifier="rival"))

                # Three latch participants; the first leads.
                latches = [make(c, "LeaderLatch", latch_name, id="p0")] + [
                    Async(o.LeaderLatch(latch_name, id=f"p{i + 1}")) for i, o in enumerate(others)
                ]
                heard = Events()
                await latches[0].add_listener(heard)
                await latches[0].start()
                assert await latches[0].wait(10)
                for latch in latches[1:]:
                    await latch.start()

                async def lined_up() -> bool:
                    return len(await latches[0].get_participants()) == 3

                await eventually("3 candidates", lined_up)
                violations: list[list[int]] = []
                sampling = True

                async def sample() -> None:
                    while sampling:
                        now = [j for j, latch in enumerate(latches) if latch.obj.has_leadership()]
                        if len(now) > 1:
                            violations.append(now)
                        await asyncio.sleep(0.005)

                sampler = asyncio.ensure_future(sample())
                await churn(writer, rng, root, live, 20)

                killed = asyncio.ensure_future(asyncio.to_thread(ensemble.servers[leader].kill))
                # Writes (retried by the writer's client) during and after the election.
                await churn(writer, rng, root, live, 30)
                await killed
                await asyncio.to_thread(ensemble.leader, order[1:])

                # The lock: still this hold, on the same session, and its fence works.
                assert raw(c).session_id == session and raw(c).state is not State.LOST
                assert lock.is_acquired and lock.token == token
                assert await lock.validate()
                await c.set(f"{root}/fenced", b"1", fence=fence)
                assert await rival.acquire(blocking=False) is False

                # The latches: exactly one leader again, the same one.
                async def one_leader() -> bool:
                    now = [j for j, latch in enumerate(latches) if latch.obj.has_leadership()]
                    return now == [0]

                await eventually("p0 leads again, alone", one_leader, 20)
                assert (await latches[1].get_leader()).id == "p0"
                sampling = False
                await sampler
                assert violations == []
                # The session lived on (the election is shorter than the suspend
                # share of its TTL: no SUSPENDED either, which would drop leadership
                # until RECONNECTED); what p0 heard alternates and ends leading.
                assert State.LOST not in states
                await eventually("p0 hears it leads", lambda: _ends_leading(heard))
                got = heard.snapshot()
                assert all(a is not b for a, b in zip(got, got[1:])), got

                # The lock passes on at release; the old fence is refused.
                assert await lock.release()
                assert await rival.acquire(timeout=10)
                try:
                    await c.set(f"{root}/fenced", b"2", fence=fence)
                    raise AssertionError("a released hold's fence was accepted")
                except concord.FencedError:
                    pass
                await rival.release()

                # The cache: equal to the tree once it has seen the last write.
                await churn(writer, rng, root, live, 10)
                target = writer.last_zxid

                async def caught_up() -> bool:
                    return bool(cache.zxid >= target)

                await eventually(f"the cache reaches zxid {target}", caught_up, 20)
                tree = await server_tree(c, root)
                _, nodes = cache.snapshot()
                assert cached(nodes) == tree
                assert len(tree) > 5
                assert core.reconnects >= 1  # its watch moved off the dead server

                for latch in latches:
                    await latch.close()
                if isinstance(c, SyncAdapter):
                    await asyncio.to_thread(cache.close)
                else:
                    await cache.aclose()
            finally:
                for o in others:
                    await o.close()

        run_with(kind, hosts, body, **RETRY)  # type: ignore[arg-type]
    finally:
        ensemble.kill()
