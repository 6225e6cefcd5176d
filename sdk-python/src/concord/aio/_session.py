"""The keep-alive task of a client's session, and its connection states
(docs/sdk.md, "Sessions and connection states"; the Rust SDK's ``session.rs``).

::

    Client ◄── publish(State) ◄── KeepAlive task: one KeepAlive stream at a time,
                                   a ping every TTL/3 carrying the newest zxid seen
    CONNECTED ─(no answer for suspend_share × TTL)─▶ SUSPENDED ─(an answer)─▶ RECONNECTED
    any ─(server says expired, or no answer for give_up_share × TTL)─▶ LOST

Only a server decides that a session expired: between one TTL without an answer and
the give-up time (by default twice the TTL) the session stays SUSPENDED, since a
server that stalled (SIGSTOP, a frozen VM) charges no session for its own silence
and may answer again with the session alive. The give-up time bounds how long a
client cut off from every server believes it may still hold what its session holds.

A stream is given up for a new one (on the next server of the list) when its first
ping is not answered within a quarter of the ping interval, or when it goes one and a
half ping intervals without an answer: a stalled server keeps its connection open and
never answers. A broken stream is reopened after a back-off of at most one ping
interval. The task never opens a new session: after LOST the caller decides.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import math
from typing import TYPE_CHECKING

import grpc

from .._proto import session_pb2
from ..errors import ConcordError, ErrorCode, from_rpc_error
from ..types import Retry, State
from ._wait import within

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("concord")

#: Shortest ping interval, whatever the TTL (seconds).
PING_INTERVAL_MIN_S = 0.010
#: Shortest wait for a new stream's first answer (seconds).
FIRST_ANSWER_MIN_S = 0.020
#: The smallest suspend share: below it a session would be suspended between pings.
SUSPEND_SHARE_MIN = 0.1
#: The give-up share of the TTL unless the client was given another.
GIVE_UP_SHARE_DEFAULT = 2.0
#: The give-up share's bounds: never before the server could expire the session,
#: never unbounded.
GIVE_UP_SHARE_MIN = 1.0
GIVE_UP_SHARE_MAX = 10.0


@dataclasses.dataclass(frozen=True)
class Timing:
    """How the task times its pings and states, from the granted TTL."""

    ping: float
    suspend_after: float
    #: No answer for this long (the give-up time, longer than the TTL): LOST.
    give_up_after: float
    stream_silence_max: float
    first_answer_max: float

    @classmethod
    def of(cls, ttl_ms: int, suspend_share: float, give_up_share: float = GIVE_UP_SHARE_DEFAULT) -> Timing:
        ttl = max(ttl_ms, 0) / 1000.0
        share = min(max(suspend_share, SUSPEND_SHARE_MIN), 1.0) if math.isfinite(suspend_share) else 0.5
        give_up = (
            min(max(give_up_share, GIVE_UP_SHARE_MIN), GIVE_UP_SHARE_MAX)
            if math.isfinite(give_up_share)
            else GIVE_UP_SHARE_DEFAULT
        )
        ping = max(ttl / 3, PING_INTERVAL_MIN_S)
        return cls(
            ping=ping,
            suspend_after=ttl * share,
            give_up_after=ttl * give_up,
            stream_silence_max=ping * 1.5,
            first_answer_max=max(ping / 4, FIRST_ANSWER_MIN_S),
        )


class _End(enum.Enum):
    EXPIRED = "expired"
    BROKEN = "broken"
    SILENT = "silent"


class Session:
    """One open session of a client, kept alive by a task on the client's loop."""

    def __init__(
        self,
        client: Client,
        session_id: int,
        ttl_ms: int,
        suspend_share: float,
        give_up_share: float = GIVE_UP_SHARE_DEFAULT,
    ) -> None:
        self.client = client
        self.id = session_id
        self.ttl_ms = ttl_ms
        self.timing = Timing.of(ttl_ms, suspend_share, give_up_share)
        #: Set once this session published LOST or CLOSED: nothing follows.
        self.ended = False
        self._loop = asyncio.get_running_loop()
        #: Loop time of the last answered ping (at first: the open).
        self._last = self._loop.time()
        #: The NOT_LEADER that ended the last KeepAlive stream (its hint says where
        #: the next stream goes).
        self._refusal: ConcordError | None = None
        self._task: asyncio.Task[None] = self._loop.create_task(self._keep_alive())

    async def stop(self) -> None:
        """Stops the pings (does not close the session on the server)."""
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    # -- the clock half: time since the last answer -------------------------------

    def _answered(self) -> None:
        self._last = self._loop.time()
        if self.client.state is State.SUSPENDED:
            self.client._publish(self, State.RECONNECTED)

    async def _until_lost(self) -> None:
        """Returns once no ping has been answered for the give-up time, having
        published SUSPENDED on the way (at the suspend share). A whole TTL without an
        answer is not LOST by itself: only a server says the session expired."""
        t = self.timing
        while True:
            after = t.give_up_after if self.client.state is State.SUSPENDED else t.suspend_after
            await asyncio.sleep(max(self._last + after - self._loop.time(), 0.0))
            silent_for = self._loop.time() - self._last
            if silent_for >= t.give_up_after:
                return
            if silent_for >= t.suspend_after:
                self.client._publish(self, State.SUSPENDED)

    # -- the answer half: streams -------------------------------------------------

    async def _keep_alive(self) -> None:
        backoff = Retry(delay=max(self.timing.ping / 8, 0.005), max_delay=self.timing.ping)
        failures = 0
        lost = self._loop.create_task(self._until_lost())
        stream: asyncio.Task[tuple[_End, bool]] | None = None
        try:
            while True:
                stream = self._loop.create_task(self._run_stream())
                done, _ = await asyncio.wait({stream, lost}, return_when=asyncio.FIRST_COMPLETED)
                if lost in done:
                    break
                end, answered = stream.result()
                if end is _End.EXPIRED:
                    break
                refusal, self._refusal = self._refusal, None
                if refusal is not None:
                    self.client._after_not_leader(refusal)  # to the leader it named
                else:
                    self.client._rotate()
                if end is _End.SILENT:
                    continue
                failures = 1 if answered else failures + 1
                done, _ = await asyncio.wait({lost}, timeout=backoff.backoff(failures))
                if lost in done:
                    break
        finally:
            # Also when stop() cancels this task: nothing of it may outlive it.
            tasks = [t for t in (lost, stream) if t is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.client._publish(self, State.LOST)

    def _ping(self) -> session_pb2.KeepAliveRequest:
        return session_pb2.KeepAliveRequest(session_id=self.id, min_zxid=self.client.last_zxid)

    async def _run_stream(self) -> tuple[_End, bool]:
        """One KeepAlive stream until it ends; returns how, and whether it answered."""
        t = self.timing
        loop = self._loop
        call = self.client._endpoint().session.KeepAlive()
        answered = False
        read: asyncio.Future[object] | None = None
        deadline = loop.time() + t.first_answer_max
        next_ping = loop.time() + t.ping
        try:
            if not await _write(call, self._ping(), t.first_answer_max):
                return _End.SILENT, False
            while True:
                now = loop.time()
                if now >= deadline:
                    return _End.SILENT, answered
                if now >= next_ping:
                    next_ping = now + t.ping
                    if not await _write(call, self._ping(), deadline - now):
                        return _End.SILENT, answered
                    continue
                if read is None:
                    read = asyncio.ensure_future(call.read())
                done, _ = await asyncio.wait({read}, timeout=min(deadline, next_ping) - now)
                if not done:
                    continue
                resp, read = read.result(), None
                if resp is grpc.aio.EOF:
                    return _End.BROKEN, answered
                assert isinstance(resp, session_pb2.KeepAliveResponse)
                self.client._saw(resp.header.zxid)
                if resp.expired and resp.session_id in (self.id, 0):
                    return _End.EXPIRED, answered
                answered = True
                deadline = loop.time() + t.stream_silence_max
                self._answered()
        except grpc.RpcError as e:
            err = from_rpc_error(e, write=False)
            if err.code is ErrorCode.NOT_LEADER:
                self._refusal = err
            return (_End.EXPIRED if err.code is ErrorCode.SESSION_EXPIRED else _End.BROKEN), answered
        except (grpc.aio.UsageError, asyncio.InvalidStateError, OSError):
            return _End.BROKEN, answered
        except Exception:
            # Whatever else broke this stream, the session is not lost by it: the
            # next stream (or the clock) decides.
            log.exception("a KeepAlive stream failed")
            return _End.BROKEN, answered
        finally:
            if read is not None:
                read.cancel()
            call.cancel()


async def _write(call: grpc.aio.StreamStreamCall, req: session_pb2.KeepAliveRequest, limit: float) -> bool:
    """Writes one ping; False when it could not be written within ``limit`` seconds.
    (``within``, not asyncio.wait_for: a keep-alive stream cancelled by ``stop()``
    whose cancellation wait_for swallowed would ping on for ever.)"""
    try:
        await within(call.write(req), max(limit, 0.001))
    except asyncio.TimeoutError:
        return False
    return True
