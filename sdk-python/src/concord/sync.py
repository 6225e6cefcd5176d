"""``concord.Client``: the blocking client, a facade over ``concord.aio.Client``.

::

    caller thread ──run_coroutine_threadsafe──▶ private loop thread ("concord-io")
       blocks on the answer                      runs the aio core: calls, keep-alives
    listener thread ("concord-listener") ◄── state changes (never on the loop)

Every method hands the aio core's coroutine to the loop and waits for it; nothing is
written twice. Listeners run on their own thread, so a listener may call the client.
The loop thread refuses to wait on itself (RuntimeError instead of a deadlock).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from types import TracebackType
from typing import Any, Callable, Coroutine, TypeVar

from . import _recipes_sync as recipes
from . import aio
from ._listeners import Listener
from ._transaction import OpResult, TransactionOps
from .types import TLS, Fence, Retry, Stat, State

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever on a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        #: Set by stop(): the loop takes no more work.
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="concord-io", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the loop and waits for its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking Concord call on the client's own I/O loop")
        if self._stopped or self.loop.is_closed():
            coro.close()
            raise RuntimeError("the client is closed")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self.loop.close()


class Client:
    """A blocking Concord client with one session (kazoo's ``KazooClient``).

    The arguments are ``concord.aio.Client``'s. Use ``with Client(...) as c:`` or
    ``start()`` / ``stop()`` / ``close()``.
    """

    def __init__(
        self,
        hosts: str = f"127.0.0.1:{aio.client.DEFAULT_PORT}",
        session_timeout: float = 10.0,
        *,
        tls: TLS | None = None,
        retry: Retry | None = None,
        call_timeout: float | None = None,
        suspend_share: float = 0.5,
    ) -> None:
        self._aio = aio.Client(
            hosts,
            session_timeout,
            tls=tls,
            retry=retry,
            call_timeout=call_timeout,
            suspend_share=suspend_share,
        )
        self._io = _LoopThread()

    @property
    def aio(self) -> aio.Client:
        """The asyncio core this client drives (use it only on its loop)."""
        return self._aio

    @property
    def state(self) -> State:
        return self._aio.state

    @property
    def connected(self) -> bool:
        return self._aio.connected

    @property
    def session_id(self) -> int | None:
        return self._aio.session_id

    @property
    def session_ttl_ms(self) -> int | None:
        return self._aio.session_ttl_ms

    @property
    def last_zxid(self) -> int:
        return self._aio.last_zxid

    def add_listener(self, listener: Listener) -> None:
        """Calls ``listener(state)`` on every change of state, in order, on the client's
        listener thread: it may call this client."""
        self._aio.add_listener(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._aio.remove_listener(listener)

    def start(self, timeout: float = 15.0) -> None:
        self._io.run(self._aio.start(timeout))

    def stop(self) -> None:
        self._io.run(self._aio.stop())

    def close(self) -> None:
        """Stops the session (errors ignored), closes the channels and the I/O thread."""
        try:
            self._io.run(self._aio.close())
        finally:
            self._io.stop()

    def __enter__(self) -> Client:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        finally:
            self.close()

    def get(self, path: str, *, linearizable: bool = False) -> tuple[bytes, Stat]:
        return self._io.run(self._aio.get(path, linearizable=linearizable))

    def exists(self, path: str, *, linearizable: bool = False) -> Stat | None:
        return self._io.run(self._aio.exists(path, linearizable=linearizable))

    def get_children(self, path: str, *, linearizable: bool = False) -> list[str]:
        return self._io.run(self._aio.get_children(path, linearizable=linearizable))

    def sync(self, path: str = "/") -> int:
        return self._io.run(self._aio.sync(path))

    def create(
        self,
        path: str,
        value: bytes = b"",
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        *,
        fence: Fence | None = None,
    ) -> str:
        return self._io.run(self._aio.create(path, value, ephemeral, sequence, makepath, fence=fence))

    def set(self, path: str, value: bytes, version: int = -1, *, fence: Fence | None = None) -> Stat:
        return self._io.run(self._aio.set(path, value, version, fence=fence))

    def delete(
        self, path: str, version: int = -1, recursive: bool = False, *, fence: Fence | None = None
    ) -> None:
        self._io.run(self._aio.delete(path, version, recursive, fence=fence))

    def ensure_path(self, path: str) -> None:
        self._io.run(self._aio.ensure_path(path))

    def transaction(self) -> Transaction:
        return Transaction(self)

    # -- recipes (concord._recipes_sync, over concord.aio.recipes) -----------------

    @property
    def aio_loop(self) -> asyncio.AbstractEventLoop:
        """The private loop the aio core runs on."""
        return self._io.loop

    def Lock(self, name: str, identifier: str | None = None) -> recipes.Lock:
        """kazoo's Lock on the server's Lock service, owned by this client's session."""
        return recipes.Lock(self, name, identifier)

    def Semaphore(self, name: str, max_leases: int = 1, identifier: str | None = None) -> recipes.Semaphore:
        """kazoo's Semaphore: at most ``max_leases`` holders of ``name`` at once."""
        return recipes.Semaphore(self, name, max_leases, identifier)

    def Election(self, name: str, identifier: str | None = None) -> recipes.Election:
        """kazoo's Election: ``run(func)`` campaigns, runs func while leader, resigns."""
        return recipes.Election(self, name, identifier)

    def LeaderLatch(self, name: str, id: str | None = None) -> recipes.LeaderLatch:
        """Curator's LeaderLatch on election ``name``."""
        return recipes.LeaderLatch(self, name, id)

    def LeaderSelector(
        self,
        name: str,
        take_leadership: Callable[[recipes.Leadership], Any],
        id: str | None = None,
        auto_requeue: bool = False,
    ) -> recipes.LeaderSelector:
        """Curator's LeaderSelector: runs ``take_leadership`` while it leads ``name``."""
        return recipes.LeaderSelector(self, name, take_leadership, id, auto_requeue)


class Transaction(TransactionOps):
    """kazoo's transaction (see ``concord.aio.Transaction`` for the results)."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self._client = client

    def commit(self, *, fence: Fence | None = None) -> list[OpResult]:
        ops, ephemeral = self._take()
        return self._client._io.run(self._client._aio._commit(ops, ephemeral, fence))

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
