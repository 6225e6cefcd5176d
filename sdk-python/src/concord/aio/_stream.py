"""What a watch and a leader observer share: a reader task puts what it reads on a
bounded queue (then the error that ended it, if any, then ``END``); ``next`` takes
from it; ``cancel()`` ends both sides at once; ``async with`` opens and closes."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Generic, Iterable, TypeVar

from ..errors import ConcordError, ErrorCode, make_error
from ._wait import within

if TYPE_CHECKING:
    from .client import Client

#: Messages a reader may be ahead of its consumer by; then it stops reading (and the
#: server, past its own bounds, cuts the stream with SLOW_CONSUMER, which resumes).
QUEUE_MAX = 1024
#: What a reader puts on the queue last.
END = object()
#: How long a close waits for what it cancelled (a grpc read, a reader task, a
#: recipe's task) to finish, before it leaves it to the loop.
SETTLE_S = 2.0

T = TypeVar("T")
S = TypeVar("S", bound="QueuedStream[Any]")


class QueuedStream(Generic[T]):
    """The queue, the reader task and the ending of a stream of ``T``s the client
    resumes by itself. Subclasses open it in ``start()``, run the reader task, and
    say in ``next`` what an item is."""

    #: What ``next`` waits for, for its TIMEOUT message ("watch event", ...).
    _waits_for = "message"

    def __init__(self, client: Client) -> None:
        self._client = client
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUE_MAX)
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        #: The consumer has seen the end (or the error).
        self._done = False
        self._cancelled = False
        #: How many times the stream was opened again after a break.
        self.resumes = 0
        #: The error that broke the stream last (it may have resumed since).
        self.last_error: ConcordError | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    async def start(self: S) -> S:
        raise NotImplementedError

    async def next(self, timeout: float | None = None) -> T | None:
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def _take(self, timeout: float | None, asked: float | None = None) -> Any:
        """The next item the reader queued; None at the end; raises the error that
        ended the stream (once), or TIMEOUT after ``timeout`` seconds (nothing lost),
        whose message names ``asked``: the time the caller asked for, when
        ``timeout`` is what is left of it (default: ``timeout``)."""
        if self._task is None and not self._cancelled:
            await self.start()
        if self._done or self._cancelled:
            return None
        try:
            item = await within(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            asked = timeout if asked is None else asked
            raise make_error(ErrorCode.TIMEOUT, f"no {self._waits_for} within {asked} s") from None
        if item is END or self._cancelled:
            self._done = True
            return None
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def _cancelling(self) -> None:
        """What a subclass lets go of when cancelled (before the reader is)."""

    def cancel(self) -> None:
        """Ends the stream: it closes, and iteration stops (at once for a reader
        waiting). Call it on the client's loop (the sync twin does)."""
        if self._cancelled:
            return
        self._cancelled = True
        self._cancelling()
        if self._task is not None:
            self._task.cancel()
        try:
            self._queue.put_nowait(END)
        except asyncio.QueueFull:
            pass  # the reader is not waiting: it sees the flag first

    async def aclose(self) -> None:
        """``cancel()``, then waits for the stream to be closed."""
        self.cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def __aenter__(self: S) -> S:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def settle(aws: Iterable[Awaitable[Any]], limit: float = SETTLE_S) -> None:
    """Waits, at most ``limit`` seconds, until ``aws`` (cancelled tasks, closings)
    have finished, their outcomes retrieved and dropped: what a close cancels is not
    left pending on the loop, where a loop that stops next (the sync client's) would
    destroy it pending ("Task was destroyed but it is pending!")."""
    futures = {asyncio.ensure_future(aw) for aw in aws}
    if not futures:
        return
    done, _ = await asyncio.wait(futures, timeout=limit)
    for f in done:
        if not f.cancelled():
            f.exception()


async def close_tracked(client: Client) -> None:
    """``Client.close()``'s: ends every watch, cache, observer and recipe task the
    client tracks, then waits (at most SETTLE_S) until their tasks, and the state
    listeners already dispatched, have finished."""
    tracked = list(client._watches)
    for t in tracked:
        t.cancel()
    await settle([t.aclose() for t in tracked] + client._listeners.pending())


async def close_channels(channels: list[Any]) -> None:
    """Closes grpc.aio channels, then waits (at most SETTLE_S) until the calls they
    cancelled have their status: grpc finishes each stream call in a task of its own
    one step after the close, which a loop stopping next would destroy pending."""
    calls = [call for ch in channels for call in list(getattr(ch, "_active_calls", ()))]
    for ch in channels:
        await ch.close()
    await settle([call.code() for call in calls])


def drain_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What ``asyncio.run`` does as it ends, for a loop of the SDK's own (the sync
    client's) that has stopped: every task still pending (grpc's own, one step from
    done after a close, included) is cancelled and run to its end, at most SETTLE_S,
    so that none is destroyed pending when the loop closes."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=SETTLE_S))
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()
    loop.run_until_complete(loop.shutdown_asyncgens())
