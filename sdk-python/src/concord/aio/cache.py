"""Caches kept current by one resuming watch each: ``Cache`` (a whole subtree,
Curator's CuratorCache / the Rust SDK's TreeCache), ``NodeCache`` (one node) and
``ChildrenCache`` (a node's children), and kazoo's ``DataWatch`` and
``ChildrenWatch`` on the same machinery.

::

    Watch(initial_snapshot, resume forever)
       │ SnapshotNode... SnapshotDone z, then Event... (resumed from the last zxid)
       ▼
    _Core task ──▶ CacheState (pure: _cache_state.py) ──▶ CacheEvents ──▶ callbacks
       │             ▲ read by get() / snapshot() / zxid (under a lock: any thread)
       └ the watch ended with an error a resume cannot fix (it broke during the
         snapshot, ZXID_COMPACTED...): back off, open a new watch with a fresh
         snapshot, emit only the differences

There is never a gap: the snapshot reflects zxid z and the watch delivers every
change after z, resumed without loss or duplicates. A rebuild tells listeners
exactly what changed, so the cache converges on the server's tree. Callbacks run on
the client's callback thread, never on the loop, each listener or function through
its own mailbox of ``LISTENER_BACKLOG`` callbacks (``_callbacks.Mailbox``): a cache
listener that falls behind gets one LAGGED event for the events it lost, a watch
function skips to the newest state. Caches need no session.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .._cache_state import CacheState, Scope, ScopeKind
from .._cursor import EVENT, PROGRESS, SNAPSHOT_DONE, SNAPSHOT_NODE, STARTED
from .._callbacks import Mailbox, call_user
from .._proto import watch_pb2
from ..errors import BadArgumentsError, ConcordError, ErrorCode
from ..events import CacheEvent, CacheEventType, Node, WatchEvent
from ..types import Stat, State
from ._wait import within
from .watch import RESUME_FOREVER, Watch

if TYPE_CHECKING:
    from .client import Client

CacheListener = Callable[[CacheEvent], Any]
_FW = TypeVar("_FW", bound="_FunctionWatch")


class _Core:
    """The watch task and the state shared by the three kinds of cache."""

    def __init__(self, client: Client, scope: Scope, with_data: bool = True) -> None:
        self._client = client
        self._state = CacheState(scope)
        self._with_data = with_data
        #: Guards the state: the loop writes it, any thread may read it.
        self._lock = threading.Lock()
        self._watch: Watch | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Set once initialized or closed: for threads, and for the loop.
        self._initialized = threading.Event()
        self._initialized_aio = asyncio.Event()
        self._closed = False
        #: How many times the cache rebuilt from a fresh snapshot.
        self.rebuilds = 0
        #: How many streams its watches started (one Started message each).
        self.streams = 0
        #: The latest error of its watch (the cache retries by itself).
        self.last_error: ConcordError | None = None

    # -- lifecycle ------------------------------------------------------------------

    def _new_watch(self) -> Watch:
        scope = self._state.scope
        request = watch_pb2.WatchRequest(
            path=scope.root,
            recursive=scope.recursive,
            with_data=self._with_data,
            initial_snapshot=True,
        )
        return Watch(self._client, request, RESUME_FOREVER)

    async def start(self) -> None:
        """Opens the watch (raising the server's refusal) and starts the task."""
        if self._task is not None or self._closed:
            return
        watch = self._new_watch()
        await watch.start()
        self._begin(watch)

    def begin(self) -> None:
        """Starts the task without waiting: a refused first watch is retried (with
        back-off) as a rebuild would be. Call it on the loop."""
        if self._task is None and not self._closed:
            self._begin(None)

    def _begin(self, watch: Watch | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._watch = watch
        with self._lock:
            self._state.begin_snapshot()
        self._task = self._loop.create_task(self._run())
        self._client._track(self)

    def cancel(self) -> None:
        """Stops the cache (on the loop); the cached data stays readable."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        if self._watch is not None:
            self._watch.cancel()
        self._initialized.set()
        self._initialized_aio.set()

    async def aclose(self) -> None:
        self.cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if self._watch is not None:
            await self._watch.aclose()

    async def _run(self) -> None:
        failures = 0
        while not self._closed:
            watch = self._watch
            msg = None
            if watch is not None:
                try:
                    msg = await watch._message()
                except ConcordError as err:
                    self.last_error = err
            if msg is not None:
                if msg.WhichOneof("msg") == SNAPSHOT_DONE:
                    failures = 0
                self._feed(msg)
                continue
            if self._closed:
                return
            # The watch ended: open a new one with a fresh snapshot.
            first = watch is None
            while not self._closed:
                if not (first and failures == 0):  # a first open goes at once
                    await asyncio.sleep(RESUME_FOREVER.jittered(failures + 1))
                failures += 1
                fresh = self._new_watch()
                try:
                    await fresh.start()
                except ConcordError as err:
                    self.last_error = err
                    continue
                self._watch = fresh
                with self._lock:
                    self._state.begin_snapshot()
                    if not first:
                        self.rebuilds += 1
                break

    def _feed(self, msg: Any) -> None:
        """Applies one message and hands its events on."""
        kind = msg.WhichOneof("msg")
        with self._lock:
            was_initialized = self._state.initialized
            state = self._state
            if kind == STARTED:
                self.streams += 1
                events: list[CacheEvent] = []
            elif kind == SNAPSHOT_NODE:
                n = msg.snapshot_node
                events = state.on_snapshot_node(Node(str(n.path), bytes(n.data), Stat.of(n.stat)))
            elif kind == SNAPSHOT_DONE:
                events = state.on_snapshot_done(int(msg.snapshot_done.zxid))
            elif kind == EVENT:
                events = state.on_event(WatchEvent.of(msg.event))
            elif kind == PROGRESS:
                events = state.on_progress(int(msg.progress.zxid))
            else:
                events = []
        if events:
            self._emit(events, was_initialized)
        if self._state.initialized and not self._initialized.is_set():
            self._initialized.set()
            self._initialized_aio.set()

    def _emit(self, events: list[CacheEvent], was_initialized: bool) -> None:
        raise NotImplementedError

    # -- reads (any thread) -----------------------------------------------------------

    @property
    def initialized(self) -> bool:
        """True once the initial snapshot is in the cache."""
        return self._state.initialized

    @property
    def zxid(self) -> int:
        """The zxid the cache reflects (0 before the initial snapshot)."""
        return self._state.zxid

    @property
    def path(self) -> str:
        return self._state.scope.root

    @property
    def reconnects(self) -> int:
        """How many times the watch stream was reopened (resumed or rebuilt)."""
        return max(self.streams - 1, 0)

    async def wait_initialized(self, timeout: float | None = None) -> bool:
        """Waits until the initial snapshot is in the cache: True, or False if the
        cache was closed first or ``timeout`` passed."""
        try:
            await within(self._initialized_aio.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return self._state.initialized and not self._closed


class _Listened(_Core):
    """A cache with listeners: each has its own bounded mailbox (``LISTENER_BACKLOG``
    callbacks); one that falls behind loses its oldest events and gets one LAGGED
    event for them, then goes on."""

    def __init__(self, client: Client, scope: Scope, with_data: bool = True) -> None:
        super().__init__(client, scope, with_data)
        self._listeners: dict[CacheListener, Mailbox] = {}

    def add_listener(self, listener: CacheListener) -> None:
        """Calls ``listener(event)`` for every CacheEvent from now on, in order, on
        the client's callback thread (never on the loop). A listener more than
        ``LISTENER_BACKLOG`` (1024) events behind loses the oldest and is told how
        many with one ``CacheEvent(LAGGED, missed=n)``; the cache stays complete."""
        with self._lock:
            if listener not in self._listeners:
                self._listeners[listener] = self._mailbox(listener)

    def remove_listener(self, listener: CacheListener) -> None:
        """Stops calling ``listener`` (callbacks already queued for it are dropped)."""
        with self._lock:
            self._listeners.pop(listener, None)

    def _mailbox(self, listener: CacheListener) -> Mailbox:
        def run(event: CacheEvent) -> None:
            with self._lock:
                if self._listeners.get(listener) is not box:
                    return  # removed (perhaps added again, with a new mailbox)
            loop = self._loop
            if loop is not None:
                call_user(loop, listener, event)

        box = Mailbox(
            self._client._callbacks,
            run,
            lag=True,
            on_lag=lambda missed: run(CacheEvent(CacheEventType.LAGGED, missed=missed)),
        )
        return box

    def _emit(self, events: list[CacheEvent], was_initialized: bool) -> None:
        with self._lock:
            boxes = list(self._listeners.values())
        for event in events:
            for box in boxes:
                box.put(event)

    def close(self) -> None:
        """Stops the cache (call it on the loop; ``aclose()`` also waits)."""
        self.cancel()

    async def __aenter__(self: _L) -> _L:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


_L = TypeVar("_L", bound=_Listened)


class Cache(_Listened):
    """A subtree (its root included), kept current: Curator's CuratorCache. Made by
    ``Client.Cache(path)``; the root need not exist. ``async with c.Cache(path) as
    cache`` starts it and closes it; listeners added before ``start()`` see the
    initial contents as CREATED events, then INITIALIZED (once)."""

    def __init__(self, client: Client, path: str) -> None:
        super().__init__(client, Scope(ScopeKind.TREE, path))

    def get(self, path: str) -> Node | None:
        """The cached node at ``path``, or None."""
        with self._lock:
            return self._state.nodes.get(path)

    def snapshot(self) -> tuple[int, list[Node]]:
        """Every cached node in path order (parents first), with the zxid they
        reflect, read at once."""
        with self._lock:
            return self._state.zxid, self._state.sorted_nodes()

    def __len__(self) -> int:
        with self._lock:
            return len(self._state.nodes)


class NodeCache(_Listened):
    """One node, kept current (Curator's NodeCache; DataWatch is the same
    machinery). Made by ``Client.NodeCache(path)``; the node need not exist. Listeners get CREATED,
    CHANGED and DELETED for the node (its children's changes alone update its Stat
    silently), INITIALIZED once, and LAGGED if they fall behind."""

    def __init__(self, client: Client, path: str) -> None:
        super().__init__(client, Scope(ScopeKind.NODE, path))

    def current(self) -> Node | None:
        """The node as cached now, or None (it does not exist, or not initialized)."""
        with self._lock:
            return self._state.nodes.get(self.path)

    def get(self, path: str | None = None) -> Node | None:
        """``current()``; ``path``, if given, must be the cache's own."""
        if path is not None and path != self.path:
            return None
        return self.current()


class ChildrenCache(_Listened):
    """A node's children with their data, kept current (Curator's
    PathChildrenCache; ChildrenWatch is the same machinery). Made by
    ``Client.ChildrenCache(path)``; the parent need not exist, and is not cached.
    Listeners get CREATED, CHANGED and DELETED for the children, INITIALIZED once,
    and LAGGED if they fall behind. Runs on one recursive watch of the parent (deeper
    nodes are read and dropped): prefer it for flat folders."""

    def __init__(self, client: Client, path: str, with_data: bool = True) -> None:
        super().__init__(client, Scope(ScopeKind.CHILDREN, path), with_data)

    def current(self) -> list[Node]:
        """The children as cached now, in name order."""
        with self._lock:
            return sorted(self._state.nodes.values(), key=lambda n: n.path)

    def get(self, path: str) -> Node | None:
        """The cached child at ``path`` (a full path), or None."""
        with self._lock:
            return self._state.nodes.get(path)

    def names(self) -> list[str]:
        """The children's names, sorted."""
        with self._lock:
            return sorted(p.rsplit("/", 1)[-1] for p in self._state.nodes)

    def __len__(self) -> int:
        with self._lock:
            return len(self._state.nodes)


def _takes_event(fn: Callable[..., Any], without: int) -> bool:
    """kazoo's arity test: True if ``fn`` names more than ``without`` positional
    parameters (``def f(data, stat, event)``); ``*args`` alone does not count."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    named = [p for p in params if p.kind in positional]
    return len(named) > without


class _FunctionWatch(_Core):
    """A cache whose changes call one user function until it returns False. The
    calls wait in a mailbox of ``LISTENER_BACKLOG``: a function that falls that far
    behind skips to the newest state (the calls queued before it are dropped; each
    call reports a whole state, so the newest supersedes them)."""

    def __init__(
        self, client: Client, scope: Scope, fn: Callable[..., Any], with_data: bool
    ) -> None:
        super().__init__(client, scope, with_data)
        self.func = fn
        #: The function returned False (or the watch was closed): no more calls.
        self._stopped = False
        self._box = Mailbox(client._callbacks, self._call, lag=False)

    @property
    def skipped(self) -> int:
        """How many queued calls were dropped because the function fell behind."""
        return self._box.dropped

    def __call__(self, *args: Any) -> Any:
        """Calls the function itself (as kazoo's decorators leave it callable)."""
        return self.func(*args)

    def _call(self, *args: Any) -> None:
        """Runs on the callback thread."""
        if self._stopped or self._closed:
            return
        loop = self._loop
        assert loop is not None
        if call_user(loop, self.func, *args) is False:
            self._stopped = True
            try:
                loop.call_soon_threadsafe(self.cancel)
            except RuntimeError:
                pass  # the loop is gone already

    @property
    def stopped(self) -> bool:
        """True once the function returned False or the watch was closed."""
        return self._stopped or self._closed

    def close(self) -> None:
        """Ends the watch: no more calls. Any thread."""
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            self.cancel()
        else:
            try:
                loop.call_soon_threadsafe(self.cancel)
            except RuntimeError:
                pass  # the loop is closed: the watch ended with it

    def begin(self: _FW) -> _FW:  # type: ignore[override]
        """Starts the watch without waiting (on the loop); returns it."""
        _Core.begin(self)
        return self


class DataWatch(_FunctionWatch):
    """kazoo's DataWatch: ``fn(data, stat)`` with the node's data and Stat now, and
    again after each change of its data or existence; ``fn(None, None)`` while it
    does not exist. A function of three parameters, ``fn(data, stat, event)``, also
    gets the ``CacheEvent`` that caused the call (None for the first call; its
    ``type`` is CREATED, CHANGED or DELETED, its ``path`` the node's), detected from
    its signature as kazoo does. Returning False stops it. Changes are never lost
    across reconnects, server restarts or host moves (one resuming watch); calls run
    in order on the client's callback thread."""

    def __init__(self, client: Client, path: str, fn: Callable[..., Any]) -> None:
        super().__init__(client, Scope(ScopeKind.NODE, path), fn, with_data=True)
        self._with_event = _takes_event(fn, 2)

    def _put(self, data: bytes | None, stat: Stat | None, event: CacheEvent | None) -> None:
        if self._with_event:
            self._box.put(data, stat, event)
        else:
            self._box.put(data, stat)

    def _emit(self, events: list[CacheEvent], was_initialized: bool) -> None:
        for event in events:
            if event.type is CacheEventType.INITIALIZED:
                node = self._state.nodes.get(self.path)
                self._put(node.data if node else None, node.stat if node else None, None)
            elif was_initialized and event.node is not None:
                if event.type is CacheEventType.DELETED:
                    self._put(None, None, event)
                else:
                    self._put(event.node.data, event.node.stat, event)


class ChildrenWatch(_FunctionWatch):
    """kazoo's ChildrenWatch: ``fn(children)`` with the sorted names of the node's
    children now, and again after each change of that list (``[]`` while the node
    does not exist). With ``send_event=True``, ``fn(children, event)``: the
    ``CacheEvent`` that changed the list (CREATED or DELETED of a child, whose path
    it carries; None for the first call). Returning False stops it. It outlives the
    session (a watch needs none); ``allow_session_lost=False`` (kazoo's) ends it when
    the client's session is lost or closed instead. Runs on one
    recursive watch of the node (deeper nodes are read and dropped): prefer it for
    flat folders."""

    def __init__(
        self,
        client: Client,
        path: str,
        fn: Callable[..., Any],
        send_event: bool = False,
        allow_session_lost: bool = True,
    ) -> None:
        for arg, value in (("send_event", send_event), ("allow_session_lost", allow_session_lost)):
            if not isinstance(value, bool):
                raise BadArgumentsError(
                    ErrorCode.BAD_ARGUMENTS, f"ChildrenWatch's {arg} must be a bool, got {value!r}"
                )
        super().__init__(client, Scope(ScopeKind.CHILDREN, path), fn, with_data=False)
        self._last: list[str] | None = None
        self._send_event = send_event
        #: kazoo's: False ends the watch when the client's session is lost.
        self.allow_session_lost = allow_session_lost

    def begin(self) -> ChildrenWatch:
        if not self.allow_session_lost and not self._closed:
            self._client.add_listener(self._on_state)
        return _FunctionWatch.begin(self)

    async def _on_state(self, state: State) -> None:
        if state.ended:
            self.cancel()

    def cancel(self) -> None:
        self._client.remove_listener(self._on_state)
        super().cancel()

    def _emit(self, events: list[CacheEvent], was_initialized: bool) -> None:
        if not self._state.initialized:
            return
        names = sorted(p.rsplit("/", 1)[-1] for p in self._state.nodes)
        initial = any(e.type is CacheEventType.INITIALIZED for e in events)
        if initial or names != self._last:
            self._last = names
            if not self._send_event:
                self._box.put(names)
                return
            cause = None
            if not initial:
                for e in reversed(events):
                    if e.type in (CacheEventType.CREATED, CacheEventType.DELETED):
                        cause = e
                        break
            self._box.put(names, cause)
