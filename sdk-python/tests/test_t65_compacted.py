"""ZXID_COMPACTED from a real server, on both clients: a server that snapshots every
5 txns, keeps one snapshot and 5 txns of watch history in memory purges its log as
writes go on, so a watch from a start_zxid before what it kept is refused at open
with ZXID_COMPACTED, while a watch from a recent zxid replays what came after it; and
a watch whose stream breaks (injected) while the server compacts past its resume
point ends with the server's ZXID_COMPACTED when it resumes (test_t60_watch.py
injects the refusal itself)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator

import pytest

import concord
from concord import ErrorCode, EventKind
from concord.aio import watch as aio_watch
from concord.errors import Origin, make_error

from conftest import Server, run_with
from test_t60_watch import cancel, nxt, open_watch, take


@pytest.fixture
def compacting_server() -> Iterator[Server]:
    s = Server(
        config="snapshots_keep = 1\nwatch_history_txns_max = 5\n",
        extra=("--snapshot-every-txns", "5"),
    )
    try:
        yield s
    finally:
        s.kill()


def test_a_watch_from_before_the_compacted_history_is_refused(
    compacting_server: Server, kind: str
) -> None:
    async def body(c: Any) -> None:
        await c.create("/c", b"0")
        old = (await c.exists("/c")).mzxid
        # Write until the server's log no longer reaches back to ``old`` (snapshots
        # are taken and the log purged off the write path: poll, bounded).
        deadline = time.monotonic() + 15
        n = 0
        err: concord.ConcordError | None = None
        while time.monotonic() < deadline:
            for _ in range(10):
                n += 1
                await c.set("/c", str(n).encode())
            try:
                w = await open_watch(c, "/c", start_zxid=old)
            except concord.ConcordError as e:
                err = e
                break
            cancel(w)
            await asyncio.sleep(0.05)
        assert err is not None, f"no ZXID_COMPACTED after {n} writes"
        assert err.code is ErrorCode.ZXID_COMPACTED, err
        assert not err.retry_safe
        assert "resume from" in err.message  # the server names where history begins

        # A recent start_zxid is still served: the events after it, in order.
        recent = (await c.exists("/c")).mzxid
        w = await open_watch(c, "/c", start_zxid=recent)
        await c.set("/c", b"last")
        [ev] = await take(w, 1)
        assert (ev.kind, ev.data) == (EventKind.DATA_CHANGED, b"last") and ev.zxid > recent
        cancel(w)

    run_with(kind, compacting_server.addr, body)


async def _write_until_compacted(c: Any, path: str, old: int) -> int:
    """Sets ``path`` until a watch from ``old`` is refused with ZXID_COMPACTED
    (bounded); returns the writes made."""
    deadline = time.monotonic() + 15
    n = 0
    while time.monotonic() < deadline:
        for _ in range(10):
            n += 1
            await c.set(path, str(n).encode())
        try:
            w = await open_watch(c, path, start_zxid=old)
        except concord.ConcordError as e:
            assert e.code is ErrorCode.ZXID_COMPACTED, e
            return n
        cancel(w)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no ZXID_COMPACTED after {n} writes")


def test_a_resume_past_the_compacted_history_ends_the_watch(compacting_server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create("/w", b"0")
        await c.create("/other", b"0")
        gate = threading.Event()

        def patch(w: aio_watch.Watch) -> None:
            read = w._read
            state = {"delivered": False, "broken": False}

            async def held_read(call: Any, index: int) -> Any:
                if state["delivered"] and not state["broken"]:
                    # After the first event: once the server has compacted past it,
                    # break as a transport failure would.
                    await asyncio.to_thread(gate.wait, 20)
                    state["broken"] = True
                    return None, make_error(ErrorCode.UNAVAILABLE, "injected", origin=Origin.TRANSPORT), False
                msg, err, clean = await read(call, index)
                if msg is not None and msg.WhichOneof("msg") == "event":
                    state["delivered"] = True
                return msg, err, clean

            w._read = held_read  # type: ignore[method-assign]

        w = await open_watch(c, "/w", progress_interval_ms=60_000, patch=patch)
        await c.set("/w", b"1")
        first = await nxt(w)
        assert first is not None and first.data == b"1"
        await _write_until_compacted(c, "/other", first.zxid)
        gate.set()
        with pytest.raises(concord.ConcordError) as info:
            await nxt(w)
        assert info.value.code is ErrorCode.ZXID_COMPACTED
        assert info.value.origin is Origin.SERVER
        assert await nxt(w) is None

    run_with(kind, compacting_server.addr, body)
