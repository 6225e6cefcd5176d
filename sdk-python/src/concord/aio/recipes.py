"""Recipes on the server's Lock and Election services, owned by the client's session
(docs/sdk.md "Recipes"; the Rust SDK's locks/, latch.rs, selector.rs).

::

    Lock, Semaphore ─ Acquire / Release on the Lock service (the server queues, wakes,
    SemaphoreMutex    fences); a wait ends with SessionExpiredError when the session is lost
    Election        ─ kazoo's: Campaign, run func, Resign
    LeaderLatch     ─ a task: Campaign ─▶ leading ─SUSPENDED─▶ not leading ─RECONNECTED─▶
                      Leader(name) still ours? lead again : Campaign again; LOST ends it;
                      while leading, a LeaderObserver (observe.py) shows another leader ─▶
                      Campaign again
    LeaderSelector  ─ a task: Campaign ─▶ take_leadership (a task, or a thread for a plain
                      function) ─returns─▶ Resign, queue again if auto_requeue / requeue();
                      the LeaderObserver shows another leader ─▶ take_leadership told to stop
    values          ─ sent with each Campaign; proclaim() sends Proclaim(key, term, value)
                      while leading, and a leadership won with another value proclaims
                      the recipe's as it begins

Nothing here polls: waits are the server's (a Campaign or Acquire that answers when
the place leads or holds). The recipes hear the session's states through an ``async
def`` client listener, which runs on the loop; user callbacks never do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import itertools
import logging
import os
import threading
import time
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from .._listeners import Listeners
from .._proto import election_pb2, election_pb2_grpc, lock_pb2, lock_pb2_grpc
from ..errors import (
    BadArgumentsError,
    CancelledError as AcquireCancelled,
    ConcordError,
    ErrorCode,
    FencedError,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    Origin,
    SessionExpiredError,
    make_error,
)
from ..types import Fence, State
from ._stream import settle
from ._wait import within

if TYPE_CHECKING:
    from .client import Client, _Endpoint

#: A wait with no deadline of its own (the server waits until the call is cancelled).
_FOREVER_S = 1e9
#: Added to a timed wait's deadline so that the server's TIMEOUT comes first.
_MARGIN_S = 5.0
#: How long a LeaderSelector's close() waits, by default, for take_leadership to return.
CLOSE_WAIT_S = 10.0
#: First and longest delay between tries of a failed Campaign, Acquire or check.
_RETRY_MIN_S = 0.02
_RETRY_MAX_S = 1.0

_handles = itertools.count(1)


def _retry_delay(failures: int) -> float:
    if failures <= 0:
        return 0.0
    return float(min(_RETRY_MIN_S * (2 ** min(failures - 1, 16)), _RETRY_MAX_S))


def _transient(err: ConcordError) -> bool:
    """A failure worth sending the call again for (the place is adopted by the retry);
    the server's own TIMEOUT answer is final."""
    if err.origin is Origin.SERVER and err.code is ErrorCode.TIMEOUT:
        return False
    return err.retry_safe or err.indeterminate


def _lock_stub(ep: _Endpoint) -> lock_pb2_grpc.LockStub:
    stub = getattr(ep, "_lock_stub", None)
    if stub is None:
        stub = lock_pb2_grpc.LockStub(ep.channel)
        ep._lock_stub = stub  # type: ignore[attr-defined]
    return stub


def _election_stub(ep: _Endpoint) -> election_pb2_grpc.ElectionStub:
    stub = getattr(ep, "_election_stub", None)
    if stub is None:
        stub = election_pb2_grpc.ElectionStub(ep.channel)
        ep._election_stub = stub  # type: ignore[attr-defined]
    return stub


def _session_lost() -> SessionExpiredError:
    return SessionExpiredError(
        ErrorCode.SESSION_EXPIRED, "the recipe's session was lost", origin=Origin.CLIENT
    )


# -- the session's states, heard on the loop --------------------------------------


class _States:
    """One ``async def`` listener per client that hands every state, on the loop, to the
    recipes that subscribed (plain functions, called in order)."""

    def __init__(self, client: Client) -> None:
        self._subs: list[Callable[[State], None]] = []
        client.add_listener(self._on_state)

    async def _on_state(self, state: State) -> None:
        for fn in list(self._subs):
            fn(state)

    def subscribe(self, fn: Callable[[State], None]) -> None:
        self._subs.append(fn)

    def unsubscribe(self, fn: Callable[[State], None]) -> None:
        if fn in self._subs:
            self._subs.remove(fn)


_STATES: weakref.WeakKeyDictionary[Client, _States] = weakref.WeakKeyDictionary()


def _states(client: Client) -> _States:
    s = _STATES.get(client)
    if s is None:
        s = _STATES[client] = _States(client)
    return s


async def _unless_lost(client: Client, session_id: int, coro: Awaitable[Any]) -> Any:
    """Awaits ``coro``; SessionExpiredError (and ``coro`` cancelled) as soon as the
    session ``session_id`` ends, even while no server answers."""
    if client.session_id != session_id or client.state.ended:
        if inspect.iscoroutine(coro):
            coro.close()
        raise _session_lost()
    loop = asyncio.get_running_loop()
    lost: asyncio.Future[None] = loop.create_future()

    def on_state(state: State) -> None:
        if state.ended and not lost.done():
            lost.set_result(None)

    states = _states(client)
    states.subscribe(on_state)
    task = asyncio.ensure_future(coro)
    try:
        await asyncio.wait([task, lost], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        raise _session_lost()
    finally:
        states.unsubscribe(on_state)
        if not task.done():
            task.cancel()
        if not lost.done():
            lost.cancel()


# -- checks of kazoo-shaped arguments ----------------------------------------------


def _bad(message: str) -> BadArgumentsError:
    return BadArgumentsError(ErrorCode.BAD_ARGUMENTS, message, origin=Origin.CLIENT)


def _check_name(kind: str, name: Any) -> str:
    """A lock's or election's name: one path segment, as the server wants it. kazoo
    and Curator take a path (``"/locks/x"``) where this takes a name: refused here,
    at construction, rather than by the server at the first call."""
    if not isinstance(name, str):
        raise _bad(f"{kind} name must be a str, got {type(name).__name__}")
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        hint = name.rstrip("/").rsplit("/", 1)[-1] if "/" in name else ""
        tip = f' (kazoo takes a path here; Concord a name, e.g. "{hint}")' if hint not in ("", ".", "..") else ""
        raise _bad(f"{kind} name {name[:100]!r} must be one non-empty path segment{tip}")
    return name


def _check_identifier(identifier: Any) -> str | None:
    if identifier is not None and not isinstance(identifier, str):
        raise _bad(f"identifier must be a str or None, got {type(identifier).__name__} {identifier!r}")
    return identifier


def _check_acquire(blocking: Any, timeout: Any, ephemeral: Any) -> None:
    """kazoo's ``acquire(blocking=True, timeout=None, ephemeral=True)``: an older call
    with the timeout first (``acquire(5)``) fails here instead of waiting for ever."""
    if not isinstance(blocking, bool):
        raise _bad(
            f"acquire(blocking=True, timeout=None): blocking must be a bool, got {blocking!r}"
            " (pass the timeout as timeout=)"
        )
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
        raise _bad(f"acquire timeout must be a number of seconds or None, got {timeout!r}")
    if timeout is not None and timeout < 0:
        raise _bad("negative timeout")
    if ephemeral is not True:
        raise _bad("ephemeral=False is not supported: a hold is always its session's (kazoo's ephemeral=True)")


def _lock_timeout(kind: str, name: str, timeout: float | None) -> LockTimeout:
    return LockTimeout(
        ErrorCode.TIMEOUT, f"failed to acquire {kind} {name!r} after {timeout} s", origin=Origin.CLIENT
    )


def _acquire_cancelled(kind: str, name: str) -> AcquireCancelled:
    return AcquireCancelled(
        ErrorCode.BAD_STATE, f"the acquire of {kind} {name!r} was cancelled by cancel()", origin=Origin.CLIENT
    )


# -- claims of participant ids -----------------------------------------------------

_CLAIMS: set[tuple[int, str, str]] = set()
_CLAIMS_LOCK = threading.Lock()


def _claim(session_id: int, name: str, pid: str) -> tuple[int, str, str]:
    """Claims ``pid`` in election ``name`` for the session: two recipes of one session
    with one id would share a place in line (a retried Campaign adopts it)."""
    key = (session_id, name, pid)
    with _CLAIMS_LOCK:
        if key in _CLAIMS:
            raise NodeExistsError(
                ErrorCode.NODE_EXISTS,
                f"participant id {pid!r} of election {name!r} is in use by another recipe of this session",
                origin=Origin.CLIENT,
            )
        _CLAIMS.add(key)
    return key


def _unclaim(key: tuple[int, str, str] | None) -> None:
    if key is not None:
        with _CLAIMS_LOCK:
            _CLAIMS.discard(key)


def _unique_id(kind: str, session_id: int) -> str:
    return f"{kind}-{session_id:x}-{os.getpid()}-{next(_handles)}"


# -- locks -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Lease:
    """One hold of a lock or semaphore: its queue node (``key``) and fencing token."""

    name: str
    key: str
    token: int
    session_id: int

    @property
    def fence(self) -> Fence:
        """Pass as ``fence=`` on writes: the server rejects them (FencedError) once the
        hold is over."""
        return Fence(self.key, self.token)


async def _acquire(
    client: Client, name: str, owner_id: str, permits: int, timeout: float | None
) -> Lease | None:
    """One place in ``name``'s queue until it holds (a Lease) or ``timeout`` passes
    (None; the server leaves no waiter). Transient failures are sent again with the
    same owner id, which adopts the place."""
    if timeout is not None and timeout < 0:
        raise BadArgumentsError(ErrorCode.BAD_ARGUMENTS, "negative timeout", origin=Origin.CLIENT)
    session_id = client._live_session_id()
    deadline = None if timeout is None else time.monotonic() + timeout
    failures = 0
    while True:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        timeout_ms = 0 if remaining is None else max(int(remaining * 1000), 1)
        req = lock_pb2.AcquireRequest(
            name=name, session_id=session_id, timeout_ms=timeout_ms, owner_id=owner_id, permits=permits
        )
        limit = _FOREVER_S if remaining is None else remaining + (client.call_timeout or _MARGIN_S)
        try:
            resp = await _unless_lost(
                client,
                session_id,
                client._attempt(lambda ep: _lock_stub(ep).Acquire, req, write=True, limit=limit),
            )
            return Lease(name, str(resp.key), int(resp.token), session_id)
        except asyncio.CancelledError:
            await asyncio.shield(_flush_acquire(client, name, owner_id, permits, session_id))
            raise
        except ConcordError as err:
            if err.code is ErrorCode.TIMEOUT and err.origin is Origin.SERVER:
                return None
            if not _transient(err):
                raise
            if deadline is not None and time.monotonic() >= deadline:
                # Our place may be queued still: leave it.
                await _leave(client, name, owner_id, session_id)
                return None
            failures += 1
            await asyncio.sleep(_retry_delay(failures))


async def _flush_acquire(client: Client, name: str, owner_id: str, permits: int, session_id: int) -> None:
    """After an Acquire was cancelled in flight. The server leaves no waiter behind a
    cancelled call, but one it answered as the client cancelled holds the lock, and
    the answer is lost. An Acquire with the same owner id adopts that place (or makes
    one): with a 1 ms timeout the server removes it unless it holds; if it holds, it
    is released. Best effort: failures leave the place to the session's end."""
    if client.session_id != session_id or client.state.ended:
        return
    req = lock_pb2.AcquireRequest(
        name=name, session_id=session_id, timeout_ms=1, owner_id=owner_id, permits=permits
    )
    try:
        resp = await client._attempt(
            lambda ep: _lock_stub(ep).Acquire, req, write=True, limit=client.call_timeout or _MARGIN_S
        )
        await _release(client, str(resp.key), int(resp.token))
    except ConcordError:
        pass


async def _leave(client: Client, name: str, owner_id: str, session_id: int) -> None:
    """Releases any place of ``owner_id`` in the queue (best effort)."""
    try:
        resp = await client._call(
            lambda ep: _lock_stub(ep).Waiters, lock_pb2.WaitersRequest(name=name), write=False
        )
        for e in resp.entries:
            if e.owner_id == owner_id and e.session_id == session_id:
                await _release(client, str(e.key), int(e.token))
    except ConcordError:
        pass


async def _release(client: Client, key: str, token: int) -> None:
    """Releases a hold; one already gone (released, or its session ended) is not an error."""
    try:
        await client._call(
            lambda ep: _lock_stub(ep).Release,
            lock_pb2.ReleaseRequest(key=key, token=token),
            write=True,
            dedup=True,
        )
    except NoNodeError:
        pass


def _owner_of(owner_id: str) -> str:
    """The identifier part of an owner id (``identifier#lock-...``)."""
    ident, sep, _ = owner_id.rpartition("#")
    return ident if sep else owner_id


class Lock:
    """kazoo's ``Lock`` (Curator's InterProcessMutex) on the server's Lock service.

    ``async with c.Lock("job"):`` or ``await acquire(timeout=None)`` / ``await
    release()``. While held, ``token`` and ``fence`` are the hold's fencing token: pass
    ``fence=lock.fence`` on writes, which the server rejects with FencedError once the
    hold is over (released, or the session lost).

    **Re-entrant through the same object** (as the Rust SDK's Mutex, unlike kazoo's
    Lock): an acquire through an object that holds the lock succeeds at once and
    counts; only the last release releases it on the server. An object is one owner:
    tasks (or threads, with the sync client) that must exclude each other use an
    object each. One acquire at a time goes to the server per object.

    The session owns the hold: after LOST it is gone (``is_acquired`` false, a waiting
    acquire and every new one fail with SessionExpiredError). While SUSPENDED it is
    kept, but this client cannot know whether it still holds: write only with the
    fence. ``identifier`` is shown by ``contenders()``.

    ``cancel()`` (kazoo's) ends an acquire that waits: it raises CancelledError and
    leaves no place in the queue.
    """

    _kind = "lock"

    def __init__(self, client: Client, name: str, identifier: str | None = None, *, _permits: int = 1) -> None:
        self.client = client
        self.name = _check_name(self._kind.replace("-", " "), name)
        self.identifier = _check_identifier(identifier) or ""
        self._permits = _permits
        self._handle = next(_handles)
        self._calls = itertools.count(1)
        self._lease: Lease | None = None
        self._count = 0
        self._serial: asyncio.Lock | None = None
        #: The acquires waiting on the server now, and whether ``cancel()`` ended each.
        self._waits: dict[asyncio.Future[Lease | None], bool] = {}
        #: ``cancel()`` came while no acquire waited: the next one is cancelled (kazoo's).
        self._cancel_next = False

    def _owner_id(self) -> str:
        base = f"{self._kind}-{os.getpid()}-{self._handle}-{next(self._calls)}"
        return f"{self.identifier}#{base}" if self.identifier else base

    @property
    def lease(self) -> Lease | None:
        """The current hold, or None."""
        return self._lease if self.is_acquired else None

    @property
    def is_acquired(self) -> bool:
        """True while this object holds the lock and its session lives."""
        lease = self._lease
        return (
            lease is not None
            and self.client.session_id == lease.session_id
            and not self.client.state.ended
        )

    @property
    def hold_count(self) -> int:
        """How many acquires the current hold counts (0: not held)."""
        return self._count if self.is_acquired else 0

    @property
    def token(self) -> int | None:
        """The hold's fencing token (the zxid that created its queue node), or None."""
        lease = self.lease
        return None if lease is None else lease.token

    @property
    def fence(self) -> Fence | None:
        """The hold's Fence for ``fence=`` on writes, or None when not held."""
        lease = self.lease
        return None if lease is None else lease.fence

    async def acquire(self, blocking: bool = True, timeout: float | None = None, ephemeral: bool = True) -> bool:
        """kazoo's ``acquire(blocking=True, timeout=None, ephemeral=True)``: waits its
        turn until the lock is held: True. Not within ``timeout`` seconds (None: no
        limit): LockTimeout, and no longer queued. ``blocking=False`` tries once:
        False if held by another. Errors: BadArgumentsError for arguments of another
        shape (``acquire(5)``: blocking must be a bool; ``ephemeral=False``),
        SessionExpiredError (no session, or lost meanwhile), CancelledError
        (``cancel()``)."""
        _check_acquire(blocking, timeout, ephemeral)
        if self._serial is None:
            self._serial = asyncio.Lock()
        async with self._serial:
            self._take_cancel()
            if self.is_acquired:
                self._count += 1
                return True
            self._lease, self._count = None, 0
            owner = self._owner_id()
            lease = await self._wait(owner, timeout) if blocking else await self._try(owner)
            if lease is None:
                if not blocking:
                    return False
                raise _lock_timeout(self._kind.replace("-", " "), self.name, timeout)
            self._lease, self._count = lease, 1
            return True

    def cancel(self) -> None:
        """kazoo's ``cancel()``: ends the acquires through this object that wait now;
        each raises CancelledError and leaves no place in the queue. With none
        waiting (or one that got the lock just now), the next acquire raises it
        instead, once, as kazoo's Lock does, so that a cancel sent just before the
        acquire waits is not lost. Call it on the client's loop (the sync twin's
        ``cancel()`` may be called from any thread)."""
        ended = False
        for waiting in self._waits:
            if waiting.cancel():
                self._waits[waiting] = True
                ended = True
        if not ended:
            self._cancel_next = True

    def _take_cancel(self) -> None:
        """Raises CancelledError if a ``cancel()`` is pending for the next acquire."""
        if self._cancel_next:
            self._cancel_next = False
            raise _acquire_cancelled(self._kind.replace("-", " "), self.name)

    async def _wait(self, owner: str, timeout: float | None) -> Lease | None:
        """``_acquire`` as a task of its own, which ``cancel()`` may end. The task
        awaiting it cancelled just as it got the lock (it has finished, this task not
        yet resumed): the hold is released, as ``_acquire`` releases one whose answer
        a cancellation lost."""
        waiting = asyncio.ensure_future(_acquire(self.client, self.name, owner, self._permits, timeout))
        self._waits[waiting] = False
        try:
            return await waiting
        except asyncio.CancelledError:
            if waiting.done() and not waiting.cancelled() and waiting.exception() is None:
                lease = waiting.result()
                if lease is not None:
                    try:
                        await asyncio.shield(_release(self.client, lease.key, lease.token))
                    except ConcordError:
                        pass  # the hold goes with the session at worst
            elif self._waits.get(waiting) and not _being_cancelled():
                raise _acquire_cancelled(self._kind.replace("-", " "), self.name) from None
            raise
        finally:
            self._waits.pop(waiting, None)

    async def _try(self, owner: str) -> Lease | None:
        session_id = self.client._live_session_id()
        req = lock_pb2.AcquireRequest(
            name=self.name, session_id=session_id, owner_id=owner, permits=self._permits
        )
        try:
            resp = await self.client._call(lambda ep: _lock_stub(ep).TryAcquire, req, write=True, dedup=True)
        except ConcordError as err:
            if err.code is ErrorCode.LOCK_HELD:
                return None
            raise
        return Lease(self.name, str(resp.key), int(resp.token), session_id)

    async def release(self) -> bool:
        """Releases one level of the hold; the last one releases it on the server.
        False if nothing was held (a hold lost with its session releases nothing)."""
        lease = self._lease
        if lease is None or self._count == 0:
            return False
        self._count -= 1
        if self._count > 0 and self.is_acquired:
            return True
        self._lease, self._count = None, 0
        if self.client.session_id != lease.session_id or self.client.state.ended:
            return False
        await _release(self.client, lease.key, lease.token)
        return True

    async def validate(self) -> bool:
        """Asks the server whether the hold still holds."""
        lease = self._lease
        if lease is None:
            return False
        resp = await self.client._call(
            lambda ep: _lock_stub(ep).Validate,
            lock_pb2.ValidateRequest(key=lease.key, token=lease.token),
            write=False,
        )
        return bool(resp.valid)

    async def contenders(self) -> list[str]:
        """The identifiers of the queue's members, holders first (kazoo's)."""
        return [_owner_of(e.owner_id) for e in await _waiters(self.client, self.name)]

    async def __aenter__(self) -> Lock:
        await self.acquire()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()


class SemaphoreMutex(Lock):
    """Curator's InterProcessSemaphoreMutex: a fair lock that is **not re-entrant**
    (the Rust SDK's SemaphoreMutex).

    Every acquire queues on the server with a place of its own, so a second acquire
    through an object that holds the lock waits, like anyone else's, until the hold is
    released (by ``release()`` from another task or thread); with a timeout it returns
    False. Awaiting it where the lock is held therefore waits for ever, as Curator's
    does. ``hold_count`` is 0 or 1. Fences, ``validate()``, ``contenders()`` and the
    session's states: as Lock's.
    """

    _kind = "semaphore-mutex"

    async def acquire(self, blocking: bool = True, timeout: float | None = None, ephemeral: bool = True) -> bool:
        """As Lock's (``acquire(blocking=True, timeout=None)``): waits its turn until
        this object holds the lock: True; LockTimeout if not within ``timeout`` seconds
        (None: no limit), and then no longer queued. An acquire while this object
        holds the lock waits for its release. ``blocking=False`` tries once (False if
        held). Errors: BadArgumentsError, SessionExpiredError, CancelledError
        (``cancel()``)."""
        _check_acquire(blocking, timeout, ephemeral)
        self._take_cancel()
        owner = self._owner_id()
        lease = await self._wait(owner, timeout) if blocking else await self._try(owner)
        if lease is None:
            if not blocking:
                return False
            raise _lock_timeout("semaphore mutex", self.name, timeout)
        # The server holds one owner at a time: any hold of this object was released.
        self._lease, self._count = lease, 1
        return True

    async def __aenter__(self) -> SemaphoreMutex:
        await self.acquire()
        return self


async def _waiters(client: Client, name: str) -> list[lock_pb2.LockEntry]:
    resp = await client._call(
        lambda ep: _lock_stub(ep).Waiters, lock_pb2.WaitersRequest(name=name), write=False
    )
    return list(resp.entries)


class Semaphore:
    """kazoo's ``Semaphore`` (Curator's InterProcessSemaphoreV2): at most
    ``max_leases`` holders of ``name`` at once, each lease with its own fencing token.

    ``async with c.Semaphore("db", 3):`` holds one lease for the block (``acquire()`` /
    ``release()``, ``lease``, ``fence``); ``acquire_lease()`` returns a Lease of its
    own to give back with ``return_lease()``, for several leases through one object.
    Every user of a name gives the same ``max_leases`` (BadArgumentsError otherwise).
    Leases are the session's, as Lock holds are (see Lock).
    """

    def __init__(self, client: Client, name: str, identifier: str | None = None, max_leases: int = 1) -> None:
        _check_name("semaphore", name)
        _check_identifier(identifier)
        if isinstance(max_leases, bool) or not isinstance(max_leases, int):
            raise _bad(f"max_leases must be an int, got {max_leases!r}")
        if not 1 <= max_leases <= 1024:
            raise BadArgumentsError(ErrorCode.BAD_ARGUMENTS, "max_leases must be 1..1024", origin=Origin.CLIENT)
        self.client = client
        self.name = name
        self.max_leases = max_leases
        self._lock = Lock(client, name, identifier, _permits=max_leases)
        self._lock._kind = "semaphore"

    @property
    def is_acquired(self) -> bool:
        """True while ``acquire()``'s lease is held."""
        return self._lock.is_acquired

    @property
    def lease(self) -> Lease | None:
        return self._lock.lease

    @property
    def fence(self) -> Fence | None:
        return self._lock.fence

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """kazoo's ``acquire(blocking=True, timeout=None)``: takes a lease for this
        object (at once if it holds one): True; LockTimeout if none was free within
        ``timeout`` (None: no limit); ``blocking=False``: False if none is free;
        CancelledError if ``cancel()`` ended the wait."""
        self._lock._cancel_next = False  # kazoo's: a cancel() before an acquire is forgotten
        return await self._lock.acquire(blocking, timeout)

    def cancel(self) -> None:
        """kazoo's ``cancel()``: ends an ``acquire()`` through this object that waits
        now (CancelledError; no place left in the queue); unlike Lock's, an earlier
        ``cancel()`` does not cancel the next ``acquire()`` (kazoo's Semaphore).
        ``acquire_lease`` and ``acquire_many`` are not affected: cancel their task,
        or give a timeout. Call it on the client's loop."""
        self._lock.cancel()

    async def release(self) -> bool:
        """Gives back ``acquire()``'s lease."""
        lease = self._lock._lease
        self._lock._count = min(self._lock._count, 1)
        return await self._lock.release() if lease is not None else False

    async def acquire_lease(self, timeout: float | None = None) -> Lease | None:
        """A lease of its own (each call one more), or None if none was free in time."""
        return await _acquire(self.client, self.name, self._lock._owner_id(), self.max_leases, timeout)

    async def acquire_many(self, n: int, timeout: float | None = None) -> list[Lease] | None:
        """``n`` leases of their own, all or nothing: taken one after the other within
        ``timeout`` seconds in all (None: no limit); None if not all were free in time,
        and then the ones taken are given back, as they are when an error (raised) or a
        cancellation ends the wait. Errors: BadArgumentsError if ``n`` is not
        1..max_leases, SessionExpiredError."""
        if not 1 <= n <= self.max_leases:
            raise BadArgumentsError(
                ErrorCode.BAD_ARGUMENTS, f"{n} leases asked of {self.max_leases}", origin=Origin.CLIENT
            )
        if timeout is not None and timeout < 0:
            raise BadArgumentsError(ErrorCode.BAD_ARGUMENTS, "negative timeout", origin=Origin.CLIENT)
        deadline = None if timeout is None else time.monotonic() + timeout
        leases: list[Lease] = []
        done = False
        try:
            while len(leases) < n:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                lease = await self.acquire_lease(left)
                if lease is None:
                    return None
                leases.append(lease)
            done = True
            return leases
        finally:
            if not done and leases:
                await asyncio.shield(self._return_quietly(leases))

    async def _return_quietly(self, leases: list[Lease]) -> None:
        for lease in leases:
            try:
                await self.return_lease(lease)
            except ConcordError:
                pass  # the lease goes with the session at worst

    async def return_lease(self, lease: Lease) -> None:
        """Gives back a lease from ``acquire_lease()`` (one already gone is not an error)."""
        if self.client.session_id == lease.session_id and not self.client.state.ended:
            await _release(self.client, lease.key, lease.token)

    async def lease_holders(self) -> list[str]:
        """The identifiers of the current holders (kazoo's)."""
        resp = await self.client._call(
            lambda ep: _lock_stub(ep).Holder, lock_pb2.HolderRequest(name=self.name), write=False
        )
        return [_owner_of(e.owner_id) for e in resp.holders]

    async def __aenter__(self) -> Semaphore:
        await self.acquire()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()


# -- elections ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Participant:
    """A candidate of an election (Curator's Participant, with the server's facts)."""

    #: Its participant id.
    id: str
    #: Whether it leads.
    is_leader: bool
    #: Its candidacy's node, and the term (the zxid that created it): a Fence.
    key: str
    term: int
    session_id: int
    value: bytes

    @property
    def fence(self) -> Fence:
        return Fence(self.key, self.term)

    @classmethod
    def of(cls, info: election_pb2.LeaderInfo, is_leader: bool) -> Participant:
        return cls(
            str(info.participant_id), is_leader, str(info.key), int(info.term),
            int(info.session_id), bytes(info.value),
        )


async def _leader(client: Client, name: str) -> Participant | None:
    resp = await client._call(
        lambda ep: _election_stub(ep).Leader, election_pb2.LeaderRequest(election=name), write=False
    )
    return Participant.of(resp.leader, True) if resp.HasField("leader") else None


async def _participants(client: Client, name: str) -> list[Participant]:
    resp = await client._call(
        lambda ep: _election_stub(ep).Participants,
        election_pb2.ParticipantsRequest(election=name),
        write=False,
    )
    return [Participant.of(p, i == 0) for i, p in enumerate(resp.participants)]


async def _campaign(client: Client, name: str, session_id: int, pid: str, value: bytes) -> Participant:
    """One Campaign, waiting until first in line (no deadline: cancel it to leave)."""
    return (await _campaign_at(client, name, session_id, pid, value))[0]


async def _campaign_at(
    client: Client, name: str, session_id: int, pid: str, value: bytes
) -> tuple[Participant, int]:
    """``_campaign``, with the zxid at which the candidacy led (the answer's header)."""
    req = election_pb2.CampaignRequest(election=name, session_id=session_id, participant_id=pid, value=value)
    try:
        resp = await _unless_lost(
            client,
            session_id,
            client._attempt(lambda ep: _election_stub(ep).Campaign, req, write=True, limit=_FOREVER_S),
        )
    except asyncio.CancelledError:
        await asyncio.shield(_flush_campaign(client, name, session_id, pid))
        raise
    zxid = int(resp.header.zxid)
    client._saw(zxid)
    return Participant.of(resp.leader, True), zxid


async def _deposed(client: Client, name: str, p: Participant, since: int) -> Participant | None:
    """Follows election ``name``'s leader (the public ``LeaderObserver``, from zxid
    ``since``, at which ``p`` led) until a state shows another leader, or none: then
    returns ``p`` (its candidacy was resigned by someone else, or its node is gone).
    The observer resumes by itself; None if an error no retry fixes ends it (the
    caller leads on, as without observation)."""
    from .observe import LeaderObserver

    obs = LeaderObserver(client, name, since=since, _patient=True)
    try:
        async for change in obs:
            leader = change.leader
            if leader is None or leader.key != p.key or leader.term != p.term:
                return p
    except ConcordError as err:
        logging.getLogger("concord").warning(
            "cannot observe election %r (%s): its leader is not followed", name, err
        )
    finally:
        obs.cancel()
    return None


async def _flush_campaign(client: Client, name: str, session_id: int, pid: str) -> None:
    """After a Campaign was cancelled in flight: one the server answered (leader) as
    the client cancelled keeps its candidacy, and the answer is lost. A Campaign with
    the same id adopts that place (or makes one): with a 1 ms timeout the server
    removes it unless it leads; if it leads, it resigns. Best effort."""
    if client.session_id != session_id or client.state.ended:
        return
    req = election_pb2.CampaignRequest(
        election=name, session_id=session_id, participant_id=pid, timeout_ms=1
    )
    try:
        resp = await client._attempt(
            lambda ep: _election_stub(ep).Campaign, req, write=True, limit=client.call_timeout or _MARGIN_S
        )
        await _resign(client, str(resp.leader.key), int(resp.leader.term))
    except ConcordError:
        pass


async def _campaign_retrying(client: Client, name: str, session_id: int, pid: str, value: bytes) -> Participant:
    failures = 0
    while True:
        try:
            return await _campaign(client, name, session_id, pid, value)
        except ConcordError as err:
            if not _transient(err):
                raise
            failures += 1
            await asyncio.sleep(_retry_delay(failures))


async def _resign(client: Client, key: str, term: int) -> None:
    try:
        await client._call(
            lambda ep: _election_stub(ep).Resign,
            election_pb2.ResignRequest(key=key, term=term),
            write=True,
            dedup=True,
        )
    except NoNodeError:
        pass


async def _proclaim(client: Client, key: str, term: int, value: bytes) -> None:
    """Announces ``value`` for the leadership (key, term). Errors: FencedError when it
    no longer leads. Sent again after a transport failure (announcing a value twice
    is announcing it once)."""
    await client._call(
        lambda ep: _election_stub(ep).Proclaim,
        election_pb2.ProclaimRequest(key=key, term=term, value=bytes(value)),
        write=True,
        dedup=True,
    )


async def _resign_all(client: Client, name: str, session_id: int, pid: str) -> None:
    """Resigns every candidacy of (session, id) the server lists."""
    for p in await _participants(client, name):
        if p.session_id == session_id and p.id == pid:
            await _resign(client, p.key, p.term)


class Election:
    """kazoo's ``Election``: ``await run(func, *args)`` campaigns as ``identifier``,
    runs ``func`` once elected, then resigns (also if ``func`` raises). ``func`` may be
    an ``async def`` (awaited) or a plain function (run on a thread, off the loop).
    ``func`` is not stopped on SUSPENDED or LOST: use LeaderSelector for that, or write
    with ``leader.fence`` (``Election.leader`` while ``func`` runs). The candidacy
    announces ``value`` (None: the identifier's bytes, which kazoo's contenders read);
    ``await proclaim(value)`` while ``func`` runs changes it."""

    def __init__(
        self, client: Client, name: str, identifier: str | None = None, value: bytes | None = None
    ) -> None:
        self.client = client
        self.name = _check_name("election", name)
        self.identifier = _check_identifier(identifier)
        #: What the candidacy announces while it leads (None: the identifier's bytes).
        self.value = None if value is None else bytes(value)
        #: The candidacy while ``func`` runs.
        self.leader: Participant | None = None
        self._campaign: asyncio.Task[Participant] | None = None
        self._cancelled = False

    async def _elect(self) -> tuple[Participant, tuple[int, str, str]] | None:
        """Campaigns until it leads: the candidacy and its claim; None if ``cancel()``
        ended the campaign (the task running it being cancelled raises, as ever)."""
        session_id = self.client._live_session_id()
        pid = self.identifier or _unique_id("election", session_id)
        claim = _claim(session_id, self.name, pid)
        try:
            if self._cancelled:
                _unclaim(claim)
                return None
            self._campaign = asyncio.ensure_future(
                _campaign_retrying(
                    self.client, self.name, session_id, pid, pid.encode() if self.value is None else self.value
                )
            )
            try:
                p = await self._campaign
            except asyncio.CancelledError:
                if self._cancelled and not _being_cancelled():
                    _unclaim(claim)
                    return None
                raise
        except BaseException:
            _unclaim(claim)
            raise
        finally:
            self._campaign = None
        self.leader = p
        return p, claim

    async def _resign(self, p: Participant, claim: tuple[int, str, str]) -> None:
        self.leader = None
        try:
            if self.client.session_id == p.session_id and not self.client.state.ended:
                await _resign(self.client, p.key, p.term)
        finally:
            _unclaim(claim)

    async def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Campaigns, runs ``func(*args, **kwargs)`` while leader, resigns; returns what
        ``func`` returned. None, without running ``func``, if ``cancel()`` ended the
        campaign (kazoo's)."""
        if not callable(func):
            raise _bad("the leader function is not callable")
        self._cancelled = False
        elected = await self._elect()
        if elected is None:
            return None
        p, claim = elected
        try:
            if inspect.iscoroutinefunction(func):
                return await func(*args, **kwargs)
            return await asyncio.to_thread(func, *args, **kwargs)
        finally:
            await self._resign(p, claim)

    async def proclaim(self, value: bytes) -> bool:
        """Announces ``value`` (``get_leader()`` and observers show it) while ``func``
        runs: True once the server has it; False if not leading now (or no longer: the
        server refused it), and then it is the value of the next ``run``."""
        self.value = bytes(value)
        p = self.leader
        if p is None:
            return False
        try:
            await _proclaim(self.client, p.key, p.term, self.value)
        except FencedError:
            return False
        if self.leader is p:
            self.leader = dataclasses.replace(p, value=self.value)
        return True

    def cancel(self) -> None:
        """Stops a campaign that waits (kazoo's): ``run`` returns None. A ``func``
        that runs already is not stopped (kazoo's)."""
        self._cancelled = True
        if self._campaign is not None:
            self._campaign.cancel()

    async def contenders(self) -> list[str]:
        """The candidates' identifiers, leader first (kazoo's)."""
        return [p.id for p in await _participants(self.client, self.name)]


def _being_cancelled() -> bool:
    """Whether the running task is being cancelled (Python 3.11's ``cancelling``;
    before it, a CancelledError is taken as the task's own only without ``cancel()``)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False


class RecipeState(str, enum.Enum):
    """Where a latch or selector is in its life (Curator's)."""

    LATENT = "LATENT"
    STARTED = "STARTED"
    CLOSED = "CLOSED"


class LatchEvent(str, enum.Enum):
    """A change of a latch's leadership (Curator's LeaderLatchListener)."""

    IS_LEADER = "IS_LEADER"
    NOT_LEADER = "NOT_LEADER"


def _as_latch_listener(listener: Any) -> Callable[[LatchEvent], Any]:
    """A callable taking a LatchEvent, from one, or from an object with ``is_leader()``
    and ``not_leader()`` (Curator's listener shape)."""
    if hasattr(listener, "is_leader") and hasattr(listener, "not_leader"):
        def call(event: LatchEvent) -> Any:
            return listener.is_leader() if event is LatchEvent.IS_LEADER else listener.not_leader()

        return call
    if not callable(listener):
        raise TypeError("a latch listener is a callable(event) or has is_leader() and not_leader()")
    return listener  # type: ignore[no-any-return]


class _Base:
    """What LeaderLatch and LeaderSelector share: the participant id, the claim, the
    task, the states it hears."""

    _kind = "latch"

    def __init__(self, client: Client, name: str, id: str | None, value: bytes = b"") -> None:
        self.client = client
        self.name = _check_name("election", name)
        self._id = _check_identifier(id) or ""
        self._value = bytes(value)
        self._announcing: asyncio.Lock | None = None
        self.state = RecipeState.LATENT
        self._session_id = 0
        self._claim: tuple[int, str, str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._inbox: asyncio.Queue[tuple[str, Any]] | None = None
        #: Why it ended by itself (None while it runs, or closed by close()).
        self._ended: ConcordError | None = None
        #: What the client's close() ends of it (tracked as the client's watches are).
        self._ender: _Ender | None = None

    @property
    def id(self) -> str:
        """Its participant id (made up at start if none was given)."""
        return self._id

    def _start(self) -> None:
        if self.state is not RecipeState.LATENT:
            raise make_error(ErrorCode.BAD_STATE, f"the {self._kind} was started before")
        session_id = self.client._live_session_id()
        if not self._id:
            self._id = _unique_id(self._kind, session_id)
        self._claim = _claim(session_id, self.name, self._id)
        self._session_id = session_id
        self.state = RecipeState.STARTED
        self._inbox = asyncio.Queue()
        _states(self.client).subscribe(self._on_state)
        self._task = asyncio.get_running_loop().create_task(self._run(self.client.state))
        self._track()

    def _track(self) -> None:
        if self._ender is None:
            self._ender = _Ender(self)
            self.client._track(self._ender)

    def _own_tasks(self) -> list[asyncio.Task[Any]]:
        """Its tasks not finished yet (client.close() cancels and waits for them)."""
        return [t for t in (self._task,) if t is not None and not t.done()]

    def _on_state(self, state: State) -> None:
        if self._inbox is not None:
            self._inbox.put_nowait(("state", state))

    def _later(self, what: str, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """Runs ``coro`` as a task whose outcome arrives in the inbox as ``what``."""
        task = asyncio.ensure_future(coro)
        inbox = self._inbox

        def done(t: asyncio.Task[Any]) -> None:
            if inbox is not None and not t.cancelled():
                inbox.put_nowait((what, t))

        task.add_done_callback(done)
        return task

    async def _delayed(self, delay: float, coro: Callable[[], Awaitable[Any]]) -> Any:
        if delay:
            await asyncio.sleep(delay)
        return await coro()

    def _campaign_task(self, failures: int) -> asyncio.Task[Any]:
        return self._later(
            "won",
            self._delayed(
                _retry_delay(failures),
                lambda: _campaign_at(self.client, self.name, self._session_id, self._id, self._value),
            ),
        )

    def _observe_task(self, p: Participant, since: int) -> asyncio.Task[Any]:
        """Follows the leader while ``p`` leads: "deposed" (``p``) when it no longer does."""
        return self._later("deposed", _deposed(self.client, self.name, p, since))

    def _check_task(self, p: Participant, failures: int) -> asyncio.Task[Any]:
        async def check() -> Participant | None:
            """The server's leader if it is ``p``'s candidacy (with the value the
            server announces for it), else None."""
            leader = await _leader(self.client, self.name)
            ours = leader is not None and leader.key == p.key and leader.term == p.term
            return leader if ours else None

        return self._later("checked", self._delayed(_retry_delay(failures), check))

    async def _run(self, state: State) -> None:
        raise NotImplementedError

    async def _stop_task(self, unclaim: bool = True) -> None:
        _states(self.client).unsubscribe(self._on_state)
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if unclaim:
            _unclaim(self._claim)
            self._claim = None

    async def _resign_mine(self) -> None:
        if self.client.session_id == self._session_id and not self.client.state.ended:
            try:
                await _resign_all(self.client, self.name, self._session_id, self._id)
            except SessionExpiredError:
                pass

    @property
    def value(self) -> bytes:
        """What its candidacy announces while it leads (``proclaim`` changes it)."""
        return self._value

    def _leading_now(self) -> Participant | None:
        """The leadership it has now (None: not leading)."""
        raise NotImplementedError

    def _led_with(self, p: Participant) -> None:
        """Records that the server announces ``p.value`` for the leadership ``p``."""
        raise NotImplementedError

    async def proclaim(self, value: bytes) -> bool:
        """Makes ``value`` what its candidacy announces (Election.Proclaim: the
        server's Leader, Participants and Observe show it): at once while it leads
        (True once the server has it), else at its next leadership (False). A
        leadership that ended as this was sent (the server refused it: FENCED) is
        False too; its next one announces the value."""
        self._value = bytes(value)
        return await self._announce(force=True)

    async def _announce(self, force: bool = False) -> bool:
        """Sends the recipe's value for the leadership it has now, unless the server
        has it already (``force``: send it anyway). One at a time, each sending the
        newest value, so the last announced is the last asked for."""
        if self._announcing is None:
            self._announcing = asyncio.Lock()
        async with self._announcing:
            p = self._leading_now()
            if p is None:
                return False
            value = self._value
            if p.value == value and not force:
                return True
            try:
                await _proclaim(self.client, p.key, p.term, value)
            except FencedError:
                return False
            self._led_with(dataclasses.replace(p, value=value))
            return True

    async def _announce_quietly(self) -> None:
        """``_announce`` when a leadership begins: failures are logged (a leadership
        that ends meanwhile is not one)."""
        try:
            await self._announce()
        except ConcordError as err:
            logging.getLogger("concord").warning(
                "could not announce the value of a candidacy of election %r: %s", self.name, err
            )

    async def get_leader(self) -> Participant | None:
        """The election's leader, or None."""
        return await _leader(self.client, self.name)

    async def get_participants(self) -> list[Participant]:
        """The candidates in line, leader first."""
        return await _participants(self.client, self.name)


class LeaderLatch(_Base):
    """Curator's LeaderLatch: one candidacy in election ``name`` owned by the client's
    session, that says whether it leads (docs/sdk.md, LeaderLatch).

    ``await start()`` campaigns in a task; ``has_leadership()``; ``await wait(timeout)``
    until it leads; listeners hear ``LatchEvent.IS_LEADER`` / ``NOT_LEADER`` off the
    loop; ``fence`` while leading; ``await close()`` resigns. On SUSPENDED it stops
    leading at once and keeps its place; on RECONNECTED it leads again only if the
    server says its candidacy (key and term) still leads, else it campaigns again; on
    LOST it ends (``wait`` raises SessionExpiredError). While it leads it follows the
    election on a LeaderObserver (``Client.observe``): if someone else resigns its
    candidacy it stops leading (NOT_LEADER) and campaigns again. ``value`` is what
    its candidacy announces while it leads (``await proclaim(value)`` changes it).
    ``async with`` starts and closes it. ``id`` must be unique among the recipes of one session in one election
    (``start`` raises NodeExistsError otherwise); None: one is made up.
    """

    _kind = "latch"

    def __init__(self, client: Client, name: str, id: str | None = None, value: bytes = b"") -> None:
        super().__init__(client, name, id, value)
        self._leading: Participant | None = None
        self._changed = asyncio.Event()
        self._listeners = Listeners()

    def add_listener(self, listener: Any) -> None:
        """``listener(event)`` (or an object's ``is_leader()`` / ``not_leader()``) on
        every change of leadership, in order, on a thread of the latch's (``async def``:
        a task)."""
        self._listeners.add(_as_latch_listener(listener))  # type: ignore[arg-type]

    def has_leadership(self) -> bool:
        """Whether it leads now."""
        return self._leading is not None

    def _leading_now(self) -> Participant | None:
        return self._leading

    def _led_with(self, p: Participant) -> None:
        now = self._leading
        if now is not None and now.key == p.key and now.term == p.term:
            self._leading = p

    @property
    def fence(self) -> Fence | None:
        """While leading: the Fence (key, term) for writes only the leader may make."""
        p = self._leading
        return None if p is None else p.fence

    async def start(self) -> None:
        """Campaigns in a task. Errors: BAD_STATE if started before, NodeExistsError if
        its id is in use by another recipe of the session, SessionExpiredError."""
        self._start()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _lead(self, p: Participant) -> None:
        self._leading = p
        self._notify()
        self._listeners.dispatch(LatchEvent.IS_LEADER)  # type: ignore[arg-type]

    def _unlead(self, notify: bool = True) -> None:
        was, self._leading = self._leading, None
        if was is not None:
            self._notify()
            if notify:
                self._listeners.dispatch(LatchEvent.NOT_LEADER)  # type: ignore[arg-type]

    def _end(self, err: ConcordError) -> None:
        self._unlead()
        if self.state is not RecipeState.CLOSED:
            self.state = RecipeState.CLOSED
            self._ended = err
        self._notify()

    async def _run(self, state: State) -> None:
        assert self._inbox is not None
        conn = state
        won: Participant | None = None
        won_at = 0  # the zxid at which ``won`` led
        observer: asyncio.Task[Any] | None = None
        checking = False
        campaign_failures = check_failures = 0
        tasks: list[asyncio.Task[Any]] = []

        def lead(p: Participant) -> None:
            nonlocal observer
            self._lead(p)
            if p.value != self._value:
                tasks.append(asyncio.ensure_future(self._announce_quietly()))
            if observer is None or observer.done():
                observer = self._observe_task(p, won_at)
                tasks.append(observer)

        def unobserve() -> None:
            nonlocal observer
            if observer is not None:
                observer.cancel()
                observer = None

        try:
            if conn.ended:
                self._end(_session_lost())
                return
            tasks.append(self._campaign_task(0))
            while True:
                what, value = await self._inbox.get()
                if what == "state":
                    conn = value
                    if conn is State.SUSPENDED:
                        unobserve()
                        self._unlead()
                    elif conn.connected:
                        if won is not None and self._leading is None and not checking:
                            checking = True
                            tasks.append(self._check_task(won, check_failures))
                    elif conn.ended:
                        self._end(_session_lost())
                        return
                elif what == "won":
                    try:
                        p = value.result()
                    except ConcordError as err:
                        if err.code is ErrorCode.SESSION_EXPIRED:
                            self._end(err)
                            return
                        if _transient(err):
                            campaign_failures += 1
                            tasks.append(self._campaign_task(campaign_failures))
                            continue
                        self._end(err)
                        return
                    campaign_failures = 0
                    won, won_at = p
                    if conn.connected:
                        lead(won)
                elif what == "checked":
                    checking = False
                    try:
                        still = value.result()
                    except ConcordError:
                        check_failures += 1
                        if won is not None and conn.connected:
                            checking = True
                            tasks.append(self._check_task(won, check_failures))
                        continue
                    check_failures = 0
                    if won is None:
                        continue
                    if still is None:
                        won = None
                        tasks.append(self._campaign_task(0))
                    elif conn.connected:
                        if still.key == won.key and still.term == won.term:
                            won = still  # with the value the server has now
                        lead(won)
                elif what == "deposed":
                    gone = None if value.exception() is not None else value.result()
                    if gone is None or won is None or gone.key != won.key or gone.term != won.term:
                        continue  # could not observe, or about an older win
                    # Someone else resigned our candidacy (or its node went): Curator's
                    # latch queues again when its node is gone.
                    observer, won = None, None
                    self._unlead()
                    tasks.append(self._campaign_task(0))
                tasks = [t for t in tasks if not t.done()]
        finally:
            await _cancel_all(tasks)

    async def wait(self, timeout: float | None = None) -> bool:
        """Until it leads: True; False if not within ``timeout`` seconds (None: no limit).
        Errors: BAD_STATE if not started or closed, SessionExpiredError if it ended
        because its session was lost."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._leading is not None:
                return True
            if self.state is not RecipeState.STARTED:
                if self._ended is not None:
                    raise self._ended
                raise make_error(ErrorCode.BAD_STATE, f"the latch is {self.state.value.lower()}")
            event = self._changed
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await within(event.wait(), remaining)
            except asyncio.TimeoutError:
                return self._leading is not None

    async def close(self, notify: bool = False) -> None:
        """Stops its task and resigns its candidacy (leading or waiting); listeners hear
        NOT_LEADER only if ``notify`` and it led (Curator's NOTIFY_LEADER). Closing a
        closed latch does nothing."""
        if self.state is RecipeState.CLOSED and self._claim is None:
            return
        self.state = RecipeState.CLOSED
        await self._stop_task()
        self._unlead(notify)
        self._notify()
        try:
            await self._resign_mine()
        finally:
            self._listeners.shutdown()

    async def __aenter__(self) -> LeaderLatch:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class Leadership:
    """What ``take_leadership`` is given: the leadership's ``term`` and ``fence``, and
    how to know it must stop: ``is_cancelled()``, ``wait(timeout)`` (for a thread),
    ``await cancelled()`` (for a task; a task is also cancelled)."""

    def __init__(self, p: Participant) -> None:
        self.participant = p
        self._stop = threading.Event()
        self._stopped_aio: asyncio.Event = asyncio.Event()

    @property
    def term(self) -> int:
        return self.participant.term

    @property
    def key(self) -> str:
        return self.participant.key

    @property
    def fence(self) -> Fence:
        """Write with it: the server refuses such writes once this leadership is over."""
        return self.participant.fence

    def is_cancelled(self) -> bool:
        """True once leadership must end (SUSPENDED, LOST, close())."""
        return self._stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks (a thread) until leadership must end or ``timeout`` passes; True if it must end."""
        return self._stop.wait(timeout)

    async def cancelled(self) -> None:
        """Resolves when leadership must end."""
        await self._stopped_aio.wait()

    def _cancel(self) -> None:
        self._stop.set()
        self._stopped_aio.set()


class LeaderSelector(_Base):
    """Curator's LeaderSelector: runs ``take_leadership(leadership)`` while its
    candidacy leads election ``name``; leadership lasts while it runs. When it returns
    the selector resigns, and queues again if ``auto_requeue`` or ``requeue()`` was
    called. An ``async def`` runs as a task (cancelled when leadership must end); a
    plain function runs on a thread of its own and checks ``leadership.is_cancelled()``
    or ``leadership.wait()``. On SUSPENDED and LOST it is told to stop, and when the
    election's LeaderObserver shows another leader (someone else resigned it); after
    RECONNECTED the place is resigned and queued again if auto_requeue / requeue();
    LOST ends the selector. ``value`` is what its candidacy announces while it leads
    (``await proclaim(value)`` changes it, from take_leadership too). ``async with``
    starts and closes it.
    """

    _kind = "selector"

    def __init__(
        self,
        client: Client,
        name: str,
        take_leadership: Callable[[Leadership], Any],
        id: str | None = None,
        auto_requeue: bool = False,
        value: bytes = b"",
    ) -> None:
        super().__init__(client, name, id, value)
        self.take_leadership = take_leadership
        self.auto_requeue = auto_requeue
        self._requeue = False
        self._queued = False
        self._leadership: Leadership | None = None
        #: The task that runs take_leadership now (None: none runs).
        self._taking: asyncio.Task[Any] | None = None
        #: close()'s resignation, which waits for take_leadership to return.
        self._closing: asyncio.Task[None] | None = None

    def has_leadership(self) -> bool:
        """Whether ``take_leadership`` runs now (and has not been told to stop)."""
        lead = self._leadership
        return lead is not None and not lead.is_cancelled()

    def _leading_now(self) -> Participant | None:
        lead = self._leadership
        return None if lead is None or lead.is_cancelled() else lead.participant

    def _led_with(self, p: Participant) -> None:
        lead = self._leadership
        if lead is not None and lead.key == p.key and lead.term == p.term:
            lead.participant = p

    async def start(self) -> None:
        """Queues. Errors: BAD_STATE if started before, NodeExistsError if its id is in
        use by another recipe of the session."""
        self._start()

    def requeue(self) -> bool:
        """Queue again once the current leadership ends; False if already queued (or
        to be) or not started."""
        if self.state is not RecipeState.STARTED or self._queued or self._requeue:
            return False
        self._requeue = True
        if self._inbox is not None:
            self._inbox.put_nowait(("requeue", None))
        return True

    def _run_take(self, lead: Leadership) -> asyncio.Task[Any]:
        fn = self.take_leadership

        async def take() -> None:
            if inspect.iscoroutinefunction(fn):
                await fn(lead)
            else:
                loop = asyncio.get_running_loop()
                done: asyncio.Future[None] = loop.create_future()

                def finished() -> None:
                    if not done.done():
                        done.set_result(None)

                def in_thread() -> None:
                    try:
                        fn(lead)
                    except Exception:
                        logging.getLogger("concord").exception("a take_leadership function raised")
                    finally:
                        try:
                            loop.call_soon_threadsafe(finished)
                        except RuntimeError:
                            pass  # the client was closed meanwhile: nobody waits

                threading.Thread(target=in_thread, name="concord-selector", daemon=True).start()
                # Leadership ends when the function returns, even if cancelled meanwhile.
                await asyncio.shield(done)

        return self._later("took", _guarded(take()))

    async def _run(self, state: State) -> None:
        assert self._inbox is not None
        conn = state
        won: Participant | None = None  # a win not yet running (seen while suspended)
        won_at = 0  # the zxid at which the last win led
        running: Participant | None = None
        observer: asyncio.Task[Any] | None = None
        take_task: asyncio.Task[Any] | None = None
        to_resign: Participant | None = None  # a cancelled leadership's place
        campaign_failures = 0
        tasks: list[asyncio.Task[Any]] = []

        def queue() -> None:
            nonlocal campaign_failures
            self._queued = True
            self._requeue = False
            tasks.append(self._campaign_task(campaign_failures))

        def take(p: Participant) -> None:
            nonlocal running, take_task, observer
            running = p
            self._leadership = Leadership(p)
            take_task = self._taking = self._run_take(self._leadership)
            observer = self._observe_task(p, won_at)
            tasks.append(observer)
            if p.value != self._value:
                tasks.append(asyncio.ensure_future(self._announce_quietly()))

        def stop_take() -> None:
            nonlocal observer
            if observer is not None:
                observer.cancel()
                observer = None
            if self._leadership is not None:
                self._leadership._cancel()
            if take_task is not None and inspect.iscoroutinefunction(self.take_leadership):
                take_task.cancel()

        try:
            if conn.ended:
                self._ended = _session_lost()
                return
            queue()
            while True:
                what, value = await self._inbox.get()
                if what == "state":
                    conn = value
                    if conn is State.SUSPENDED:
                        stop_take()
                    elif conn.connected:
                        if to_resign is not None:
                            p, to_resign = to_resign, None
                            await self._quiet_resign(p)
                            if (self.auto_requeue or self._requeue) and not self._queued:
                                queue()
                        if won is not None:
                            p, won = won, None
                            leader = await self._quiet_leader()
                            if leader is not None and leader.key == p.key and leader.term == p.term:
                                take(p)
                            else:
                                self._queued = False
                                if self.auto_requeue or self._requeue:
                                    queue()
                    elif conn.ended:
                        stop_take()
                        self._ended = _session_lost()
                        return
                elif what == "won":
                    try:
                        p, won_at = value.result()
                    except ConcordError as err:
                        if _transient(err):
                            campaign_failures += 1
                            tasks.append(self._campaign_task(campaign_failures))
                            continue
                        self._ended = err
                        return
                    campaign_failures = 0
                    self._queued = False
                    if conn.connected:
                        take(p)
                    else:
                        won = p
                elif what == "deposed":
                    gone = None if value.exception() is not None else value.result()
                    if gone is not None and running is not None and gone.key == running.key:
                        # Someone else resigned the candidacy: leadership must end
                        # (then "took" resigns, which finds it gone, and queues again).
                        stop_take()
                elif what == "took":
                    ran, running, take_task = running, None, None
                    self._taking = None
                    if observer is not None:
                        observer.cancel()
                        observer = None
                    self._leadership = None
                    assert ran is not None
                    if conn.connected:
                        await self._quiet_resign(ran)
                        if (self.auto_requeue or self._requeue) and not self._queued:
                            queue()
                    else:
                        # Resign once the server answers again (RECONNECTED).
                        to_resign = ran
                elif what == "requeue":
                    if running is None and won is None and to_resign is None and not self._queued:
                        queue()
                tasks = [t for t in tasks if not t.done()]
        finally:
            stop_take()
            await _cancel_all(tasks)
            if self.state is not RecipeState.CLOSED and self._ended is not None:
                self.state = RecipeState.CLOSED

    async def _quiet_resign(self, p: Participant) -> None:
        try:
            await _resign(self.client, p.key, p.term)
        except ConcordError:
            pass  # the place goes with the session at worst

    async def _quiet_leader(self) -> Participant | None:
        try:
            return await _leader(self.client, self.name)
        except ConcordError:
            return None

    async def close(self, timeout: float | None = CLOSE_WAIT_S) -> bool:
        """Tells ``take_leadership`` to stop (``leadership.is_cancelled()``; a task is
        cancelled too), waits until it has returned, and only then resigns: the next
        leader's take_leadership never starts while this one runs (Curator's rule).
        True once resigned. If it has not returned within ``timeout`` seconds (None:
        no limit), False, with a warning logged: the selector stays leader and
        resigns when it returns (or when the session ends). Closing a closed selector
        waits the same way for that resignation."""
        if self._closing is None:
            if self.state is RecipeState.CLOSED and self._claim is None:
                return True
            self.state = RecipeState.CLOSED
            lead = self._leadership
            if lead is not None:
                lead._cancel()
            # Its _run ends: it cancels a take_leadership task, and queues no more.
            await self._stop_task(unclaim=False)
            self._closing = asyncio.ensure_future(self._resign_once_returned(self._taking))
            self._track()  # client.close() cancels it if take_leadership never returns
        closing = self._closing
        try:
            await within(asyncio.shield(closing), timeout)
        except asyncio.TimeoutError:
            logging.getLogger("concord").warning(
                "LeaderSelector %r of election %r: take_leadership still runs %s s after close();"
                " it stays leader until it returns",
                self._id, self.name, timeout,
            )
            closing.add_done_callback(_log_failure)
            return False
        return True

    def _own_tasks(self) -> list[asyncio.Task[Any]]:
        tasks = (self._task, self._taking, self._closing)
        return [t for t in tasks if t is not None and not t.done()]

    async def _resign_once_returned(self, taking: asyncio.Task[Any] | None) -> None:
        """Waits for ``taking`` (take_leadership) to return, then resigns and frees the
        participant id. Cancelled (the client closed): ``taking`` is cancelled too."""
        try:
            if taking is not None and not taking.done():
                await asyncio.wait([taking])
            await self._resign_mine()
        except asyncio.CancelledError:
            if taking is not None:
                taking.cancel()
            raise
        finally:
            self._taking = None
            _unclaim(self._claim)
            self._claim = None

    async def __aenter__(self) -> LeaderSelector:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class _Ender:
    """What ``Client.close()`` ends of a started latch or selector (the client tracks
    it as it tracks watches): the recipe's tasks, a selector's take_leadership task
    and resignation included, cancelled and waited for (bounded), so that none is
    left pending on the loop. Nothing is resigned: the session is closed already."""

    def __init__(self, recipe: _Base) -> None:
        self._recipe = recipe

    def cancel(self) -> None:
        for t in self._recipe._own_tasks():
            t.cancel()

    async def aclose(self) -> None:
        self.cancel()
        await settle(self._recipe._own_tasks())


def _log_failure(task: asyncio.Task[Any]) -> None:
    """Retrieves the outcome of a task nobody awaits any more, and logs a failure."""
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger("concord").warning("a recipe's resignation failed: %s", task.exception())


async def _cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancels ``tasks`` and waits for them (a cancelled Campaign's flush included)."""
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks)


async def _guarded(coro: Awaitable[None]) -> None:
    """Runs a take_leadership; what it raises is logged, not the selector's end."""
    try:
        await coro
    except asyncio.CancelledError:
        pass
    except Exception:
        logging.getLogger("concord").exception("a take_leadership function raised")
