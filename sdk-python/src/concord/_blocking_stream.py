"""What the blocking twins of a watch and a leader observer share: ``next`` runs the
aio stream's ``next`` on the client's loop, iteration ends at its end, ``cancel()``
works from any thread, and ``with`` cancels on the way out."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Iterator, TypeVar

from .errors import ConcordError

if TYPE_CHECKING:
    from .sync import _LoopThread

T = TypeVar("T")
S = TypeVar("S", bound="BlockingStream[Any]")


class BlockingStream(Generic[T]):
    """The blocking twin of an ``aio._stream.QueuedStream`` yielding ``T``s."""

    def __init__(self, io: _LoopThread, stream: Any) -> None:
        self._io = io
        self._aio = stream

    @property
    def resumes(self) -> int:
        """How many times the stream was opened again after a break."""
        return int(self._aio.resumes)

    @property
    def last_error(self) -> ConcordError | None:
        """The error that broke the stream last (it may have resumed since)."""
        error: ConcordError | None = self._aio.last_error
        return error

    def next(self, timeout: float | None = None) -> T | None:
        """The next item; None once the stream has ended; raises the error that ended
        it, or ``concord.TimeoutError`` after ``timeout`` s, losing nothing."""
        item: T | None = self._io.run(self._aio.next(timeout))
        return item

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        item = self.next()
        if item is None:
            raise StopIteration
        return item

    def cancel(self) -> None:
        """Ends the stream; an iteration waiting in another thread stops. Any thread."""
        try:
            self._io.loop.call_soon_threadsafe(self._aio.cancel)
        except RuntimeError:
            pass  # the client's loop is closed: the stream ended with it

    def __enter__(self: S) -> S:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cancel()
