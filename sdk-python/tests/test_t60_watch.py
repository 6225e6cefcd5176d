"""Watches: the cursor (as the Rust SDK's watch_tests.rs has it), events from a real
server on both clients, resume without loss or duplicates across a broken stream in
the middle of a multi's events and across a server restart, and the errors that end
a watch."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import concord
import concord.aio
from concord import BadArgumentsError, ConcordError, ErrorCode, EventKind, WatchEvent
from concord._cursor import EVENT, PROGRESS, SNAPSHOT_DONE, SNAPSHOT_NODE, STARTED, Cursor
from concord.aio import watch as aio_watch
from concord.errors import Origin, make_error

from conftest import Server, SyncAdapter, eventually, run_with

# -- the cursor, without a server -------------------------------------------------


def test_started_sets_the_resume_point_of_a_live_watch() -> None:
    c = Cursor(None, False)
    assert c.resume_from() is None
    assert c.accept(STARTED, 10)
    assert c.resume_from() == 10
    assert c.accept(EVENT, 12)
    assert c.accept(PROGRESS, 12)
    assert c.accept(STARTED, 5)  # a second Started does not move it back
    assert c.last_zxid == 12


def test_start_zxid_is_the_first_resume_point() -> None:
    c = Cursor(7, False)
    assert c.accept(STARTED, 20)
    assert c.resume_from() == 7


def test_complete_txn_resumes_from_its_zxid() -> None:
    c = Cursor(None, False)
    c.accept(STARTED, 1)
    assert c.accept(EVENT, 3) and c.accept(EVENT, 4)
    assert c.accept(PROGRESS, 4)
    assert c.resume_from() == 4
    assert not c.accept(EVENT, 4)
    assert not c.accept(EVENT, 2)
    assert c.accept(EVENT, 5)


def test_break_inside_a_txn_resumes_before_it_and_skips_what_was_seen() -> None:
    c = Cursor(None, False)
    c.accept(STARTED, 1)
    assert c.accept(EVENT, 8) and c.accept(EVENT, 9) and c.accept(EVENT, 9)
    assert c.resume_from() == 8
    assert not c.accept(EVENT, 9)
    assert not c.accept(EVENT, 9)
    assert c.accept(EVENT, 9)
    assert c.accept(EVENT, 10)
    assert c.events_delivered == 5


def test_resume_twice_before_the_replay_arrives_skips_the_same_events() -> None:
    c = Cursor(None, False)
    c.accept(EVENT, 9)
    assert c.resume_from() == 8
    assert c.resume_from() == 8
    assert not c.accept(EVENT, 9)
    assert c.accept(EVENT, 9)


def test_progress_advances_an_idle_watch() -> None:
    c = Cursor(None, False)
    c.accept(STARTED, 3)
    assert c.accept(PROGRESS, 40)
    assert c.resume_from() == 40
    c.accept(PROGRESS, 30)
    assert c.last_zxid == 40


def test_snapshot_done_sets_the_resume_point() -> None:
    c = Cursor(None, True)
    c.accept(STARTED, 50)
    assert c.accept(SNAPSHOT_NODE, 0)
    with pytest.raises(ConcordError):
        c.resume_from()
    assert c.accept(SNAPSHOT_DONE, 50)
    assert c.resume_from() == 50


def test_first_txn_resumes_from_zero() -> None:
    c = Cursor(0, False)
    assert not c.accept(EVENT, 0)
    assert c.accept(EVENT, 1)
    assert c.resume_from() == 0
    assert not c.accept(EVENT, 1)
    assert c.accept(EVENT, 1)


# -- helpers for both clients ------------------------------------------------------


async def open_watch(c: Any, *args: Any, patch: Any = None, **kw: Any) -> Any:
    """An open watch of either client (the sync one opens it in ``watch()``);
    ``patch(aio_watch)`` runs before its stream opens."""
    if isinstance(c, SyncAdapter):
        if patch is None:
            return await c.watch(*args, **kw)
        inner = c.sync.aio.watch(*args, **kw)
        patch(inner)
        await asyncio.to_thread(c.sync._io.run, inner.start())
        return concord.sync.Watch(c.sync._io, inner)
    w = c.watch(*args, **kw)
    if patch is not None:
        patch(w)
    await w.start()
    return w


def aio_of(w: Any) -> aio_watch.Watch:
    return w._aio if isinstance(w, concord.Watch) else w


async def nxt(w: Any, timeout: float = 10.0) -> WatchEvent | None:
    if isinstance(w, concord.Watch):
        return await asyncio.to_thread(w.next, timeout)
    return await w.next(timeout)


async def take(w: Any, n: int, timeout: float = 10.0) -> list[WatchEvent]:
    out = []
    for _ in range(n):
        ev = await nxt(w, timeout)
        assert ev is not None, f"the watch ended after {out}"
        out.append(ev)
    return out


def cancel(w: Any) -> None:
    w.cancel()


def brief(events: list[WatchEvent]) -> list[tuple[str, str, bytes]]:
    return [(e.kind.name, e.path, e.data) for e in events]


# -- against a real server ---------------------------------------------------------


def test_events_in_order_with_data_and_zxids_recorded(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        w = await open_watch(c, root, recursive=True)
        await c.create(root, b"1")
        await c.set(root, b"2")
        await c.create(f"{root}/a", b"x")
        await c.delete(f"{root}/a")
        events = await take(w, 6)
        assert brief(events) == [
            ("CREATED", root, b"1"),
            ("DATA_CHANGED", root, b"2"),
            ("CREATED", f"{root}/a", b"x"),
            ("CHILDREN_CHANGED", root, b""),
            ("DELETED", f"{root}/a", b""),
            ("CHILDREN_CHANGED", root, b""),
        ]
        assert events[1].prev_data == b"1" and events[1].stat.version == 1
        assert events[4].prev_data == b"x"
        zxids = [e.zxid for e in events]
        assert zxids == sorted(zxids)
        assert c.last_zxid >= zxids[-1]
        cancel(w)
        assert await nxt(w) is None

        # kinds, once, and a non-recursive watch of a node that does not exist yet.
        only = await open_watch(c, f"{root}/b", kinds=[EventKind.CREATED], once=True)
        await c.create(f"{root}/b", b"")
        await c.set(f"{root}/b", b"z")
        [ev] = await take(only, 1)
        assert ev.kind is EventKind.CREATED and ev.path == f"{root}/b"
        assert await nxt(only) is None

    run_with(kind, server.addr, body)


def test_refusals_are_raised_at_open(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        with pytest.raises(BadArgumentsError):
            await open_watch(c, "no-slash")
        with pytest.raises(BadArgumentsError):
            await open_watch(c, root, start_zxid=1 << 60)  # ahead of the commit point

    run_with(kind, server.addr, body)


def test_cancel_stops_an_iteration_waiting_in_another_thread(server: Server, root: str) -> None:
    with concord.Client(server.addr) as c:
        seen: list[Any] = []
        with c.watch(root) as w:
            t = threading.Thread(target=lambda: seen.extend(w), daemon=True)
            t.start()
            c.create(root)
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                time.sleep(0.02)
        t.join(timeout=10)
        assert not t.is_alive(), "the iteration did not stop at cancel()"
        assert [e.kind for e in seen] == [EventKind.CREATED]


def _break_after(w: aio_watch.Watch, events: int) -> None:
    """Makes the watch's stream break (as a transport failure, losing the message in
    flight) once ``events`` events were read, the first time only."""
    read = w._read
    count = {"events": 0, "broken": False}

    async def broken_read(call: Any, index: int) -> Any:
        msg, err, clean = await read(call, index)
        if msg is not None and not count["broken"] and msg.WhichOneof("msg") == "event":
            count["events"] += 1
            if count["events"] > events:
                count["broken"] = True
                return None, make_error(ErrorCode.UNAVAILABLE, "injected", origin=Origin.TRANSPORT), False
        return msg, err, clean

    w._read = broken_read  # type: ignore[method-assign]


def test_a_multis_events_at_one_zxid_survive_a_broken_stream(server: Server, root: str, kind: str) -> None:
    """The stream breaks after two of a multi's events: the watch resumes from the zxid
    before it and drops the two replayed ones, so each event arrives once."""

    async def body(c: Any) -> None:
        await c.create(root)
        # No Progress in the middle: the count at the multi's zxid is never complete.
        # The break comes after the set and two of the multi's events.
        w = await open_watch(
            c, root, recursive=True, progress_interval_ms=60_000, patch=lambda w: _break_after(w, 3)
        )
        await c.set(root, b"before")
        t = c.transaction()
        for name in ("a", "b", "c"):
            t.create(f"{root}/{name}", name.encode())
        await t.commit()
        await c.set(root, b"after")
        events = await take(w, 1 + 6 + 1)
        assert brief(events) == [
            ("DATA_CHANGED", root, b"before"),
            ("CREATED", f"{root}/a", b"a"),
            ("CHILDREN_CHANGED", root, b""),
            ("CREATED", f"{root}/b", b"b"),
            ("CHILDREN_CHANGED", root, b""),
            ("CREATED", f"{root}/c", b"c"),
            ("CHILDREN_CHANGED", root, b""),
            ("DATA_CHANGED", root, b"after"),
        ]
        assert len({e.zxid for e in events[1:7]}) == 1
        assert aio_of(w).resumes == 1
        cancel(w)

    run_with(kind, server.addr, body)


def test_resume_across_a_server_restart(own_server: Server, kind: str) -> None:
    """Events written before and after the server is killed and started again on the
    same port and data folder arrive exactly once, in order."""

    async def body(c: Any) -> None:
        w = await open_watch(c, "/r", recursive=True)
        await c.create("/r", b"0")
        for i in range(1, 5):
            await c.set("/r", str(i).encode())
        first = await take(w, 3)
        pid = own_server.proc.pid
        await asyncio.to_thread(own_server.restart)
        assert own_server.proc.pid != pid
        # The session may be lost meanwhile: write persistent nodes only, retried.
        for i in range(5, 9):
            await c.set("/r", str(i).encode())
        rest = await take(w, 6, timeout=20)
        events = first + rest
        assert [e.data for e in events] == [str(i).encode() for i in range(9)]
        zxids = [e.zxid for e in events]
        assert zxids == sorted(set(zxids))
        assert aio_of(w).resumes >= 1
        cancel(w)

    run_with(kind, own_server.addr, body, retry=concord.Retry(deadline=20.0), session_timeout=10.0)


def test_a_non_retryable_error_on_resume_ends_the_watch(server: Server, root: str, kind: str) -> None:
    """ZXID_COMPACTED (the server's history no longer reaches back) on a reconnect
    ends the iteration with that error, once."""

    async def body(c: Any) -> None:
        async def compacted(request: Any) -> Any:
            raise make_error(ErrorCode.ZXID_COMPACTED, "history compacted", origin=Origin.SERVER)

        def patch(inner: aio_watch.Watch) -> None:
            _break_after(inner, 0)
            opened = inner._open

            async def open_once(request: Any) -> Any:
                inner._open = compacted  # type: ignore[method-assign]
                return await opened(request)

            inner._open = open_once  # type: ignore[method-assign]

        w = await open_watch(c, root, patch=patch)
        await c.create(root)
        with pytest.raises(ConcordError) as info:
            await nxt(w)
        assert info.value.code is ErrorCode.ZXID_COMPACTED
        assert await nxt(w) is None

    run_with(kind, server.addr, body)


def test_a_dead_host_of_the_list_is_skipped_and_next_times_out(server: Server, root: str, kind: str) -> None:
    from conftest import free_port

    async def body(c: Any) -> None:
        w = await open_watch(c, root)
        with pytest.raises(concord.TimeoutError):
            await nxt(w, 0.2)
        await c.create(root)  # nothing was lost by the timeout
        [ev] = await take(w, 1)
        assert ev.kind is EventKind.CREATED
        cancel(w)

    run_with(
        kind,
        f"127.0.0.1:{free_port()},{server.addr}",
        body,
        retry=concord.Retry(deadline=10.0),
        randomize_hosts=False,
    )


def test_a_watch_moves_to_another_server_when_its_server_dies() -> None:
    """A 3-server ensemble; the watch's server (the leader, first in the host list)
    is killed with -9: the watch resumes on another server of the list, and the
    events before and after arrive exactly once, in order."""
    from test_t50_ensemble import SIZE, Ensemble

    ensemble = Ensemble()
    try:
        leader = ensemble.leader(list(range(SIZE)))
        order = [leader] + [i for i in range(SIZE) if i != leader]
        hosts = ",".join(ensemble.servers[i].addr for i in order)

        async def body(c: Any) -> None:
            w = await open_watch(c, "/moved")
            await c.create("/moved", b"0")
            for i in range(1, 4):
                await c.set("/moved", str(i).encode())
            first = await take(w, 2)
            await asyncio.to_thread(ensemble.servers[leader].kill)
            # A read first: it is retried on the next server of the list, so the client
            # has left the dead one before the writes. (A Set sent on the dead
            # connection fails with ConnectionLoss, outcome unknown, and is not retried,
            # as kazoo's would not be: that once failed this test.)
            await c.get("/moved")
            for i in range(4, 7):
                await c.set("/moved", str(i).encode())
            rest = await take(w, 5, timeout=20)
            assert [e.data for e in first + rest] == [str(i).encode() for i in range(7)]
            assert aio_of(w).resumes >= 1
            cancel(w)

        run_with(
            "aio", hosts, body, session_timeout=5.0, call_timeout=2.0,
            retry=concord.Retry(deadline=20.0, max_delay=0.5), randomize_hosts=False,
        )
    finally:
        ensemble.kill()


def test_a_silent_server_breaks_the_stream_and_the_watch_resumes(own_server: Server) -> None:
    """A SIGSTOPped server keeps the connection open and sends nothing, not even
    Progress: after three progress intervals (at least 2 s) the watch counts its
    stream as broken and reconnects until the server answers again."""

    async def body(c: Any) -> None:
        w = await open_watch(c, "/s", progress_interval_ms=200)
        await c.create("/s", b"0")
        assert (await take(w, 1))[0].data == b"0"
        own_server.stop()
        try:
            async def broken() -> bool:
                return aio_of(w).last_error is not None

            await eventually("the silent stream counts as broken", broken, 6)
            assert "silent" in str(aio_of(w).last_error)
        finally:
            own_server.cont()
        await c.set("/s", b"1")
        assert [e.data for e in await take(w, 1, timeout=15)] == [b"1"]
        assert aio_of(w).resumes >= 1
        cancel(w)

    run_with("aio", own_server.addr, body, retry=concord.Retry(deadline=15.0))
