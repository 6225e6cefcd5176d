"""What a watch and a leader observer share: a reader task puts what it reads on a
bounded queue (then the error that ended it, if any, then ``END``); ``next`` takes
from it; ``cancel()`` ends both sides at once; ``async with`` opens and closes."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterator, Generic, TypeVar

from ..errors import ConcordError, ErrorCode, make_error
from ._wait import within

if TYPE_CHECKING:
    from .client import Client

#: Messages a reader may be ahead of its consumer by; then it stops reading (and the
#: server, past its own bounds, cuts the stream with SLOW_CONSUMER, which resumes).
QUEUE_MAX = 1024
#: What a reader puts on the queue last.
END = object()

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

    async def _take(self, timeout: float | None) -> Any:
        """The next item the reader queued; None at the end; raises the error that
        ended the stream (once), or TIMEOUT after ``timeout`` seconds (nothing lost)."""
        if self._task is None and not self._cancelled:
            await self.start()
        if self._done or self._cancelled:
            return None
        try:
            item = await within(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            raise make_error(ErrorCode.TIMEOUT, f"no {self._waits_for} within {timeout} s") from None
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
