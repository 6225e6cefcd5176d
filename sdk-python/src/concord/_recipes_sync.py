"""The blocking twins of ``concord.aio.recipes``: every method hands the aio recipe's
coroutine to the client's loop thread and waits, so the recipes are written once.
``with`` blocks start and stop them. ``Election.run``'s function runs on the caller's
thread (kazoo's); a LeaderSelector's plain take_leadership function on a thread of its
own; latch listeners on the latch's listener thread: never on the I/O loop."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ._blocking_stream import BlockingStream
from .aio import recipes as _r
from .aio.observe import LeaderChange
from .aio.observe import LeaderObserver as _AioLeaderObserver
from .aio.recipes import LatchEvent, Leadership, Lease, Participant, RecipeState
from .errors import ConcordError
from .types import Fence

if TYPE_CHECKING:
    from .sync import Client, _LoopThread

__all__ = [
    "Election",
    "LatchEvent",
    "LeaderChange",
    "LeaderLatch",
    "LeaderObserver",
    "LeaderSelector",
    "Leadership",
    "Lease",
    "Lock",
    "Participant",
    "RecipeState",
    "Semaphore",
    "SemaphoreMutex",
]


class Lock:
    """kazoo's Lock, blocking (see ``concord.aio.Lock``: re-entrant through the same
    object, so threads that must exclude each other use an object each)."""

    def __init__(self, client: Client, name: str, identifier: str | None = None) -> None:
        self._client = client
        self._aio = _r.Lock(client.aio, name, identifier)

    @property
    def name(self) -> str:
        return self._aio.name

    @property
    def is_acquired(self) -> bool:
        return self._aio.is_acquired

    @property
    def hold_count(self) -> int:
        return self._aio.hold_count

    @property
    def lease(self) -> Lease | None:
        return self._aio.lease

    @property
    def token(self) -> int | None:
        return self._aio.token

    @property
    def fence(self) -> Fence | None:
        return self._aio.fence

    def acquire(self, blocking: bool = True, timeout: float | None = None, ephemeral: bool = True) -> bool:
        """kazoo's order: waits its turn: True once held; LockTimeout if not within
        ``timeout`` seconds; ``blocking=False``: False if held by another."""
        return self._client._io.run(self._aio.acquire(blocking, timeout, ephemeral))

    def release(self) -> bool:
        """Releases one level of the hold (the last releases it on the server); False if nothing was held."""
        return self._client._io.run(self._aio.release())

    def cancel(self) -> None:
        """kazoo's ``cancel()``, from any thread: the acquire through this object that
        waits now raises CancelledError (and leaves the queue); with none waiting,
        the next acquire does, once (kazoo's Lock)."""
        self._client.aio_loop.call_soon_threadsafe(self._aio.cancel)

    def validate(self) -> bool:
        """Asks the server whether the hold still holds."""
        return self._client._io.run(self._aio.validate())

    def contenders(self) -> list[str]:
        """The identifiers of the queue's members, holders first."""
        return self._client._io.run(self._aio.contenders())

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class SemaphoreMutex(Lock):
    """Curator's InterProcessSemaphoreMutex, blocking (see
    ``concord.aio.SemaphoreMutex``): not re-entrant, so an acquire in the thread that
    holds it blocks until another thread releases it (for ever if none does)."""

    def __init__(self, client: Client, name: str, identifier: str | None = None) -> None:
        self._client = client
        self._aio = _r.SemaphoreMutex(client.aio, name, identifier)

    def __enter__(self) -> SemaphoreMutex:
        self.acquire()
        return self


class Semaphore:
    """kazoo's Semaphore, blocking (see ``concord.aio.Semaphore``)."""

    def __init__(self, client: Client, name: str, identifier: str | None = None, max_leases: int = 1) -> None:
        self._client = client
        self._aio = _r.Semaphore(client.aio, name, identifier, max_leases)

    @property
    def is_acquired(self) -> bool:
        return self._aio.is_acquired

    @property
    def lease(self) -> Lease | None:
        return self._aio.lease

    @property
    def fence(self) -> Fence | None:
        return self._aio.fence

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """kazoo's order: takes a lease for this object: True; LockTimeout if none was
        free within ``timeout``; ``blocking=False``: False if none is free."""
        return self._client._io.run(self._aio.acquire(blocking, timeout))

    def release(self) -> bool:
        """Gives back ``acquire()``'s lease."""
        return self._client._io.run(self._aio.release())

    def cancel(self) -> None:
        """kazoo's ``cancel()``, from any thread: an ``acquire()`` through this object
        that waits now raises CancelledError (and leaves the queue); a cancel with
        none waiting is forgotten by the next ``acquire()`` (kazoo's Semaphore)."""
        self._client.aio_loop.call_soon_threadsafe(self._aio.cancel)

    def acquire_lease(self, timeout: float | None = None) -> Lease | None:
        """A lease of its own, or None if none was free within ``timeout``."""
        return self._client._io.run(self._aio.acquire_lease(timeout))

    def acquire_many(self, n: int, timeout: float | None = None) -> list[Lease] | None:
        """``n`` leases, all or nothing: None (and none kept) if not all were free
        within ``timeout`` seconds in all; what was taken is given back on errors too."""
        return self._client._io.run(self._aio.acquire_many(n, timeout))

    def return_lease(self, lease: Lease) -> None:
        """Gives back a lease from ``acquire_lease()``."""
        self._client._io.run(self._aio.return_lease(lease))

    def lease_holders(self) -> list[str]:
        """The identifiers of the current holders."""
        return self._client._io.run(self._aio.lease_holders())

    def __enter__(self) -> Semaphore:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class Election:
    """kazoo's Election: ``run(func, *args)`` campaigns, runs ``func`` on the caller's
    thread once elected, then resigns (also if it raises)."""

    def __init__(
        self, client: Client, name: str, identifier: str | None = None, value: bytes | None = None
    ) -> None:
        self._client = client
        self._aio = _r.Election(client.aio, name, identifier, value)

    @property
    def value(self) -> bytes | None:
        """What the candidacy announces (None: the identifier's bytes)."""
        return self._aio.value

    def proclaim(self, value: bytes) -> bool:
        """Announces ``value`` while ``func`` runs (call it from ``func``): True once
        the server has it; False if not leading, and then it is the next run's value."""
        return self._client._io.run(self._aio.proclaim(value))

    @property
    def leader(self) -> Participant | None:
        return self._aio.leader

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Campaigns, runs ``func(*args, **kwargs)`` on this thread once leader,
        resigns; returns its result. None, without running ``func``, if ``cancel()``
        (from another thread) ended the campaign (kazoo's)."""
        if not callable(func):
            raise _r._bad("the leader function is not callable")
        self._aio._cancelled = False
        elected = self._client._io.run(self._aio._elect())
        if elected is None:
            return None
        p, claim = elected
        try:
            return func(*args, **kwargs)
        finally:
            self._client._io.run(self._aio._resign(p, claim))

    def cancel(self) -> None:
        """Stops a campaign that waits (any thread): ``run`` returns None."""
        self._client.aio_loop.call_soon_threadsafe(self._aio.cancel)

    def contenders(self) -> list[str]:
        """The candidates' identifiers, leader first."""
        return self._client._io.run(self._aio.contenders())


class LeaderLatch:
    """Curator's LeaderLatch, blocking (see ``concord.aio.LeaderLatch``)."""

    def __init__(self, client: Client, name: str, id: str | None = None, value: bytes = b"") -> None:
        self._client = client
        self._aio = _r.LeaderLatch(client.aio, name, id, value)

    @property
    def value(self) -> bytes:
        """What its candidacy announces while it leads."""
        return self._aio.value

    def proclaim(self, value: bytes) -> bool:
        """Makes ``value`` what it announces: at once while it leads (True once the
        server has it), else at its next leadership (False)."""
        return self._client._io.run(self._aio.proclaim(value))

    @property
    def id(self) -> str:
        return self._aio.id

    @property
    def state(self) -> RecipeState:
        return self._aio.state

    @property
    def fence(self) -> Fence | None:
        return self._aio.fence

    def add_listener(self, listener: Any) -> None:
        """``listener(event)`` or an object's ``is_leader()`` / ``not_leader()``, on the
        latch's listener thread: it may call the client."""
        self._aio.add_listener(listener)

    def start(self) -> None:
        """Campaigns in a task on the client's loop. Errors: BAD_STATE, NodeExistsError, SessionExpiredError."""
        self._client._io.run(self._aio.start())

    def has_leadership(self) -> bool:
        """Whether it leads now."""
        return self._aio.has_leadership()

    def wait(self, timeout: float | None = None) -> bool:
        """Until it leads: True; False if not within ``timeout``. SessionExpiredError if it ended with its session."""
        return self._client._io.run(self._aio.wait(timeout))

    def get_leader(self) -> Participant | None:
        """The election's leader, or None."""
        return self._client._io.run(self._aio.get_leader())

    def get_participants(self) -> list[Participant]:
        """The candidates in line, leader first."""
        return self._client._io.run(self._aio.get_participants())

    def close(self, notify: bool = False) -> None:
        """Stops campaigning and resigns; listeners hear NOT_LEADER only if ``notify`` and it led."""
        self._client._io.run(self._aio.close(notify))

    def __enter__(self) -> LeaderLatch:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LeaderSelector:
    """Curator's LeaderSelector, blocking: ``take_leadership(leadership)`` runs on a
    thread of its own and checks ``leadership.is_cancelled()`` / ``leadership.wait()``
    (see ``concord.aio.LeaderSelector``)."""

    def __init__(
        self,
        client: Client,
        name: str,
        take_leadership: Callable[[Leadership], Any],
        id: str | None = None,
        auto_requeue: bool = False,
        value: bytes = b"",
    ) -> None:
        self._client = client
        self._aio = _r.LeaderSelector(client.aio, name, take_leadership, id, auto_requeue, value)

    @property
    def value(self) -> bytes:
        """What its candidacy announces while it leads."""
        return self._aio.value

    def proclaim(self, value: bytes) -> bool:
        """Makes ``value`` what it announces (call it from take_leadership's thread,
        or any other): at once while it leads (True once the server has it), else at
        its next leadership (False)."""
        return self._client._io.run(self._aio.proclaim(value))

    @property
    def id(self) -> str:
        return self._aio.id

    @property
    def state(self) -> RecipeState:
        return self._aio.state

    def start(self) -> None:
        """Queues. Errors: BAD_STATE, NodeExistsError, SessionExpiredError."""
        self._client._io.run(self._aio.start())

    def requeue(self) -> bool:
        """Queue again once the current leadership ends; False if already queued or not started."""
        async def requeue() -> bool:
            return self._aio.requeue()

        return self._client._io.run(requeue())

    def has_leadership(self) -> bool:
        """Whether take_leadership runs now (and was not told to stop)."""
        return self._aio.has_leadership()

    def get_leader(self) -> Participant | None:
        """The election's leader, or None."""
        return self._client._io.run(self._aio.get_leader())

    def get_participants(self) -> list[Participant]:
        """The candidates in line, leader first."""
        return self._client._io.run(self._aio.get_participants())

    def close(self, timeout: float | None = _r.CLOSE_WAIT_S) -> bool:
        """Tells take_leadership to stop (``leadership.is_cancelled()`` becomes true,
        ``leadership.wait()`` returns), waits until it has returned, then resigns: True.
        False (and a warning logged) if it still runs after ``timeout`` seconds (None:
        no limit): the selector stays leader and resigns when it returns."""
        return self._client._io.run(self._aio.close(timeout))

    def __enter__(self) -> LeaderSelector:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LeaderObserver(BlockingStream[LeaderChange]):
    """The blocking twin of ``concord.aio.LeaderObserver``: ``for change in observer``
    yields ``LeaderChange``s; ``next(timeout=None)``, ``cancel()`` (any thread),
    ``with c.observe(name) as changes:``. Open at return (``Client.observe``)."""

    def __init__(self, io: _LoopThread, observer: _AioLeaderObserver) -> None:
        super().__init__(io, observer)

    @property
    def name(self) -> str:
        return self._aio.name

    @property
    def last(self) -> LeaderChange | None:
        """The last state delivered (None before the first)."""
        return self._aio.last
