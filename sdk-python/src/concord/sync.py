"""``concord.Client``: the blocking client, a facade over ``concord.aio.Client``.

::

    caller thread ──unary calls: the core's plans, blocking grpcio──▶ the host the core uses
       │            (concord._plan.drive_blocking; no hop)
       └─ streams, session, recipes ──run_coroutine_threadsafe──▶ private loop thread
                                                                   ("concord-io"): the aio core
    listener thread ("concord-listener") ◄── state changes (never on the loop)

Unary calls (get, set, create, ...) carry out the aio core's own plans (the same
requests, retry policy, zxid bookkeeping, session ownership and errors) on the
caller's thread through blocking channels to the same hosts: no hop to the loop,
which halved their rate. Everything else (the session's keep-alives, watches, caches,
recipes) hands the core's coroutine to the loop and waits for it; nothing is written
twice. Listeners run on their own thread, so a listener may call the client. The loop
thread refuses to wait on itself (RuntimeError instead of a deadlock).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from types import TracebackType
from typing import Any, Callable, Coroutine, Iterator, Literal, Sequence, TypeVar, overload

import grpc

from . import _recipes_sync as recipes
from . import _tls, aio
from ._blocking_stream import BlockingStream
from ._listeners import Listener
from ._plan import Attempt, Plan, drive_blocking, retry_call
from ._transaction import OpResult, TransactionOps, flag, check_acl
from .aio.cache import Cache as _AioCache
from .aio.cache import CacheListener
from .aio.cache import ChildrenCache as _AioChildrenCache
from .aio.cache import ChildrenWatch as _AioChildrenWatch
from .aio.cache import NodeCache as _AioNodeCache
from .aio.cache import DataWatch as _AioDataWatch
from .aio.cache import _FunctionWatch
from .aio.watch import RESUME_FOREVER
from .aio._stream import drain_loop
from .aio.watch import Watch as _AioWatch
from .aio.client import CHILDREN_FIRES, EXISTS_FIRES, GET_FIRES, WatchFunc, _Endpoint, watch_func
from .errors import ConcordError, ErrorCode, Origin, deadline_error, from_rpc_error, make_error
from .events import EventKind, Node, WatchEvent
from .types import (
    ACL,
    DEFAULT_RETRY,
    TLS,
    BackupInfo,
    Fence,
    Members,
    Retry,
    ServerStatus,
    Stat,
    State,
    WhoAmI,
)

#: How long the DataWatch / ChildrenWatch decorators wait for the first call to be
#: queued when the client has no call timeout.
FIRST_CALL_WAIT_S = 10.0

T = TypeVar("T")
_FW = TypeVar("_FW", bound=_FunctionWatch)


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
        drain_loop(self.loop)  # stopped: nothing is left pending as it closes

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


class _BlockingCalls:
    """The sync client's unary calls, made on the caller's thread: the core's plans
    (``concord._plan``) driven by ``drive_blocking`` over blocking grpcio channels, one
    per host of the core's list (the same options and TLS), at the host the core's
    calls go to (one index moves both). What an attempt leaves behind is the core's:
    ``_saw`` records the zxid, ``_failed`` moves to the next host or the leader."""

    def __init__(self, core: aio.Client, io: _LoopThread) -> None:
        self._core = core
        self._io = io
        #: The endpoints of ``_hosts``, the core's host list they were made for
        #: (``set_hosts`` gives the core a new list: they are made again).
        self._endpoints: list[_Endpoint] | None = None
        self._hosts: list[str] | None = None
        #: Every endpoint made, by ``host:port`` (closed by ``close()``).
        self._pool: dict[str, _Endpoint] = {}
        self._lock = threading.Lock()

    def run(self, plan: Plan[T]) -> T:
        """Carries ``plan`` out on this thread and returns its result."""
        if self._io._stopped:
            plan.close()
            raise RuntimeError("the client is closed")
        if threading.current_thread() is self._io._thread:
            plan.close()
            raise RuntimeError("a blocking Concord call on the client's own I/O loop")
        return drive_blocking(plan, self._attempt)

    def _endpoint(self) -> _Endpoint:
        core = self._core
        if core._closed:
            raise make_error(ErrorCode.BAD_STATE, "the client is closed")
        endpoints = self._endpoints
        if endpoints is None or self._hosts is not core.hosts:
            with self._lock:
                hosts = core.hosts
                if self._endpoints is None or self._hosts is not hosts:
                    self._endpoints = [self._pooled(h) for h in hosts]
                    self._hosts = hosts
                endpoints = self._endpoints
        return endpoints[core._current % len(endpoints)]

    def _pooled(self, target: str) -> _Endpoint:
        ep = self._pool.get(target)
        if ep is None:
            ep = self._pool[target] = _Endpoint(target, self._core.tls, blocking=True)
        return ep

    def _attempt(self, step: Attempt) -> Any:
        """One attempt, blocking, on the current host (``aio.Client._attempt``'s twin
        for the transport: the deadline is grpc's, its expiry the same TimeoutError)."""
        ep = self._endpoint()
        try:
            resp = step.method(ep)(step.request, timeout=step.limit)
        except grpc.RpcError as e:
            err = from_rpc_error(e, write=step.write)
            if (
                step.limit is not None
                and err.origin is Origin.TRANSPORT
                and e.code() is grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
            ):
                err = deadline_error(write=step.write, limit_s=step.limit)
            if _tls.suspect(err, self._core.tls):
                err = self._core._diagnose(err, ep)
            raise self._core._failed(err) from None
        self._core._saw(resp.header.zxid)
        return resp

    def close(self) -> None:
        with self._lock:
            endpoints, self._endpoints, self._pool = list(self._pool.values()), None, {}
        for ep in endpoints:
            ep.channel.close()


class Client:
    """A blocking Concord client with one session (kazoo's ``KazooClient``).

    The arguments are ``concord.aio.Client``'s. Use ``with Client(...) as c:`` or
    ``start()`` / ``stop()`` / ``close()``.
    """

    def __init__(
        self,
        hosts: str = f"127.0.0.1:{aio.client.DEFAULT_PORT}",
        session_timeout: float | None = None,
        *,
        tls: TLS | None = None,
        retry: Retry | None = DEFAULT_RETRY,
        call_timeout: float | None = None,
        suspend_share: float = 0.5,
        give_up_share: float = 2.0,
        randomize_hosts: bool = True,
        timeout: float | None = None,
        client_id: tuple[int, bytes] | None = None,
    ) -> None:
        self._aio = aio.Client(
            hosts,
            session_timeout,
            tls=tls,
            retry=retry,
            call_timeout=call_timeout,
            suspend_share=suspend_share,
            give_up_share=give_up_share,
            randomize_hosts=randomize_hosts,
            timeout=timeout,
            client_id=client_id,
        )
        self._io = _LoopThread()
        self._calls = _BlockingCalls(self._aio, self._io)

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
    def client_id(self) -> tuple[int, bytes] | None:
        """kazoo's ``client_id``: ``(session_id, b"")`` while the session lives."""
        return self._aio.client_id

    @property
    def session_ttl_ms(self) -> int | None:
        return self._aio.session_ttl_ms

    @property
    def retry_policy(self) -> Retry | None:
        """The client's retry policy (``retry=`` at construction)."""
        return self._aio.retry

    def retry(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """kazoo's ``client.retry(func, *args, **kwargs)``: calls ``func`` and calls it
        again, under the client's retry policy (``DEFAULT_RETRY`` if it has none),
        while it fails retry-safe (``ConcordError.retry_safe``: nothing was done, or a
        read). The client's own calls retry by themselves already, writes whose
        outcome is unknown included; this is for functions made of several calls."""
        return retry_call(self._aio.retry or DEFAULT_RETRY, func, *args, **kwargs)

    @property
    def last_zxid(self) -> int:
        return self._aio.last_zxid

    @property
    def hosts(self) -> list[str]:
        """The ``host:port``s the client uses (``set_hosts`` changes them)."""
        return self._aio.hosts

    @property
    def chroot(self) -> str:
        """kazoo's ``chroot``: the path every path of the client is below (``"/app"``
        from ``"host:7181/app"``), ``""`` without one."""
        return self._aio.chroot

    def set_hosts(self, hosts: str, randomize_hosts: bool | None = None) -> None:
        """kazoo's ``set_hosts``: the client uses the hosts of ``hosts`` from now on;
        the session, and the streams open now, live on. See
        ``concord.aio.Client.set_hosts``."""

        async def change() -> None:
            self._aio.set_hosts(hosts, randomize_hosts)

        self._io.run(change())

    def unchroot(self, path: str) -> str:
        """kazoo's ``unchroot``: a server's path without the client's chroot."""
        return self._aio.unchroot(path)

    def add_listener(self, listener: Listener) -> None:
        """Calls ``listener(state)`` on every change of state, in order, on the client's
        listener thread: it may call this client. One that returns True is removed
        (kazoo's)."""
        self._aio.add_listener(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stops calling ``listener``: the states not handed to it yet are dropped (a
        call that runs already runs on)."""
        self._aio.remove_listener(listener)

    def start(self, timeout: float = 15.0) -> None:
        self._io.run(self._aio.start(timeout))

    def stop(self) -> None:
        self._io.run(self._aio.stop())

    def restart(self) -> None:
        """kazoo's ``restart()``: ``stop()``, then ``start()`` (a new session)."""
        self._io.run(self._aio.restart())

    def close(self) -> None:
        """Stops the session (errors ignored), closes the channels and the I/O thread."""
        try:
            self._io.run(self._aio.close())
        finally:
            self._io.stop()
            self._calls.close()

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

    def get(
        self, path: str, watch: WatchFunc | None = None, *, linearizable: bool = False
    ) -> tuple[bytes, Stat]:
        """See ``concord.aio.Client.get`` (``watch``: kazoo's one-shot callback)."""
        fn = watch_func(watch)
        data, stat, zxid = self._calls.run(self._aio._get_at(path, linearizable))
        if fn is not None:
            self._io.run(self._aio._watch_once(path, GET_FIRES, zxid, fn))
        return data, stat

    def exists(
        self, path: str, watch: WatchFunc | None = None, *, linearizable: bool = False
    ) -> Stat | None:
        """See ``concord.aio.Client.exists``."""
        fn = watch_func(watch)
        stat, zxid = self._calls.run(self._aio._exists_at(path, linearizable))
        if fn is not None:
            self._io.run(self._aio._watch_once(path, EXISTS_FIRES, zxid, fn))
        return stat

    @overload
    def get_children(
        self,
        path: str,
        watch: WatchFunc | None = None,
        include_data: Literal[False] = False,
        *,
        linearizable: bool = False,
    ) -> list[str]: ...
    @overload
    def get_children(
        self, path: str, watch: WatchFunc | None, include_data: Literal[True], *, linearizable: bool = False
    ) -> tuple[list[str], Stat]: ...
    @overload
    def get_children(
        self, path: str, *, include_data: Literal[True], linearizable: bool = False
    ) -> tuple[list[str], Stat]: ...

    def get_children(
        self,
        path: str,
        watch: WatchFunc | None = None,
        include_data: bool = False,
        *,
        linearizable: bool = False,
    ) -> list[str] | tuple[list[str], Stat]:
        """See ``concord.aio.Client.get_children``."""
        fn = watch_func(watch)
        with_stat = flag("include_data", include_data)
        names, stat, zxid = self._calls.run(self._aio._children(path, linearizable))
        if fn is not None:
            self._io.run(self._aio._watch_once(path, CHILDREN_FIRES, zxid, fn))
        return (names, stat) if with_stat else names

    def sync(self, path: str = "/") -> int:
        return self._calls.run(self._aio._sync(path))

    @overload
    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Sequence[ACL] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: Literal[False] = False,
        *,
        fence: Fence | None = None,
    ) -> str: ...
    @overload
    def create(
        self,
        path: str,
        value: bytes,
        acl: Sequence[ACL] | None,
        ephemeral: bool,
        sequence: bool,
        makepath: bool,
        include_data: Literal[True],
        *,
        fence: Fence | None = None,
    ) -> tuple[str, Stat]: ...
    @overload
    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Sequence[ACL] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        *,
        include_data: Literal[True],
        fence: Fence | None = None,
    ) -> tuple[str, Stat]: ...

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Sequence[ACL] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
        *,
        fence: Fence | None = None,
    ) -> str | tuple[str, Stat]:
        """kazoo's order of arguments; see ``concord.aio.Client.create``."""
        check_acl(acl)
        with_stat = flag("include_data", include_data)
        created, stat = self._calls.run(
            self._aio._create_node(path, value, ephemeral, sequence, makepath, fence)
        )
        return (created, stat) if with_stat else created

    def set(self, path: str, value: bytes, version: int = -1, *, fence: Fence | None = None) -> Stat:
        return self._calls.run(self._aio._set(path, value, version, fence))

    def delete(
        self, path: str, version: int = -1, recursive: bool = False, *, fence: Fence | None = None
    ) -> None:
        self._calls.run(self._aio._delete(path, version, recursive, fence))

    def ensure_path(self, path: str, acl: Sequence[ACL] | None = None) -> None:
        check_acl(acl)
        self._calls.run(self._aio._ensure_path(path))

    def transaction(self) -> Transaction:
        return Transaction(self)

    def get_acls(self, path: str) -> tuple[list[ACL], Stat]:
        """kazoo's ``get_acls``: ``(OPEN_ACL_UNSAFE, Stat)``; see
        ``concord.aio.Client.get_acls``."""
        return self._calls.run(self._aio._get_acls(path))

    def set_acls(self, path: str, acls: Sequence[ACL], version: int = -1) -> Stat:
        """kazoo's ``set_acls``: ``OPEN_ACL_UNSAFE`` only, nothing changes; see
        ``concord.aio.Client.set_acls``."""
        return self._calls.run(self._aio._set_acls(path, acls, version))

    # -- the ensemble (see concord.aio.Client) -------------------------------------

    def status(self) -> ServerStatus:
        """``Cluster/Status`` of the server this client's calls go to now."""
        return self._calls.run(self._aio._status())

    def members(self) -> Members:
        """``Cluster/Members`` as that server knows them (exact on the leader).
        Needs an admin."""
        return self._calls.run(self._aio._members())

    def who_am_i(self) -> WhoAmI:
        """``Cluster/WhoAmI``: who the server takes this client for."""
        return self._calls.run(self._aio._who_am_i())

    def save_snapshot(
        self, path: str | os.PathLike[str], *, min_zxid: int = 0, linearizable: bool = False
    ) -> BackupInfo:
        """A backup file of the server's state at ``path``, as ``concordctl snapshot
        save`` writes it; see ``concord.aio.Client.save_snapshot``. Needs an admin."""
        return self._io.run(
            self._aio.save_snapshot(path, min_zxid=min_zxid, linearizable=linearizable)
        )

    # -- watches and caches -------------------------------------------------------

    def watch(
        self,
        path: str,
        recursive: bool = False,
        start_zxid: int | None = None,
        *,
        kinds: list[EventKind] | None = None,
        with_data: bool = True,
        once: bool = False,
        progress_interval_ms: int = 0,
        resume: Retry | None = RESUME_FOREVER,
    ) -> Watch:
        """A watch of ``path``, open at return (the server's refusal is raised
        here): ``for event in c.watch(path):`` yields each ``WatchEvent`` once, resuming
        by itself; see ``concord.aio.Client.watch``."""
        w = self._aio.watch(
            path,
            recursive,
            start_zxid,
            kinds=kinds,
            with_data=with_data,
            once=once,
            progress_interval_ms=progress_interval_ms,
            resume=resume,
        )
        self._io.run(w.start())
        return Watch(self._io, w)

    def Cache(self, path: str) -> Cache:
        """A cache of the subtree at ``path``, not started: ``with c.Cache(path) as
        cache:`` or ``cache.start()``; see ``concord.aio.cache.Cache``."""
        return Cache(self._io, self._aio.Cache(path))

    def NodeCache(self, path: str) -> NodeCache:
        """A cache of the one node at ``path`` (Curator's NodeCache), not started:
        ``with c.NodeCache(path) as cache:``; ``cache.current()``."""
        return NodeCache(self._io, self._aio.NodeCache(path))

    def ChildrenCache(self, path: str, with_data: bool = True) -> ChildrenCache:
        """A cache of the children of ``path`` (Curator's PathChildrenCache), not
        started: ``with c.ChildrenCache(path) as cache:``; ``cache.current()``."""
        return ChildrenCache(self._io, self._aio.ChildrenCache(path, with_data))

    @overload
    def DataWatch(self, path: str) -> Callable[[Callable[..., Any]], _AioDataWatch]: ...
    @overload
    def DataWatch(self, path: str, func: Callable[..., Any]) -> _AioDataWatch: ...

    def DataWatch(self, path: str, func: Callable[..., Any] | None = None) -> Any:
        """kazoo's DataWatch: ``@c.DataWatch(path)`` on ``fn(data, stat)`` or
        ``fn(data, stat, event)`` (or ``c.DataWatch(path, fn)``), called now and after each change (``None, None``
        while the node does not exist); returning False stops it. Returns once the
        first call is queued (or after the call timeout, 10 s without one, while no
        server answers: the watch keeps trying). What it returns calls ``fn`` when
        called, and has ``close()`` and ``stopped``; ``c.close()`` ends it too."""

        def decorate(fn: Callable[..., Any]) -> _AioDataWatch:
            return self._function_watch(_AioDataWatch(self._aio, path, fn))

        return decorate if func is None else decorate(func)

    @overload
    def ChildrenWatch(
        self, path: str, func: None = None, allow_session_lost: bool = True, send_event: bool = False
    ) -> Callable[[Callable[..., Any]], _AioChildrenWatch]: ...
    @overload
    def ChildrenWatch(
        self, path: str, func: Callable[..., Any], allow_session_lost: bool = True, send_event: bool = False
    ) -> _AioChildrenWatch: ...

    def ChildrenWatch(
        self,
        path: str,
        func: Callable[..., Any] | None = None,
        allow_session_lost: bool = True,
        send_event: bool = False,
    ) -> Any:
        """kazoo's ChildrenWatch, in kazoo's argument order: ``fn(children)`` (sorted
        names) now and after each change of the list (``send_event=True``:
        ``fn(children, event)``); returning False stops it; ``allow_session_lost=False``:
        it ends with the session. As ``DataWatch``."""

        def decorate(fn: Callable[..., Any]) -> _AioChildrenWatch:
            return self._function_watch(_AioChildrenWatch(self._aio, path, fn, send_event, allow_session_lost))

        return decorate if func is None else decorate(func)

    def _function_watch(self, w: _FW) -> _FW:
        async def begin() -> None:
            w.begin()

        self._io.run(begin())
        w._initialized.wait(self._aio.call_timeout or FIRST_CALL_WAIT_S)
        return w

    # -- recipes (concord._recipes_sync, over concord.aio.recipes) -----------------

    @property
    def aio_loop(self) -> asyncio.AbstractEventLoop:
        """The private loop the aio core runs on."""
        return self._io.loop

    def Lock(self, name: str, identifier: str | None = None) -> recipes.Lock:
        """kazoo's Lock on the server's Lock service, owned by this client's session."""
        return recipes.Lock(self, name, identifier)

    def SemaphoreMutex(self, name: str, identifier: str | None = None) -> recipes.SemaphoreMutex:
        """Curator's InterProcessSemaphoreMutex: a lock that is not re-entrant."""
        return recipes.SemaphoreMutex(self, name, identifier)

    def Semaphore(self, name: str, identifier: str | None = None, max_leases: int = 1) -> recipes.Semaphore:
        """kazoo's Semaphore (kazoo's argument order): at most ``max_leases`` holders of ``name`` at once."""
        return recipes.Semaphore(self, name, identifier, max_leases)

    def Election(
        self, name: str, identifier: str | None = None, *, value: bytes | None = None
    ) -> recipes.Election:
        """kazoo's Election: ``run(func)`` campaigns, runs func while leader, resigns;
        ``value`` (default: the identifier's bytes) is what it announces."""
        return recipes.Election(self, name, identifier, value)

    def LeaderLatch(self, name: str, id: str | None = None, *, value: bytes = b"") -> recipes.LeaderLatch:
        """Curator's LeaderLatch on election ``name``, announcing ``value`` while it leads."""
        return recipes.LeaderLatch(self, name, id, value)

    def LeaderSelector(
        self,
        name: str,
        take_leadership: Callable[[recipes.Leadership], Any],
        id: str | None = None,
        auto_requeue: bool = False,
        *,
        value: bytes = b"",
    ) -> recipes.LeaderSelector:
        """Curator's LeaderSelector: runs ``take_leadership`` while it leads ``name``,
        announcing ``value``."""
        return recipes.LeaderSelector(self, name, take_leadership, id, auto_requeue, value)

    def observe(self, name: str, *, resume: Retry | None = RESUME_FOREVER) -> recipes.LeaderObserver:
        """The leader changes of election ``name``, open at return (the server's
        refusal is raised here): ``for change in c.observe(name):`` yields each
        ``LeaderChange(zxid, leader)``, the current state first, resuming by itself;
        ``cancel()`` from any thread. See ``concord.aio.Client.observe``."""
        o = self._aio.observe(name, resume=resume)
        self._io.run(o.start())
        return recipes.LeaderObserver(self._io, o)


class Transaction(TransactionOps):
    """kazoo's transaction (see ``concord.aio.Transaction`` for the results)."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self._client = client

    def commit(self, *, fence: Fence | None = None) -> list[OpResult]:
        ops, ephemeral = self._take()
        return self._client._calls.run(self._client._aio._multi(ops, ephemeral, fence))

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


class Watch(BlockingStream[WatchEvent]):
    """The blocking twin of ``concord.aio.watch.Watch``: ``for event in watch``,
    ``next(timeout=None)``, ``cancel()``, ``with c.watch(path) as w:``."""

    def __init__(self, io: _LoopThread, watch: _AioWatch) -> None:
        super().__init__(io, watch)

    @property
    def path(self) -> str:
        return self._aio.path

    @property
    def last_zxid(self) -> int | None:
        """The newest zxid delivered or known complete."""
        return self._aio.last_zxid


class _SyncCache:
    """What the blocking twins of the aio caches share (reads need no loop)."""

    def __init__(self, io: _LoopThread, cache: Any) -> None:
        self._io = io
        self._aio = cache

    def start(self) -> None:
        """Opens the cache's watch (raising the server's refusal) and keeps the cache
        current from then on."""
        self._io.run(self._aio.start())

    def close(self) -> None:
        """Stops the cache; its data stays readable."""
        self._io.run(self._aio.aclose())

    def wait_initialized(self, timeout: float | None = None) -> bool:
        """Waits for the initial snapshot: True, or False if closed or timed out."""
        return self._aio._initialized.wait(timeout) and self._aio.initialized and not self._aio._closed

    def add_listener(self, listener: CacheListener) -> None:
        """``listener(event)`` for every CacheEvent, on the client's callback thread;
        one 1024 events behind loses the oldest and gets one LAGGED event."""
        self._aio.add_listener(listener)

    def remove_listener(self, listener: CacheListener) -> None:
        self._aio.remove_listener(listener)

    @property
    def initialized(self) -> bool:
        return self._aio.initialized

    @property
    def zxid(self) -> int:
        return self._aio.zxid

    @property
    def rebuilds(self) -> int:
        return self._aio.rebuilds

    @property
    def reconnects(self) -> int:
        return self._aio.reconnects

    @property
    def last_error(self) -> ConcordError | None:
        return self._aio.last_error

    def __enter__(self: _SC) -> _SC:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_SC = TypeVar("_SC", bound=_SyncCache)


class Cache(_SyncCache):
    """The blocking twin of ``concord.aio.cache.Cache`` (a subtree)."""

    _aio: _AioCache

    def get(self, path: str) -> Node | None:
        """The cached node at ``path``, or None."""
        return self._aio.get(path)

    def snapshot(self) -> tuple[int, list[Node]]:
        """``(zxid, [Node...])`` in path order, read at once."""
        return self._aio.snapshot()

    def __len__(self) -> int:
        return len(self._aio)


class NodeCache(_SyncCache):
    """The blocking twin of ``concord.aio.cache.NodeCache`` (one node)."""

    _aio: _AioNodeCache

    def current(self) -> Node | None:
        """The node as cached now, or None."""
        return self._aio.current()

    def get(self, path: str | None = None) -> Node | None:
        """``current()``; ``path``, if given, must be the cache's own."""
        return self._aio.get(path)


class ChildrenCache(_SyncCache):
    """The blocking twin of ``concord.aio.cache.ChildrenCache`` (a node's children)."""

    _aio: _AioChildrenCache

    def current(self) -> list[Node]:
        """The children as cached now, in name order."""
        return self._aio.current()

    def get(self, path: str) -> Node | None:
        """The cached child at ``path`` (a full path), or None."""
        return self._aio.get(path)

    def names(self) -> list[str]:
        """The children's names, sorted."""
        return self._aio.names()

    def __len__(self) -> int:
        return len(self._aio)
