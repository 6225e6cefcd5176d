"""Connection states against a real server that is SIGSTOPped, and listeners that
call the client without deadlocking it."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

import grpc
import pytest

import concord
import concord.aio
from concord import State
from concord._proto import session_pb2, session_pb2_grpc

from conftest import Server, eventually


class Recorder:
    """A listener that records the states it hears, and from which thread."""

    def __init__(self) -> None:
        self.states: list[State] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, state: State) -> None:
        with self._lock:
            self.states.append(state)
            self.threads.add(threading.current_thread().name)

    async def heard(self, state: State, timeout_s: float) -> None:
        async def cond() -> bool:
            with self._lock:
                return state in self.states

        await eventually(f"the listener hears {state} (heard {self.states})", cond, timeout_s)

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[State]:
        """The states heard once there are ``count`` (listeners may still run after
        close() returns); fails after ``timeout_s``."""
        asyncio.run(eventually(f"{count} states (heard {self.states})", self._has(count), timeout_s))
        return list(self.states)

    def _has(self, count: int) -> Any:
        async def cond() -> bool:
            with self._lock:
                return len(self.states) >= count

        return cond


def _start_with(kind: str, server: Server, rec: Recorder, body: Any, ttl_s: float) -> None:
    if kind == "aio":

        async def main() -> None:
            c = concord.aio.Client(server.addr, session_timeout=ttl_s)
            c.add_listener(rec)
            try:
                await c.start()
                await asyncio.wait_for(body(c), 30)
            finally:
                await c.close()

        asyncio.run(main())
    else:
        from conftest import SyncAdapter

        s = concord.Client(server.addr, session_timeout=ttl_s)
        s.add_listener(rec)
        try:
            s.start()
            asyncio.run(asyncio.wait_for(body(SyncAdapter(s)), 30))
        finally:
            s.close()


def test_a_short_stall_suspends_and_reconnects_the_same_session(own_server: Server, kind: str) -> None:
    rec = Recorder()

    async def body(c: Any) -> None:
        await rec.heard(State.CONNECTED, 5)
        path = await c.create("/mine", ephemeral=True)
        first = c.session_id
        own_server.stop()
        try:
            # Suspended at half the 3 s TTL without an answer, lost only at twice it.
            await rec.heard(State.SUSPENDED, 5)
        finally:
            own_server.cont()
        await rec.heard(State.RECONNECTED, 5)
        assert c.state is State.RECONNECTED and c.connected and c.session_id == first
        stat = await c.exists(path)
        assert stat is not None and stat.ephemeral_owner == first

    _start_with(kind, own_server, rec, body, ttl_s=3.0)
    want = [State.CONNECTED, State.SUSPENDED, State.RECONNECTED, State.CLOSED]
    assert rec.wait_for(len(want)) == want
    assert rec.threads == {"concord-listener_0"}


def test_a_stall_longer_than_the_ttl_loses_the_session(own_server: Server, kind: str) -> None:
    rec = Recorder()

    async def body(c: Any) -> None:
        await rec.heard(State.CONNECTED, 5)
        path = await c.create("/mine", ephemeral=True)
        own_server.stop()
        try:
            await rec.heard(State.LOST, 5)
        finally:
            own_server.cont()
        assert c.state is State.LOST and not c.connected

        # The server expires the unpinged session, and its ephemeral with it.
        async def gone() -> bool:
            return await c.exists(path) is None

        await eventually("the ephemeral goes with the session", gone, 10)
        with pytest.raises(concord.SessionExpiredError):
            await c.create("/again", ephemeral=True)
        assert c.state is State.LOST  # it never comes back

    _start_with(kind, own_server, rec, body, ttl_s=1.0)
    assert rec.states == [State.CONNECTED, State.SUSPENDED, State.LOST]


def test_the_server_saying_expired_loses_the_session(server: Server, kind: str) -> None:
    rec = Recorder()

    async def body(c: Any) -> None:
        await rec.heard(State.CONNECTED, 5)
        async with grpc.aio.insecure_channel(server.addr) as ch:
            await session_pb2_grpc.SessionStub(ch).Close(
                session_pb2.CloseSessionRequest(session_id=c.session_id), timeout=10
            )
        await rec.heard(State.LOST, 5)

    _start_with(kind, server, rec, body, ttl_s=1.0)
    assert rec.states == [State.CONNECTED, State.LOST]


def test_a_listener_may_call_the_sync_client(server: Server, root: str) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    c = concord.Client(server.addr)

    def listener(state: State) -> None:
        if state is State.CONNECTED:
            try:
                path = c.create(root, b"from a callback", ephemeral=True)
                answers.put(c.get(path)[0])
            except Exception as e:  # reported to the test below
                answers.put(e)

    c.add_listener(listener)
    try:
        c.start()
        assert answers.get(timeout=10) == b"from a callback"
    finally:
        c.close()


def test_a_blocking_call_on_the_io_loop_fails_instead_of_deadlocking(server: Server) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    c = concord.Client(server.addr)

    async def on_loop(state: State) -> None:
        try:
            c.exists("/")
        except RuntimeError as e:
            answers.put(e)

    c.aio.add_listener(on_loop)
    try:
        c.start()
        assert isinstance(answers.get(timeout=10), RuntimeError)
        assert c.exists("/") is not None
    finally:
        c.close()


def test_listeners_of_the_aio_client_run_off_the_loop_and_may_call_it(server: Server, root: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        c = concord.aio.Client(server.addr)

        def blocking(state: State) -> None:
            # Not on the loop: waiting here for the client leaves the loop free.
            assert threading.current_thread() is not threading.main_thread()
            if state is State.CONNECTED:
                path = asyncio.run_coroutine_threadsafe(c.create(root, b"x"), loop).result(10)
                data = asyncio.run_coroutine_threadsafe(c.get(path), loop).result(10)[0]
                loop.call_soon_threadsafe(done.set_result, data)

        c.add_listener(blocking)
        async with c:
            assert await asyncio.wait_for(done, 10) == b"x"

    asyncio.run(main())


def test_stop_on_a_stalled_server_gives_up_within_the_ttl(own_server: Server) -> None:
    import time

    c = concord.Client(own_server.addr, session_timeout=1.0)
    try:
        c.start()
        own_server.stop()
        try:
            began = time.monotonic()
            with pytest.raises(concord.TimeoutError):
                c.stop()
            assert time.monotonic() - began < 5
            assert c.state is State.LOST
        finally:
            own_server.cont()
    finally:
        c.close()
