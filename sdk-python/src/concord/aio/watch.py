"""``Watch``: a watch stream that resumes by itself across broken streams, server
restarts and moves to another host of the list, delivering each event exactly once.

::

    server stream ──▶ reader task: Cursor (drops replayed duplicates, keeps the
          ▲           resume point) ──▶ bounded queue ──▶ async for / next()
          └── Watch RPC again with start_zxid = resume point ◀── stream broke
              (transport, restart, SLOW_CONSUMER, silent server), with back-off

The reader task runs on the client's loop; the queue makes reading cancel-safe (a
``next(timeout=...)`` that times out loses nothing). A watch that breaks during its
initial snapshot, or whose resume point the server no longer has (ZXID_COMPACTED),
or that meets any error a retry cannot fix, ends with that error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from .._cursor import EVENT, SNAPSHOT_NODE, Cursor
from .._proto import watch_pb2
from ..errors import ConcordError, ErrorCode, Origin, from_rpc_error, make_error
from ..events import WatchEvent
from ..types import Retry
from ._stream import END, QueuedStream, settle

if TYPE_CHECKING:
    from .client import Client

#: A watch's default resume policy: never give up, 50 ms to 2 s between attempts.
RESUME_FOREVER = Retry(max_tries=None, deadline=None, delay=0.05, max_delay=2.0)

log = logging.getLogger("concord")


async def _read_within(call: Any, limit: float) -> Any:
    """``call.read()`` within ``limit`` seconds; raises asyncio.TimeoutError after it.
    The call is cancelled when the read is abandoned (a timeout, or the caller
    cancelled): a grpc read waited on after its cancellation may never return."""
    read = asyncio.ensure_future(call.read())
    try:
        done, _ = await asyncio.wait({read}, timeout=limit)
    finally:
        if not read.done():
            call.cancel()
            read.cancel()
            # The call is cancelled: the read ends at once; not left pending.
            await settle([read])
    if not done:
        raise asyncio.TimeoutError
    return read.result()


def silence_limit(progress_interval_ms: int) -> float:
    """How long a stream may send nothing (not even Progress) before it counts as
    broken: three progress intervals (the server's default one is 1 s), at least 2 s."""
    interval = (progress_interval_ms or 1000) / 1000.0
    return max(3 * interval, 2.0)


class Watch(QueuedStream[WatchEvent]):
    """An open (or about to open) watch; ``async for event in watch`` yields
    ``WatchEvent``s. Made by ``Client.watch``. The stream opens at the first
    ``async for``/``next()``, at ``async with`` or at ``await watch.start()``; a
    refusal (BAD_PATH, ZXID_COMPACTED, PERMISSION_DENIED...) is raised there."""

    _waits_for = "watch event"

    def __init__(self, client: Client, request: watch_pb2.WatchRequest, resume: Retry | None) -> None:
        super().__init__(client)
        #: The watched path as the client names it; the request has the server's
        #: (below the client's chroot), and events are given back the client's paths.
        self._path = str(request.path)
        full = client._full(self._path)
        if full != self._path:
            chrooted = watch_pb2.WatchRequest()
            chrooted.CopyFrom(request)
            chrooted.path = full
            request = chrooted
        self._request = request
        self._resume = resume
        self._cursor = Cursor(
            request.start_zxid if request.HasField("start_zxid") else None,
            request.initial_snapshot,
        )
        self._silence = silence_limit(request.progress_interval_ms)

    # -- public -------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def last_zxid(self) -> int | None:
        """The newest zxid delivered or known complete: where a resume starts."""
        return self._cursor.last_zxid

    async def start(self) -> Watch:
        """Opens the stream (once); raises the server's refusal."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._task is not None or self._cancelled:
                return self
            # A dead host of the list is skipped, as a unary call's retry would; a
            # NOT_LEADER goes to the leader it named (if listed), else to the next.
            hosts = len(self._client.hosts)
            for attempt in range(hosts):
                try:
                    call, first, index = await self._open(self._request)
                    break
                except ConcordError as err:
                    refused = err.origin is Origin.SERVER and err.code is not ErrorCode.NOT_LEADER
                    if attempt + 1 == hosts or not err.retry_safe or refused:
                        raise
            self._task = asyncio.get_running_loop().create_task(self._run(call, first, index))
            self._client._track(self)
        return self

    async def next(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event; None once the watch has ended (cancelled, a ``once`` watch
        fired, or a stream ended without resume); raises the error that ended it
        (once), or ``concord.TimeoutError`` (also the builtin) after ``timeout``
        seconds without one, losing nothing."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            msg = await self._message(remaining, timeout)
            if msg is None:
                return None
            if msg.WhichOneof("msg") == EVENT:
                return WatchEvent.of(msg.event)

    # -- for the caches -----------------------------------------------------------

    async def _message(self, timeout: float | None = None, asked: float | None = None) -> Any:
        """The next accepted message (a ``WatchResponse``), None at the end; a
        TIMEOUT names ``asked`` (the caller's time, of which ``timeout`` is left)."""
        return await self._take(timeout, asked)

    # -- the reader ---------------------------------------------------------------

    async def _open(self, request: watch_pb2.WatchRequest) -> tuple[Any, Any, int]:
        """A new stream on the client's current host and its first message."""
        client = self._client
        index = client._current
        ep = client._endpoint()
        call = ep.open_stream(lambda conn: conn.watch.Watch(request))
        try:
            first = await _read_within(call, self._silence)
        except asyncio.TimeoutError:
            call.cancel()
            self._moved_off(index)
            raise make_error(
                ErrorCode.TIMEOUT,
                f"the watch stream did not start within {self._silence:g} s",
                origin=Origin.TRANSPORT,
            ) from None
        except grpc.RpcError as e:
            call.cancel()
            err = from_rpc_error(e, write=False)
            client._leave_after(err, index)
            raise err from None
        if first is grpc.aio.EOF:
            raise make_error(ErrorCode.UNAVAILABLE, "the watch stream ended before it started")
        return call, first, index

    def _moved_off(self, index: int) -> None:
        """The host at ``index`` failed this watch: calls move on, unless another
        failure moved them already."""
        if self._client._current == index:
            self._client._rotate()

    async def _run(self, call: Any, first: Any, index: int) -> None:
        cursor = self._cursor
        request = self._request
        failures: tuple[float, int] | None = None
        msg: Any = first
        try:
            while True:
                if call is None:
                    call, msg, index, failures = await self._reconnect(failures)
                if msg is None:
                    msg, err, clean = await self._read(call, index)
                    if err is not None:
                        call.cancel()
                        call = None
                        if request.once and cursor.events_delivered > 0:
                            break
                        if self._resume is None or not (clean or err.retry_safe):
                            if not (clean and self._resume is None):
                                await self._queue.put(err)
                            break
                        self.last_error = err
                        continue
                failures = None
                current, msg = msg, None
                kind = current.WhichOneof("msg")
                if kind is None:
                    continue
                zxid = 0 if kind == SNAPSHOT_NODE else int(getattr(current, kind).zxid)
                if cursor.accept(kind, zxid):
                    if cursor.last_zxid is not None:
                        self._client._saw(cursor.last_zxid)
                    if self._client.chroot:
                        self._unchroot(kind, current)
                    await self._queue.put(current)
                    if request.once and kind == EVENT:
                        break
        except ConcordError as err:
            await self._queue.put(err)
        except Exception as e:  # a bug, not the server: end the watch, loudly
            log.exception("a Concord watch failed")
            await self._queue.put(make_error(ErrorCode.INTERNAL, f"the watch failed: {e!r}"))
        finally:
            if call is not None:
                call.cancel()
        await self._queue.put(END)

    def _unchroot(self, kind: str, msg: Any) -> None:
        """Gives a message's node the client's path (without its chroot)."""
        if kind == EVENT:
            msg.event.path = self._client.unchroot(msg.event.path)
        elif kind == SNAPSHOT_NODE:
            msg.snapshot_node.path = self._client.unchroot(msg.snapshot_node.path)

    async def _reconnect(
        self, failures: tuple[float, int] | None
    ) -> tuple[Any, Any, int, tuple[float, int]]:
        """A new stream from the cursor's resume point, retried with back-off within
        the resume policy; raises the last error when it runs out, at once on an error
        a retry cannot fix (ZXID_COMPACTED, BAD_*), or mid-snapshot."""
        policy = self._resume or RESUME_FOREVER
        start_from = self._cursor.resume_from()
        request = watch_pb2.WatchRequest()
        request.CopyFrom(self._request)
        if start_from is not None:
            request.start_zxid = start_from
            request.initial_snapshot = False
        while True:
            since, count = failures if failures is not None else (time.monotonic(), 0)
            attempt = count + 1
            if not policy.allows(attempt, time.monotonic() - since):
                raise self.last_error or make_error(
                    ErrorCode.UNAVAILABLE, "the watch could not be resumed"
                )
            await asyncio.sleep(policy.jittered(attempt))
            failures = (since, attempt)
            try:
                call, first, index = await self._open(request)
            except ConcordError as err:
                if not err.retry_safe:
                    raise
                self.last_error = err
                continue
            self.resumes += 1
            return call, first, index, failures

    async def _read(self, call: Any, index: int) -> tuple[Any, ConcordError | None, bool]:
        """One message of the stream; or the error that broke it, and whether the
        stream ended without a status (the server finished it, or restarted)."""
        try:
            msg = await _read_within(call, self._silence)
        except asyncio.TimeoutError:
            # A stalled server keeps its connection open: move to the next host.
            self._moved_off(index)
            err = make_error(
                ErrorCode.UNAVAILABLE,
                f"the watch stream was silent for {self._silence:.1f} s",
                origin=Origin.TRANSPORT,
            )
            return None, err, False
        except grpc.RpcError as e:
            err = from_rpc_error(e, write=False)
            self._client._leave_after(err, index)
            return None, err, False
        if msg is grpc.aio.EOF:
            return None, make_error(ErrorCode.UNAVAILABLE, "the watch stream ended"), True
        return msg, None, False
