"""A LeaderSelector's close() keeps the leadership until take_leadership has
returned (Curator's and kazoo's rule), on both clients, for a function on a thread
and an ``async def``: two selectors record when their take_leadership starts and
ends, and the intervals never overlap, even when the closed one takes its time to
stop. close() waits a bounded time: past it, it returns False and the selector
resigns once the function returns, still with no overlap (issue 46)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any

import pytest

from conftest import Server, eventually, run_with
from recipe_util import make

#: How long the closed selector's function goes on after it is told to stop, unless
#: the other selector starts first (which is the defect).
CLEANUP_S = 1.5


class Runs:
    """The [start, end] of each take_leadership run, by selector, on a monotonic clock;
    ``started`` is set when the second selector's function starts."""

    def __init__(self) -> None:
        self.spans: dict[str, list[list[float]]] = {"a": [], "b": []}
        self.started_b = threading.Event()
        self.told_a = threading.Event()
        self._lock = threading.Lock()

    def begin(self, who: str) -> None:
        with self._lock:
            self.spans[who].append([time.monotonic(), float("inf")])
        if who == "b":
            self.started_b.set()

    def end(self, who: str) -> None:
        with self._lock:
            self.spans[who][-1][1] = time.monotonic()

    def overlap_s(self) -> float:
        with self._lock:
            (a0, a1), (b0, b1) = self.spans["a"][0], self.spans["b"][0]
        return max(0.0, min(a1, b1) - max(a0, b0))


def thread_fn(runs: Runs, who: str) -> Any:
    def take(lead: Any) -> None:
        runs.begin(who)
        try:
            lead.wait(30)
            if who == "a":
                runs.told_a.set()
                # Cleanup that outlasts the handover, unless the other starts first.
                runs.started_b.wait(CLEANUP_S)
        finally:
            runs.end(who)

    return take


def async_fn(runs: Runs, who: str) -> Any:
    async def take(lead: Any) -> None:
        runs.begin(who)
        try:
            try:
                await lead.cancelled()
            except asyncio.CancelledError:
                pass
            if who == "a":
                runs.told_a.set()
                # Cleanup after the cancellation, as a function that closes a
                # connection would: it awaits, still holding the leadership.
                deadline = time.monotonic() + CLEANUP_S
                while not runs.started_b.is_set() and time.monotonic() < deadline:
                    try:
                        await asyncio.sleep(0.01)
                    except asyncio.CancelledError:
                        pass
        finally:
            runs.end(who)

    return take


def _fn(style: str, runs: Runs, who: str) -> Any:
    return thread_fn(runs, who) if style == "thread" else async_fn(runs, who)


@pytest.mark.parametrize("style", ["thread", "async"])
def test_close_resigns_only_once_take_leadership_has_returned(server: Server, kind: str, style: str) -> None:
    if kind == "sync" and style == "async":
        pytest.skip("the sync selector runs plain functions")

    async def body(c: Any) -> None:
        name = f"sc-{uuid.uuid4().hex[:10]}"
        runs = Runs()
        a = make(c, "LeaderSelector", name, _fn(style, runs, "a"), id="a")
        b = make(c, "LeaderSelector", name, _fn(style, runs, "b"), id="b")
        await a.start()
        await eventually("a leads", lambda: _true(len(runs.spans["a"]) == 1))
        await b.start()
        await eventually("b is in line", lambda: _len(a, 2))
        closed = await a.close()
        returned_at = time.monotonic()
        await eventually("b leads", lambda: _true(len(runs.spans["b"]) == 1))
        assert runs.told_a.is_set()
        assert runs.overlap_s() == 0.0, runs.spans
        assert runs.spans["b"][0][0] >= runs.spans["a"][0][1]
        # close() returned True, after a's function had returned.
        assert closed is True
        assert runs.spans["a"][0][1] <= returned_at
        await b.close()
        await eventually("the line is empty", lambda: _len(a, 0))

    run_with(kind, server.addr, body)


@pytest.mark.parametrize("style", ["thread", "async"])
def test_a_close_that_waits_too_long_says_so_and_resigns_when_the_function_returns(
    server: Server, kind: str, style: str, caplog: pytest.LogCaptureFixture
) -> None:
    if kind == "sync" and style == "async":
        pytest.skip("the sync selector runs plain functions")

    async def body(c: Any) -> None:
        name = f"sc-{uuid.uuid4().hex[:10]}"
        runs = Runs()
        a = make(c, "LeaderSelector", name, _fn(style, runs, "a"), id="a")
        b = make(c, "LeaderSelector", name, _fn(style, runs, "b"), id="b")
        await a.start()
        await eventually("a leads", lambda: _true(len(runs.spans["a"]) == 1))
        await b.start()
        await eventually("b is in line", lambda: _len(a, 2))
        with caplog.at_level(logging.WARNING, logger="concord"):
            assert await a.close(0.2) is False
        assert any("still runs" in r.getMessage() for r in caplog.records), caplog.records
        assert runs.spans["a"][0][1] == float("inf")  # a's function runs still
        assert not runs.started_b.is_set()
        # Once it returns (CLEANUP_S later), a resigns and b leads, never both.
        await eventually("b leads", lambda: _true(len(runs.spans["b"]) == 1))
        assert runs.overlap_s() == 0.0, runs.spans
        # Closing again waits for nothing: it is done.
        assert await a.close() is True
        await b.close()
        await eventually("the line is empty", lambda: _len(a, 0))

    run_with(kind, server.addr, body)


async def _true(v: bool) -> bool:
    return v


async def _len(sel: Any, n: int) -> bool:
    return len(await sel.get_participants()) == n
