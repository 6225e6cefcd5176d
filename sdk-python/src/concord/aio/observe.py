"""``LeaderObserver``: an election's leader changes, on the server's Observe stream, resumed
by itself across broken streams and moves to another host (the Rust SDK's
``Client::observe``, which ends at the first break, plus the resume a watch has).

::

    Observe(name) ──▶ reader task: drops states older than the floor, and states
          ▲           equal to the last one delivered ──▶ bounded queue ──▶ async for
          └── Observe(name) again, with back-off ◀── the stream broke, or it began
              with a state older than the floor (a server behind), or the session's
              keep-alives moved to another host after SUSPENDED (a silent server)

Each stream begins with the current leader as of the answering server's applied zxid,
then sends every change (of leader, or of its value) at the zxid that made it. The
**floor** is the newest zxid delivered, and at each (re)open also the newest the
client has seen: a stream whose first state is older is a server behind, which is
left and asked again later, so an observer never reports a leader older than one it
reported, or older than what the client has seen, as current. After a resume the
first state is delivered only if it differs from the last one delivered (a change
during the break shows its end state, as a txn that changes the leader twice does).

The observer asks for a progress message every second of a quiet election
(``PROGRESS_INTERVAL_MS``), so a stopped server, which keeps its connection open and
sends nothing, is told from a stable leader: a stream silent for ``SILENCE_S`` is
left for the next host. Sooner than that, when the client's session moves its
keep-alives to another host (RECONNECTED after SUSPENDED), an observer on the old
host opens its stream again on the new one. What a resume cannot fix
(PERMISSION_DENIED, BAD_*) ends the observer with that error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from .._proto import election_pb2
from ..errors import ConcordError, ErrorCode, Origin, from_rpc_error, make_error
from ..types import Retry, State
from ._stream import END, QueuedStream, settle
from .recipes import Participant, _election_stub, _states
from .watch import RESUME_FOREVER, _read_within, silence_limit

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("concord")
#: How long a new stream may take to send its first state (the current leader, sent
#: at once by a server that answers) before its host counts as stalled.
OPEN_WAIT_S = silence_limit(0)
#: The progress interval the observer asks for.
PROGRESS_INTERVAL_MS = 1000
#: How long an open stream may send nothing, not even progress, before its host
#: counts as stalled.
SILENCE_S = silence_limit(PROGRESS_INTERVAL_MS)


@dataclasses.dataclass(frozen=True)
class LeaderChange:
    """One state of an election, as ``observe`` reports it: the ``leader`` (a
    Participant with its value, or None while there is none) as of ``zxid`` (the txn
    that made the change, or the answering server's applied zxid for the state a
    stream begins with)."""

    zxid: int
    leader: Participant | None


class _Moved(Exception):
    """The session's keep-alives moved to another host: follow there."""


class LeaderObserver(QueuedStream[LeaderChange]):
    """The leader changes of election ``name``: ``async for change in observer``
    yields ``LeaderChange``s, the current state first, each newer than the last, and
    none equal to the one before it. Made by ``Client.observe``. The stream opens at
    the first ``async for``/``next()``, at ``async with`` or at ``await start()``,
    which raise the server's refusal (BAD_ARGUMENTS for a bad name,
    PERMISSION_DENIED)."""

    _waits_for = "leader change"

    def __init__(
        self,
        client: Client,
        name: str,
        resume: Retry | None = RESUME_FOREVER,
        *,
        since: int = 0,
        _patient: bool = False,
    ) -> None:
        super().__init__(client)
        #: A recipe's: an open that no host answers is retried (not raised).
        self._patient = _patient
        self.name = name
        self._resume = resume
        #: The newest zxid delivered (or, before any, the floor the caller asked for).
        self._floor = since
        self._last: LeaderChange | None = None
        self._moved: asyncio.Event | None = None

    # -- public -------------------------------------------------------------------

    @property
    def last(self) -> LeaderChange | None:
        """The last state delivered (None before the first)."""
        return self._last

    async def start(self) -> LeaderObserver:
        """Opens the stream (once) and reads its first state; raises the server's
        refusal. A dead host of the list is skipped, as a watch's open does."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._task is not None or self._cancelled:
                return self
            hosts = len(self._client.hosts)
            call: Any = None
            first: Any = None
            index = self._client._current
            for attempt in range(hosts):
                try:
                    call, first, index = await self._open()
                    break
                except ConcordError as err:
                    refused = err.origin is Origin.SERVER and err.code is not ErrorCode.NOT_LEADER
                    if not err.retry_safe or refused:
                        raise
                    if attempt + 1 == hosts:
                        if not self._patient:
                            raise
                        self.last_error = err  # the reader task tries again
            self._moved = asyncio.Event()
            _states(self._client).subscribe(self._on_state)
            self._task = asyncio.get_running_loop().create_task(self._run(call, first, index))
            self._client._track(self)
        return self

    async def next(self, timeout: float | None = None) -> LeaderChange | None:
        """The next state; None once the observer has ended (cancelled, or a break
        without resume); raises the error that ended it (once), or
        ``concord.TimeoutError`` after ``timeout`` seconds without a change (nothing is
        lost)."""
        return await self._take(timeout)  # type: ignore[no-any-return]

    def _cancelling(self) -> None:
        _states(self._client).unsubscribe(self._on_state)

    # -- the reader ---------------------------------------------------------------

    def _on_state(self, state: State) -> None:
        if state is State.RECONNECTED and self._moved is not None:
            self._moved.set()

    async def _open(self) -> tuple[Any, Any, int]:
        """A new stream on the client's current host and its first state."""
        client = self._client
        index = client._current
        ep = client._endpoint()
        request = election_pb2.ObserveRequest(election=self.name, progress_interval_ms=PROGRESS_INTERVAL_MS)
        call = ep.open_stream(lambda conn: _election_stub(conn).Observe(request))
        try:
            first = await _read_within(call, OPEN_WAIT_S)
        except asyncio.TimeoutError:
            # A stalled server keeps its connection open: try the next host next time.
            call.cancel()
            if client._current == index:
                client._rotate()
            raise make_error(
                ErrorCode.TIMEOUT,
                f"the observe stream did not start within {OPEN_WAIT_S:g} s",
                origin=Origin.TRANSPORT,
            ) from None
        except grpc.RpcError as e:
            call.cancel()
            err = from_rpc_error(e, write=False)
            client._leave_after(err, index)
            raise err from None
        except BaseException:
            call.cancel()
            raise
        if first is grpc.aio.EOF:
            call.cancel()
            raise make_error(ErrorCode.UNAVAILABLE, "the observe stream ended before it started")
        return call, first, index

    async def _run(self, call: Any, first: Any, index: int) -> None:
        failures: tuple[float, int] | None = None
        msg: Any = first
        fresh = True  # msg is the first of its stream
        floor = max(self._floor, self._client.last_zxid)
        try:
            while True:
                if call is None:
                    call, msg, index, failures, floor = await self._reconnect(failures)
                    fresh = True
                if msg is None:
                    try:
                        msg = await self._read(call, index)
                    except (ConcordError, _Moved) as err:
                        call.cancel()
                        call = None
                        if isinstance(err, _Moved):
                            continue
                        if self._resume is None or not err.retry_safe:
                            await self._queue.put(err)
                            break
                        self.last_error = err
                        continue
                current, msg = msg, None
                zxid = int(current.header.zxid)
                self._client._saw(zxid)
                if fresh and zxid < floor:
                    # A server behind what was delivered or seen: ask again later.
                    call.cancel()
                    call = None
                    self.last_error = make_error(
                        ErrorCode.UNAVAILABLE,
                        f"the observe stream began at zxid {zxid}, behind {floor}",
                        origin=Origin.CLIENT,
                    )
                    continue
                fresh = False
                failures = None
                if current.progress:
                    continue  # the leader has not changed: the server is alive
                if zxid < self._floor:
                    continue  # an older state (cannot follow a fresh one on one stream)
                change = LeaderChange(
                    zxid, Participant.of(current.leader, True) if current.HasField("leader") else None
                )
                self._floor = zxid
                if self._last is not None and self._last.leader == change.leader:
                    continue  # the same state, seen again after a resume
                self._last = change
                await self._queue.put(change)
        except ConcordError as err:
            await self._queue.put(err)
        except Exception as e:  # a bug, not the server: end the observer, loudly
            log.exception("a Concord observer failed")
            await self._queue.put(make_error(ErrorCode.INTERNAL, f"the observer failed: {e!r}"))
        finally:
            if call is not None:
                call.cancel()
            _states(self._client).unsubscribe(self._on_state)
        await self._queue.put(END)

    async def _read(self, call: Any, index: int) -> Any:
        """The stream's next message; raises the error that broke it, TIMEOUT after
        SILENCE_S without one (the host is stalled: the next one is tried), or _Moved
        when the session's keep-alives moved to another host than the stream's."""
        assert self._moved is not None
        read = asyncio.ensure_future(call.read())
        deadline = time.monotonic() + SILENCE_S
        try:
            while True:
                moved = asyncio.ensure_future(self._moved.wait())
                try:
                    await asyncio.wait(
                        {read, moved},
                        timeout=max(0.0, deadline - time.monotonic()),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    moved.cancel()
                if read.done():
                    break
                if time.monotonic() >= deadline:
                    if self._client._current == index:
                        self._client._rotate()
                    raise make_error(
                        ErrorCode.TIMEOUT,
                        f"the observe stream was silent for {SILENCE_S} s",
                        origin=Origin.TRANSPORT,
                    )
                self._moved.clear()
                if self._client._current != index:
                    raise _Moved()
        except BaseException:
            # Cancelled, or moved: a grpc read waited on after its call's
            # cancellation may never return, so it is not left running; once the
            # call is cancelled it ends at once, and is not left pending either.
            read.cancel()
            if not read.done():
                call.cancel()
                await settle([read])
            raise
        try:
            msg = read.result()
        except grpc.RpcError as e:
            err = from_rpc_error(e, write=False)
            self._client._leave_after(err, index)
            raise err from None
        if msg is grpc.aio.EOF:
            raise make_error(ErrorCode.UNAVAILABLE, "the observe stream ended")
        return msg

    async def _reconnect(
        self, failures: tuple[float, int] | None
    ) -> tuple[Any, Any, int, tuple[float, int], int]:
        """A new stream, retried with back-off within the resume policy; raises the
        last error when it runs out, at once on an error a retry cannot fix."""
        policy = self._resume or RESUME_FOREVER
        while True:
            since, count = failures if failures is not None else (time.monotonic(), 0)
            attempt = count + 1
            if not policy.allows(attempt, time.monotonic() - since):
                raise self.last_error or make_error(ErrorCode.UNAVAILABLE, "the observer could not be resumed")
            await asyncio.sleep(policy.jittered(attempt))
            failures = (since, attempt)
            floor = max(self._floor, self._client.last_zxid)
            try:
                call, first, index = await self._open()
            except ConcordError as err:
                if not err.retry_safe:
                    raise
                self.last_error = err
                continue
            self.resumes += 1
            return call, first, index, failures, floor
