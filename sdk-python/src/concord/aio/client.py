"""``concord.aio.Client``: the one core of the Python SDK, on grpc.aio.

::

    Client ── one grpc.aio channel per host; calls go to the current one, and move
      │       to the next host after a transport failure or a silent keep-alive stream
      ├─ unary calls are plans (concord._plan: _get, _create, ... over _unary: a
      │   deadline per attempt, retries of retry-safe failures), driven by _drive
      ├─ every answer's zxid recorded; every read asks for at least it (min_zxid)
      ├─ start(): opens the session ─▶ _session.Session (keep-alive task, states)
      └─ states ─▶ _listeners.Listeners (an executor, never the loop)

The sync ``concord.Client`` drives this same class on a private loop thread, so
nothing here may block: every wait is an await. Only the plans of unary calls it
carries out itself, on its callers' threads over blocking channels (``_failed`` and
``_saw`` are shared with them, so ``_saw`` takes a lock).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import os
import random
import re
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Awaitable, Callable, Literal, Sequence, TypeVar, overload

import grpc

from .._callbacks import Serial, call_user
from .._listeners import Listener, Listeners
from .._plan import Attempt, Plan, drive, unary
from .. import _backup, _tls
from .._proto import (
    cluster_pb2,
    cluster_pb2_grpc,
    common_pb2,
    session_pb2,
    session_pb2_grpc,
    tree_pb2,
    tree_pb2_grpc,
    watch_pb2,
    watch_pb2_grpc,
)
from .._transaction import (
    OpResult,
    TransactionOps,
    bad_argument,
    create_mode,
    data,
    flag,
    check_acl,
    results_of,
    results_of_failure,
)
from ..errors import (
    ConcordError,
    ErrorCode,
    InvalidACLError,
    NodeExistsError,
    NoNodeError,
    Origin,
    SessionExpiredError,
    deadline_error,
    from_rpc_error,
    make_error,
)
from ..events import EventKind
from ..types import (
    ACL,
    DEFAULT_RETRY,
    OPEN_ACL,
    TLS,
    BackupInfo,
    Fence,
    Members,
    Retry,
    ServerStatus,
    Stat,
    State,
    WatchedEvent,
    WhoAmI,
)
from . import recipes
from ._session import Session
from ._stream import close_channels, close_tracked
from ._wait import within
from .cache import Cache, ChildrenCache, ChildrenWatch, DataWatch, NodeCache
from .observe import LeaderObserver
from .watch import RESUME_FOREVER, Watch

T = TypeVar("T")
log = logging.getLogger("concord")

#: kazoo's one-shot watch callback: ``fn(WatchedEvent)``.
WatchFunc = Callable[[WatchedEvent], Any]
#: What fires a one-shot watch of each read, as in ZooKeeper.
GET_FIRES = [EventKind.DATA_CHANGED, EventKind.DELETED]
EXISTS_FIRES = [EventKind.CREATED, EventKind.DELETED, EventKind.DATA_CHANGED]
CHILDREN_FIRES = [EventKind.CHILDREN_CHANGED, EventKind.DELETED]
#: kazoo's EventType of each kind.
_KAZOO_TYPES = {
    EventKind.CREATED: "CREATED",
    EventKind.DELETED: "DELETED",
    EventKind.DATA_CHANGED: "CHANGED",
    EventKind.CHILDREN_CHANGED: "CHILD",
}


def watch_func(watch: Any) -> WatchFunc | None:
    """kazoo's ``watch`` argument: None, or a callable."""
    if watch is not None and not callable(watch):
        raise bad_argument(f"watch={watch!r}: a function of one WatchedEvent is expected")
    return watch  # type: ignore[no-any-return]

#: The port of a host given without one.
DEFAULT_PORT = 7181
#: Bound on the pages ``get_children`` follows, so a faulty server cannot loop it.
PAGES_MAX = 1_000_000
#: Responses may be 1 MiB larger than the largest request (4 MiB by default).
_MESSAGE_BYTES_MAX = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", _MESSAGE_BYTES_MAX),
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]

#: The Tree service's unary methods of an endpoint (of either transport).
_GET = operator.attrgetter("tree.Get")
_EXISTS = operator.attrgetter("tree.Exists")
_CHILDREN = operator.attrgetter("tree.Children")
_SYNC = operator.attrgetter("tree.Sync")
_CREATE = operator.attrgetter("tree.Create")
_SET = operator.attrgetter("tree.Set")
_DELETE = operator.attrgetter("tree.Delete")
_MULTI = operator.attrgetter("tree.Multi")
#: The Cluster service's unary methods.
_STATUS = operator.attrgetter("cluster.Status")
_MEMBERS = operator.attrgetter("cluster.Members")
_WHO_AM_I = operator.attrgetter("cluster.WhoAmI")


#: The session TTL a client asks for unless told (seconds), as kazoo's ``timeout``.
SESSION_TIMEOUT_S = 10.0


def _session_timeout(session_timeout: float | None, timeout: float | None) -> float:
    """The TTL asked for: ``session_timeout``, or kazoo's ``timeout=`` in its place."""
    if session_timeout is not None and timeout is not None:
        raise ValueError("give session_timeout or timeout (kazoo's name for it), not both")
    if session_timeout is not None:
        return session_timeout
    return SESSION_TIMEOUT_S if timeout is None else timeout


def _resumed_session(client_id: Any) -> int | None:
    """The session id of kazoo's ``client_id`` ``(session_id, password)``, or None."""
    if client_id is None:
        return None
    if (
        not isinstance(client_id, tuple)
        or len(client_id) != 2
        or not isinstance(client_id[0], int)
        or isinstance(client_id[0], bool)
        or client_id[0] <= 0
    ):
        raise ValueError(f"client_id={client_id!r}: (session_id, password) is expected")
    return client_id[0]


def parse_connect(hosts: str) -> tuple[list[str], str]:
    """kazoo's connection string, ``"a:7181,b:7191/app"``: the ``host:port``s
    (``parse_hosts``) and the chroot, everything after the first ``/`` past the
    hosts' ``http://``/``https://`` prefixes, as kazoo reads it (normalized: ``"/app"``;
    ``""`` without one). ValueError for no host, or ``.`` or ``..`` in the chroot."""
    text = _SCHEME.sub(r"\1", hosts)
    host_part, _, chroot = text.partition("/")
    parts = [p for p in chroot.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"chroot {chroot!r}: relative paths are not allowed")
    return parse_hosts(host_part), ("/" + "/".join(parts) if parts else "")


#: A host's ``http://`` or ``https://`` prefix in a connection string.
_SCHEME = re.compile(r"(^|,)\s*https?://")


def parse_hosts(hosts: str) -> list[str]:
    """``"a:7181,b:7191"`` (``http://``/``https://`` prefixes allowed) as ``host:port``s."""
    out = []
    for part in hosts.split(","):
        part = part.strip()
        for scheme in ("http://", "https://"):
            if part.startswith(scheme):
                part = part[len(scheme) :]
        part = part.rstrip("/")
        if not part:
            continue
        has_port = part.rsplit(":", 1)[-1].isdigit() and (
            not part.startswith("[") or "]:" in part
        )
        out.append(part if has_port else f"{part}:{DEFAULT_PORT}")
    if not out:
        raise ValueError(f"no host in {hosts!r}")
    return out


def _pem(value: str | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


#: Long-lived streams (watches, caches, observers) the client puts on one
#: connection at most before it opens another to the same host: below the 1,024 a
#: Concord server allows on one connection by default
#: (``client_streams_per_connection_max``), so that unary calls and the session's
#: keep-alive, on the first connection, still fit beside them.
STREAMS_PER_CONNECTION = 1000
#: Connections to one host at most (so about 64,000 streams); past that a stream
#: goes on the least busy one and waits there, in grpc, until one of its streams ends.
CONNECTIONS_MAX = 64


class _Endpoint:
    """One host's channel and stubs: grpc.aio's, or (``blocking``) grpcio's blocking
    ones for the sync client's unary calls, with the same options and TLS.

    Long-lived streams go through ``open_stream``: on this channel while it has
    fewer than ``STREAMS_PER_CONNECTION`` of them open, else on another channel to
    the same host with a connection of its own (grpc's subchannel pool local to it,
    so that it does not share this one's), opened when every one is that full, up to
    ``CONNECTIONS_MAX``."""

    def __init__(
        self, target: str, tls: TLS | None, *, blocking: bool = False, own_connection: bool = False
    ) -> None:
        make = grpc if blocking else grpc.aio
        #: The ``host:port`` dialled.
        self.target = target
        self.tls = tls
        options = list(_CHANNEL_OPTIONS)
        if own_connection:
            options.append(("grpc.use_local_subchannel_pool", 1))
        if tls is None:
            self.channel: Any = make.insecure_channel(target, options=options)
        else:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_pem(tls.ca),
                private_key=_pem(tls.key),
                certificate_chain=_pem(tls.cert),
            )
            self.channel = make.secure_channel(target, creds, options=options)
        self.tree = tree_pb2_grpc.TreeStub(self.channel)
        self.session = session_pb2_grpc.SessionStub(self.channel)
        self.watch = watch_pb2_grpc.WatchStub(self.channel)
        self.cluster = cluster_pb2_grpc.ClusterStub(self.channel)
        #: Streams opened through ``open_stream`` on this channel and not yet ended.
        self.open_streams = 0
        #: The channels streams go on: this one first, then those opened for room.
        self.connections: list[_Endpoint] = [self]

    def open_stream(self, start: Callable[[_Endpoint], Any]) -> Any:
        """The call ``start`` makes on the first of the host's connections with room
        for one more long-lived stream (one more connection opened when all are
        full), counted there until it ends."""
        conn = next((c for c in self.connections if c.open_streams < STREAMS_PER_CONNECTION), None)
        if conn is None and len(self.connections) < CONNECTIONS_MAX:
            conn = _Endpoint(self.target, self.tls, own_connection=True)
            self.connections.append(conn)
        if conn is None:
            conn = min(self.connections, key=lambda c: c.open_streams)
        call = start(conn)
        conn.open_streams += 1

        def ended(_: Any) -> None:
            conn.open_streams -= 1

        call.add_done_callback(ended)
        return call


class Client:
    """An asyncio Concord client with one session (kazoo's ``KazooClient``, async).

    ``hosts`` is a comma-separated list of ``host:port``, optionally ending with a
    chroot as kazoo's (``"a:7181,b:7191/app"``: every path of the client is below
    ``/app``; ``chroot``, ``unchroot``); ``session_timeout`` the TTL
    (seconds, default 10) the session asks for (the server clamps it to its range); ``retry`` the
    policy for retry-safe failures and for writes whose outcome is unknown (every
    write carries the session and a request id, so the server applies it at most
    once; default ``DEFAULT_RETRY``: up to a minute; None: each call is sent once); ``call_timeout`` the
    longest one attempt of a call may take (None: no deadline); ``suspend_share`` the
    share of the TTL without an answered ping after which the state is SUSPENDED;
    ``give_up_share`` the share of the TTL without an answered ping after which the
    client gives the session up (LOST) unless a server said so first (1 to 10,
    default 2: a server that stalled for less than the TTL keeps the session);
    ``randomize_hosts`` starts the client at a host of the list drawn at random (as
    kazoo's does), so that many clients given one list spread over the ensemble, and
    False at the first. Either way it moves on in list order. ``timeout`` is kazoo's
    name for ``session_timeout`` (give one of them). ``client_id`` (kazoo's: another
    client's ``client_id``, ``(session_id, password)``) makes the first ``start()``
    take that session over, with its ephemerals, instead of opening one: a process
    restarted within the TTL keeps its session. The password is not checked:
    a session belongs to the identity that opened it, and only that identity (or an
    admin) may keep it alive.
    """

    def __init__(
        self,
        hosts: str = f"127.0.0.1:{DEFAULT_PORT}",
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
        self.hosts, self.chroot = parse_connect(hosts)
        #: kazoo's ``randomize_hosts``: where ``set_hosts`` starts in its list.
        self.randomize_hosts = randomize_hosts
        self.session_timeout = _session_timeout(session_timeout, timeout)
        #: The session the first ``start()`` takes over (kazoo's ``client_id``).
        self._resume_id = _resumed_session(client_id)
        self.tls = tls
        self.retry = retry
        self.call_timeout = call_timeout
        self.suspend_share = suspend_share
        self.give_up_share = give_up_share
        #: The endpoints of ``hosts``, in its order (made at the first call).
        self._endpoints: list[_Endpoint] = []
        #: Every endpoint made, by ``host:port``: ``set_hosts`` keeps a host's
        #: connections, and those of a host it drops stay open for the streams on
        #: them until ``close()``.
        self._pool: dict[str, _Endpoint] = {}
        #: Index of the endpoint calls go to now.
        self._current = random.randrange(len(self.hosts)) if randomize_hosts else 0
        #: The newest zxid an answer reflected; reads ask for at least it.
        self._seen = 0
        self._seen_lock = threading.Lock()
        self._session: Session | None = None
        self._state = State.LOST
        self._listeners = Listeners(true_removes=True)
        #: Request ids of this client's writes, from a random point: unique within a
        #: session also when another client used it before (``client_id``), whose
        #: ids the server remembers (``_keyed``).
        self._request_ids = itertools.count(random.randrange(1, 1 << 62))
        self._closed = False
        #: Open watches and caches, ended by close().
        self._watches: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Runs watch and cache callbacks off the loop.
        self._callbacks = Serial("concord-watch")
        #: kazoo's one-shot watches not fired yet (their tasks, held here).
        self._one_shots: set[_OneShot] = set()

    # -- properties ---------------------------------------------------------------

    @property
    def state(self) -> State:
        """The session's state (LOST before ``start()``, as kazoo's)."""
        return self._state

    @property
    def connected(self) -> bool:
        """True while the session's pings are answered."""
        return self._state.connected

    @property
    def session_id(self) -> int | None:
        """The id of the session ``start()`` opened (None before)."""
        return self._session.id if self._session is not None else None

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """kazoo's ``client_id``: ``(session_id, b"")`` while the session lives (not
        LOST or CLOSED), else None. Concord sessions have no password: the session
        belongs to the identity that opened it (docs/security.md)."""
        session = self._session
        if session is None or session.ended:
            return None
        return session.id, b""

    @property
    def session_ttl_ms(self) -> int | None:
        """The TTL the server granted the session."""
        return self._session.ttl_ms if self._session is not None else None

    @property
    def last_zxid(self) -> int:
        """The newest zxid any answer to this client reflected."""
        return self._seen

    def add_listener(self, listener: Listener) -> None:
        """Calls ``listener(state)`` on every change of state, in order, off the I/O loop
        (plain functions on the client's listener thread, ``async def`` as tasks);
        one that returns True is removed (kazoo's)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stops calling ``listener``: the states not handed to it yet are dropped (a
        call that runs already runs on). A listener that returns True is removed
        too (kazoo's)."""
        self._listeners.remove(listener)

    # -- the hosts and the chroot -------------------------------------------------

    def set_hosts(self, hosts: str, randomize_hosts: bool | None = None) -> None:
        """kazoo's ``set_hosts``: the client uses the hosts of ``hosts`` from now on.
        Calls stay on the host they use if it is listed, else go to one drawn at
        random (``randomize_hosts``; None keeps the client's setting; False: the
        first); streams open now (the session's keep-alives, watches, caches,
        observers) stay where they are until they break, then open again on the new
        list, so the session and the watches live on. ``hosts`` must name the
        client's chroot, or none if it has none (kazoo's: a chroot cannot change):
        BadArgumentsError otherwise, and nothing changes. Connections to a host no
        longer listed stay open for the streams on them until ``close()``. Call it on
        the client's loop. Errors: ValueError (no host), BadArgumentsError."""
        new_hosts, chroot = parse_connect(hosts)
        if chroot != self.chroot:
            raise bad_argument(
                f"set_hosts({hosts!r}): the chroot cannot change ({self.chroot or 'none'} now, "
                f"{chroot or 'none'} asked); make a new client for another chroot"
            )
        if randomize_hosts is not None:
            self.randomize_hosts = flag("randomize_hosts", randomize_hosts)
        current = self.hosts[self._current % len(self.hosts)]
        if current in new_hosts:
            index = new_hosts.index(current)
        else:
            index = random.randrange(len(new_hosts)) if self.randomize_hosts else 0
        self.hosts, self._endpoints, self._current = new_hosts, [], index

    def unchroot(self, path: str) -> str:
        """kazoo's ``unchroot``: a server's path without the client's chroot (``"/"``
        for the chroot itself); a path not below it is returned unchanged."""
        root = self.chroot
        if not root:
            return path
        if path == root:
            return "/"
        if path.startswith(root + "/"):
            return path[len(root) :]
        return path

    def _full(self, path: str) -> str:
        """The server's path of the client's ``path``: below the chroot, if any (a
        path that is not absolute is left for the server to refuse)."""
        root = self.chroot
        if not root or not isinstance(path, str) or not path.startswith("/"):
            return path
        return root if path == "/" else root + path

    # -- lifecycle ----------------------------------------------------------------

    async def start(self, timeout: float = 15.0) -> None:
        """Opens the session and starts keeping it alive; state CONNECTED. Retries for at
        most ``timeout`` seconds while no server answers; then TimeoutError. (A retried
        open whose first attempt reached a server leaves an unused session that the
        server expires one TTL later.) A client made with ``client_id`` takes that
        session over instead, the first time (SessionExpiredError when it is gone or
        not the caller's)."""
        if self._closed:
            raise make_error(ErrorCode.BAD_STATE, "the client is closed")
        if self._session is not None and not self._session.ended:
            return
        resume = self._resume_id
        if resume is not None:
            method: Callable[[_Endpoint], Any] = lambda ep: ep.session.Get  # noqa: E731
            request: Any = session_pb2.GetSessionRequest(session_id=resume, min_zxid=self._seen)
        else:
            method = lambda ep: ep.session.Open  # noqa: E731
            request = session_pb2.OpenSessionRequest(ttl_ms=int(self.session_timeout * 1000))
        started = time.monotonic()
        policy = Retry(deadline=timeout, delay=0.05, max_delay=1.0)
        attempt = 0
        while True:
            remaining = started + timeout - time.monotonic()
            try:
                resp = await self._attempt(
                    method, request, write=resume is None, limit=min(remaining, 5.0)
                )
                break
            except ConcordError as err:
                attempt += 1
                if isinstance(err, SessionExpiredError):
                    self._resume_id = None  # gone: the next start() opens a new one
                if not (err.retry_safe or err.indeterminate):
                    raise
                if not policy.allows(attempt, time.monotonic() - started):
                    raise make_error(
                        ErrorCode.TIMEOUT,
                        f"no session within {timeout} s: {err}",
                        origin=Origin.CLIENT,
                    ) from err
                await asyncio.sleep(min(policy.jittered(attempt), max(remaining, 0.0)))
        if resume is not None:
            resp, self._resume_id = resp.session, None
        self._session = Session(self, resp.session_id, resp.ttl_ms, self.suspend_share, self.give_up_share)
        self._state = State.CONNECTED
        self._listeners.dispatch(State.CONNECTED)

    async def stop(self) -> None:
        """Closes the session on the server (its ephemerals go at once) and stops the
        keep-alives; state CLOSED (LOST if the session had expired). Whatever the
        outcome, the keep-alives stop: after a failed close the server expires the
        session one TTL later, and the error is raised. The close waits at most the
        call timeout, and never longer than the session's TTL."""
        session = self._session
        if session is None or session.ended:
            return
        await session.stop()
        # Bounded by the TTL: the server expires an unpinged session by then anyway.
        ttl_s = session.ttl_ms / 1000.0
        limit = ttl_s if self.call_timeout is None else min(self.call_timeout, ttl_s)
        try:
            await self._call(
                lambda ep: ep.session.Close,
                session_pb2.CloseSessionRequest(session_id=session.id),
                write=True,
                limit=limit,
            )
        except SessionExpiredError:
            self._publish(session, State.LOST)
            return
        except ConcordError:
            self._publish(session, State.LOST)
            raise
        self._publish(session, State.CLOSED)

    async def restart(self) -> None:
        """kazoo's ``restart()``: ``stop()``, then ``start()`` (a new session)."""
        await self.stop()
        await self.start()

    async def close(self) -> None:
        """Stops the session if it runs (errors ignored), then closes the channels and
        the listener thread. The client cannot be started again."""
        try:
            await self.stop()
        except ConcordError:
            pass
        self._closed = True
        # Watches, caches, observers and recipes end, their tasks awaited (bounded).
        await close_tracked(self)
        endpoints, self._endpoints, self._pool = list(self._pool.values()), [], {}
        await close_channels([c.channel for ep in endpoints for c in ep.connections])
        self._listeners.shutdown()
        self._callbacks.shutdown()

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.stop()
        finally:
            await self.close()

    # -- reads --------------------------------------------------------------------
    # Each call is a plan (concord._plan), written once: these coroutines drive it on
    # the loop, the sync client drives the same plan on the caller's thread. Plans
    # take the client's paths and send the server's (``_full``: below the chroot).

    async def get(
        self, path: str, watch: WatchFunc | None = None, *, linearizable: bool = False
    ) -> tuple[bytes, Stat]:
        """The node's data and Stat. ``watch`` (kazoo's one-shot callback) is called
        once, ``watch(WatchedEvent)``, at the node's next data change or deletion
        after this read (see ``_OneShot``). Errors: NoNodeError (and no watch)."""
        fn = watch_func(watch)
        data, stat, zxid = await self._drive(self._get_at(path, linearizable))
        if fn is not None:
            await self._watch_once(path, GET_FIRES, zxid, fn)
        return data, stat

    def _get(self, path: str, linearizable: bool) -> Plan[tuple[bytes, Stat]]:
        data, stat, _ = yield from self._get_at(path, linearizable)
        return data, stat

    def _get_at(self, path: str, linearizable: bool) -> Plan[tuple[bytes, Stat, int]]:
        """``_get`` and the zxid the answer reflects."""
        req = tree_pb2.GetRequest(path=self._full(path), min_zxid=self._seen, linearizable=linearizable)
        resp = yield from self._unary(_GET, req, write=False)
        return bytes(resp.data), Stat.of(resp.stat), int(resp.header.zxid)

    async def exists(
        self, path: str, watch: WatchFunc | None = None, *, linearizable: bool = False
    ) -> Stat | None:
        """The node's Stat, or None when it does not exist. ``watch`` is called once
        at the node's next creation, data change or deletion after this read."""
        fn = watch_func(watch)
        stat, zxid = await self._drive(self._exists_at(path, linearizable))
        if fn is not None:
            await self._watch_once(path, EXISTS_FIRES, zxid, fn)
        return stat

    def _exists(self, path: str, linearizable: bool) -> Plan[Stat | None]:
        stat, _ = yield from self._exists_at(path, linearizable)
        return stat

    def _exists_at(self, path: str, linearizable: bool) -> Plan[tuple[Stat | None, int]]:
        req = tree_pb2.ExistsRequest(path=self._full(path), min_zxid=self._seen, linearizable=linearizable)
        resp = yield from self._unary(_EXISTS, req, write=False)
        return (Stat.of(resp.stat) if resp.exists else None), int(resp.header.zxid)

    @overload
    async def get_children(
        self,
        path: str,
        watch: WatchFunc | None = None,
        include_data: Literal[False] = False,
        *,
        linearizable: bool = False,
    ) -> list[str]: ...
    @overload
    async def get_children(
        self, path: str, watch: WatchFunc | None, include_data: Literal[True], *, linearizable: bool = False
    ) -> tuple[list[str], Stat]: ...
    @overload
    async def get_children(
        self, path: str, *, include_data: Literal[True], linearizable: bool = False
    ) -> tuple[list[str], Stat]: ...

    async def get_children(
        self,
        path: str,
        watch: WatchFunc | None = None,
        include_data: bool = False,
        *,
        linearizable: bool = False,
    ) -> list[str] | tuple[list[str], Stat]:
        """The names of the node's children, sorted, across every page; with
        ``include_data`` (kazoo's), ``(names, Stat)``, the node's own Stat as the last
        page read it. ``watch`` is called once at the next creation or deletion of a
        child, or of the node, after the first page was read. Errors: NoNodeError
        (and no watch)."""
        fn = watch_func(watch)
        with_stat = flag("include_data", include_data)
        names, stat, zxid = await self._drive(self._children(path, linearizable))
        if fn is not None:
            await self._watch_once(path, CHILDREN_FIRES, zxid, fn)
        return (names, stat) if with_stat else names

    def _get_children(self, path: str, linearizable: bool) -> Plan[list[str]]:
        names, _, _ = yield from self._children(path, linearizable)
        return names

    def _children(self, path: str, linearizable: bool) -> Plan[tuple[list[str], Stat, int]]:
        """The names, the node's Stat as the last page read it, and the zxid of the
        first page (a one-shot watch starts there: nothing after it is missed)."""
        names: list[str] = []
        token = ""
        first_zxid: int | None = None
        full = self._full(path)
        for _ in range(PAGES_MAX):
            req = tree_pb2.ChildrenRequest(
                path=full, page_token=token, min_zxid=self._seen, linearizable=linearizable
            )
            resp = yield from self._unary(_CHILDREN, req, write=False)
            first_zxid = int(resp.header.zxid) if first_zxid is None else first_zxid
            names.extend(c.name for c in resp.children)
            if not resp.next_page_token:
                return names, Stat.of(resp.stat), first_zxid
            if resp.next_page_token == token:
                break
            token = resp.next_page_token
        raise make_error(ErrorCode.INTERNAL, "the server's page tokens do not advance")

    async def sync(self, path: str = "/") -> int:
        """Waits until the answering server has applied what the leader had committed;
        returns that zxid."""
        return await self._drive(self._sync(path))

    def _sync(self, path: str) -> Plan[int]:
        resp = yield from self._unary(_SYNC, tree_pb2.SyncRequest(path=self._full(path)), write=False)
        return int(resp.header.zxid)

    # -- writes -------------------------------------------------------------------

    @overload
    async def create(
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
    async def create(
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
    async def create(
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

    async def create(
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
        """Creates a node, in kazoo's order of arguments; returns its path (with the
        sequence suffix, if any), or with ``include_data`` ``(path, Stat)``. ``acl``
        must be None or ``OPEN_ACL_UNSAFE`` (access is the server's grants:
        docs/security.md). An ephemeral node belongs to the client's session.
        ``makepath`` creates missing parents (persistent, empty; the chroot too).
        Errors: NodeExistsError, NoNodeError (parent), NoChildrenForEphemeralsError,
        SessionExpiredError, BadArgumentsError (InvalidACLError for another ``acl``;
        a flag that is no bool, or data that is no bytes)."""
        check_acl(acl)
        with_stat = flag("include_data", include_data)
        path_, stat = await self._drive(
            self._create_node(path, value, ephemeral, sequence, makepath, fence)
        )
        return (path_, stat) if with_stat else path_

    def _create_node(
        self, path: str, value: bytes, ephemeral: bool, sequence: bool, makepath: bool, fence: Fence | None
    ) -> Plan[tuple[str, Stat]]:
        mode = create_mode(flag("ephemeral", ephemeral), flag("sequence", sequence))
        flag("makepath", makepath)
        full = self._full(path)
        try:
            created, stat = yield from self._create_at(full, data(value), mode, ephemeral, fence)
        except NoNodeError:
            parent = full.rsplit("/", 1)[0]
            if not makepath or not parent:
                raise
            yield from self._ensure_at(parent)
            created, stat = yield from self._create_at(full, data(value), mode, ephemeral, fence)
        return self.unchroot(created), stat

    def _create_at(
        self, full: str, value: bytes, mode: Any, ephemeral: bool, fence: Fence | None
    ) -> Plan[tuple[str, Stat]]:
        """One create of the server's path ``full``, with a request id of its own."""
        req = tree_pb2.CreateRequest(path=full, data=value, mode=mode, fence=_fence(fence))
        dedup = self._keyed(req, ephemeral)
        resp = yield from self._unary(_CREATE, req, write=True, dedup=dedup)
        return str(resp.path), Stat.of(resp.stat)

    async def set(
        self, path: str, value: bytes, version: int = -1, *, fence: Fence | None = None
    ) -> Stat:
        """Replaces the node's data if its version is ``version`` (-1: any); returns the
        new Stat. Errors: NoNodeError, BadVersionError, BadArgumentsError."""
        return await self._drive(self._set(path, value, version, fence))

    def _set(self, path: str, value: bytes, version: int, fence: Fence | None) -> Plan[Stat]:
        req = tree_pb2.SetRequest(path=self._full(path), data=data(value), version=version, fence=_fence(fence))
        resp = yield from self._unary(_SET, req, write=True, dedup=self._keyed(req, False))
        return Stat.of(resp.stat)

    async def delete(
        self, path: str, version: int = -1, recursive: bool = False, *, fence: Fence | None = None
    ) -> None:
        """Deletes the node if its version is ``version`` (-1: any). ``recursive``
        deletes its subtree first (nodes already gone are skipped, as kazoo does).
        Errors: NoNodeError, BadVersionError, NotEmptyError."""
        await self._drive(self._delete(path, version, recursive, fence))

    def _delete(self, path: str, version: int, recursive: bool, fence: Fence | None) -> Plan[None]:
        if recursive:
            yield from self._delete_tree(path, version, fence)
            return
        req = tree_pb2.DeleteRequest(path=self._full(path), version=version, fence=_fence(fence))
        yield from self._unary(_DELETE, req, write=True, dedup=self._keyed(req, False))

    def _delete_tree(self, path: str, version: int, fence: Fence | None) -> Plan[None]:
        try:
            children = yield from self._get_children(path, False)
        except NoNodeError:
            return
        base = path.rstrip("/")
        for child in children:
            yield from self._delete_tree(f"{base}/{child}", -1, fence)
        if path == "/":
            return
        try:
            yield from self._delete(path, version, False, fence)
        except NoNodeError:
            pass

    async def ensure_path(self, path: str, acl: Sequence[ACL] | None = None) -> None:
        """Creates ``path`` and its missing parents as empty persistent nodes, with a
        chroot the chroot's too (``acl``: None or ``OPEN_ACL_UNSAFE``, as for
        ``create``)."""
        check_acl(acl)
        await self._drive(self._ensure_path(path))

    def _ensure_path(self, path: str) -> Plan[None]:
        yield from self._ensure_at(self._full(path))

    def _ensure_at(self, full: str) -> Plan[None]:
        """Creates the server's path ``full`` and its missing parents: with a chroot,
        the chroot's own nodes too (kazoo's ``ensure_path`` creates the chroot)."""
        if full in ("", "/"):
            return
        req = tree_pb2.ExistsRequest(path=full, min_zxid=self._seen)
        if (yield from self._unary(_EXISTS, req, write=False)).exists:
            return
        prefix = ""
        for part in full.strip("/").split("/"):
            prefix = f"{prefix}/{part}"
            try:
                yield from self._create_at(prefix, b"", tree_pb2.PERSISTENT, False, None)
            except NodeExistsError:
                pass

    def transaction(self) -> Transaction:
        """A transaction: add ops with ``create``, ``delete``, ``set_data``, ``check``,
        then ``await commit()`` (or leave an ``async with`` block)."""
        return Transaction(self)

    async def _commit(self, ops: list[tree_pb2.Op], ephemeral: bool, fence: Fence | None) -> list[OpResult]:
        return await self._drive(self._multi(ops, ephemeral, fence))

    def _multi(self, ops: list[tree_pb2.Op], ephemeral: bool, fence: Fence | None) -> Plan[list[OpResult]]:
        req = tree_pb2.MultiRequest(ops=ops, fence=_fence(fence))
        if self.chroot:
            for op in req.ops:
                kind = op.WhichOneof("op")
                if kind is not None:
                    target = getattr(op, kind)
                    target.path = self._full(target.path)
        dedup = self._keyed(req, ephemeral)
        try:
            resp = yield from self._unary(_MULTI, req, write=True, dedup=dedup)
        except ConcordError as err:
            failed = results_of_failure(err, len(ops))
            if failed is None:
                raise
            return failed
        results = results_of(resp)
        if self.chroot:
            results = [self.unchroot(r) if isinstance(r, str) else r for r in results]
        return results

    # -- ACLs (kazoo's calls; access is the server's grants) ------------------------

    async def get_acls(self, path: str) -> tuple[list[ACL], Stat]:
        """kazoo's ``get_acls``: ``(OPEN_ACL_UNSAFE, Stat)``. Concord has no per-node
        ACLs (access is the server's grants, inherited down subtrees:
        docs/security.md), so every node shows the open ACL, as the ZooKeeper port's
        getACL does. Errors: NoNodeError."""
        return await self._drive(self._get_acls(path))

    def _get_acls(self, path: str) -> Plan[tuple[list[ACL], Stat]]:
        stat = yield from self._exists(path, False)
        if stat is None:
            raise make_error(ErrorCode.NO_NODE, f"{path} does not exist", origin=Origin.SERVER)
        return [OPEN_ACL], stat

    async def set_acls(self, path: str, acls: Sequence[ACL], version: int = -1) -> Stat:
        """kazoo's ``set_acls``, as the ZooKeeper port's setACL: ``acls`` must be
        ``OPEN_ACL_UNSAFE``, the ACL every node has, and nothing changes (the node's
        ``aversion`` stays); returns the node's Stat. Errors: InvalidACLError (any
        other ACL; nothing sent), NoNodeError, BadVersionError (``version`` is
        neither -1 nor the node's ``aversion``). Unlike the port's, no grant
        beyond reading the node is asked for, since nothing is written."""
        return await self._drive(self._set_acls(path, acls, version))

    def _set_acls(self, path: str, acls: Sequence[ACL], version: int) -> Plan[Stat]:
        if acls is None:
            raise InvalidACLError(ErrorCode.BAD_ARGUMENTS, "acls=None: a list of ACL entries is expected")
        check_acl(acls)
        if isinstance(version, bool) or not isinstance(version, int):
            raise bad_argument(f"version={version!r}: an int is expected")
        stat = yield from self._exists(path, False)
        if stat is None:
            raise make_error(ErrorCode.NO_NODE, f"{path} does not exist", origin=Origin.SERVER)
        if version != -1 and version != stat.aversion:
            raise make_error(
                ErrorCode.BAD_VERSION,
                f"{path}: ACL version {version} asked, {stat.aversion} found",
                origin=Origin.SERVER,
            )
        return stat

    # -- the ensemble (the Cluster service, as the Rust SDK has it) ----------------

    async def status(self) -> ServerStatus:
        """``Cluster/Status`` of the server this client's calls go to now: its id,
        role, zxids, counts, version, and the leader it follows."""
        return await self._drive(self._status())

    def _status(self) -> Plan[ServerStatus]:
        resp = yield from self._unary(_STATUS, cluster_pb2.StatusRequest(), write=False)
        return ServerStatus.of(resp)

    async def members(self) -> Members:
        """``Cluster/Members``: the ensemble's members as the server this client's
        calls go to knows them (exact for every member only on the leader: ask it,
        with a client whose first host it is). Needs an admin: PermissionDeniedError."""
        return await self._drive(self._members())

    def _members(self) -> Plan[Members]:
        resp = yield from self._unary(_MEMBERS, cluster_pb2.MembersRequest(), write=False)
        return Members.of(resp)

    async def who_am_i(self) -> WhoAmI:
        """``Cluster/WhoAmI``: the identity the server takes this client for, whether
        it is an admin, its team, namespace root, grants and quota use."""
        return await self._drive(self._who_am_i())

    def _who_am_i(self) -> Plan[WhoAmI]:
        resp = yield from self._unary(_WHO_AM_I, cluster_pb2.WhoAmIRequest(), write=False)
        return WhoAmI.of(resp)

    async def save_snapshot(
        self, path: str | os.PathLike[str], *, min_zxid: int = 0, linearizable: bool = False
    ) -> BackupInfo:
        """Streams ``Cluster/Snapshot`` of the server this client's calls go to into
        the backup file ``path``, the file ``concordctl snapshot save`` writes and
        ``concord restore`` reads (docs/operations.md, "Backup and restore"),
        checking the snapshot's crc as it arrives. The file is written beside
        ``path`` first, fsynced, then renamed into place (replacing one there) and its
        folder fsynced: no partial file is ever left under ``path``. The server first
        applies every zxid this client has seen (and ``min_zxid``), or with
        ``linearizable`` the leader's commit point. Needs an admin:
        PermissionDeniedError. Not retried: call it again. Errors about the local
        file are BadArgumentsError; a snapshot that fails its check is INTERNAL."""
        target = os.fspath(path)
        temp = os.path.join(
            os.path.dirname(target), f".{os.path.basename(target) or 'backup'}.tmp-{os.getpid()}"
        )
        request = cluster_pb2.SnapshotRequest(
            min_zxid=max(min_zxid, self._seen), linearizable=linearizable
        )
        try:
            info = await self._write_snapshot(temp, request)
            await asyncio.to_thread(_replace_durably, temp, target)
        except BaseException:
            await asyncio.to_thread(_remove_quietly, temp)
            raise
        return info

    async def _write_snapshot(self, temp: str, request: Any) -> BackupInfo:
        """Writes the backup into ``temp`` (created new), fsynced."""
        index = self._current
        call = self._endpoint().cluster.Snapshot(request)
        try:
            first = await call.read()
            if first is grpc.aio.EOF or not first.HasField("info"):
                raise _snapshot_error("the first message names no snapshot")
            info = first.info
            self._saw(info.header.zxid)
            check = _backup.SnapshotCheck(info.zxid)
            head = _backup.header(info.zxid, info.node_count, info.session_count, info.server_id)
            try:
                f = await asyncio.to_thread(open, temp, "xb")
            except OSError as e:
                raise _file_error(temp, "cannot create", e) from None
            try:
                await asyncio.to_thread(f.write, head)
                while (chunk := await call.read()) is not grpc.aio.EOF:
                    try:
                        check.update(chunk.data)
                    except ValueError as e:
                        raise _snapshot_error(str(e)) from None
                    await asyncio.to_thread(f.write, chunk.data)
                try:
                    crc32 = check.finish()
                except ValueError as e:
                    raise _snapshot_error(str(e)) from None
                await asyncio.to_thread(_flush_durably, f)
            except OSError as e:
                raise _file_error(temp, "cannot write", e) from None
            finally:
                f.close()
        except grpc.RpcError as e:
            err = from_rpc_error(e, write=False)
            self._leave_after(err, index)
            raise err from None
        finally:
            call.cancel()
        return BackupInfo(
            zxid=info.zxid,
            node_count=info.node_count,
            session_count=info.session_count,
            server_id=info.server_id,
            snapshot_bytes=check.bytes,
            crc32=crc32,
        )

    # -- watches and caches -------------------------------------------------------

    async def _watch_once(
        self, path: str, kinds: list[EventKind], zxid: int, fn: WatchFunc
    ) -> None:
        """Opens a one-shot watch of ``path`` for ``kinds`` after ``zxid`` (a read's):
        raises the server's refusal; ``fn`` is called at the first such event."""
        w = self.watch(path, start_zxid=zxid, kinds=kinds, with_data=False, once=True)
        await _OneShot(self, w, fn).start()

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
        """A watch of ``path`` (and, ``recursive``, its whole subtree): ``async for
        event in c.watch(...)`` yields ``WatchEvent``s in zxid order, each exactly once,
        resuming by itself from the last zxid after a broken stream, a server restart
        or a move to another host (``resume``: the retry policy of those reconnects;
        the default never gives up; None ends the watch at the first break).

        ``start_zxid`` replays every event after it first (ZXID_COMPACTED when the
        server's history no longer reaches back). ``kinds`` filters the event kinds;
        ``with_data`` sends the new and previous data; ``once`` ends after one event.
        The stream opens at the first use (``async with``, ``async for``, ``next()``,
        ``start()``), which raises the server's refusal. Errors a retry cannot fix
        end the iteration with that exception. The zxids it delivers are recorded:
        later reads ask for at least them."""
        request = watch_pb2.WatchRequest(
            path=path,
            recursive=recursive,
            once=once,
            with_data=with_data,
            progress_interval_ms=progress_interval_ms,
        )
        request.kinds.extend(watch_pb2.EventKind.ValueType(int(k)) for k in kinds or ())
        if start_zxid is not None:
            request.start_zxid = start_zxid
        return Watch(self, request, resume)

    def Cache(self, path: str) -> Cache:
        """A cache of the subtree at ``path`` (Curator's CuratorCache), not started:
        ``async with c.Cache(path) as cache`` or ``await cache.start()``."""
        return Cache(self, path)

    def NodeCache(self, path: str) -> NodeCache:
        """A cache of the one node at ``path`` (Curator's NodeCache), not started:
        ``async with c.NodeCache(path) as cache``; ``cache.current()``."""
        return NodeCache(self, path)

    def ChildrenCache(self, path: str, with_data: bool = True) -> ChildrenCache:
        """A cache of the children of ``path`` (Curator's PathChildrenCache), not
        started: ``async with c.ChildrenCache(path) as cache``; ``cache.current()``."""
        return ChildrenCache(self, path, with_data)

    @overload
    def DataWatch(self, path: str) -> Callable[[Callable[..., Any]], DataWatch]: ...
    @overload
    def DataWatch(self, path: str, func: Callable[..., Any]) -> DataWatch: ...

    def DataWatch(self, path: str, func: Callable[..., Any] | None = None) -> Any:
        """kazoo's DataWatch: ``@c.DataWatch(path)`` on ``fn(data, stat)`` (or
        ``fn(data, stat, event)``), or
        ``c.DataWatch(path, fn)``; see ``concord.aio.cache.DataWatch``. Call it in a
        coroutine: the watch starts on the running loop and this returns at once
        (``await watch.wait_initialized()`` waits for the first call to be queued)."""

        def decorate(fn: Callable[..., Any]) -> DataWatch:
            return DataWatch(self, path, fn).begin()

        return decorate if func is None else decorate(func)

    @overload
    def ChildrenWatch(
        self, path: str, func: None = None, allow_session_lost: bool = True, send_event: bool = False
    ) -> Callable[[Callable[..., Any]], ChildrenWatch]: ...
    @overload
    def ChildrenWatch(
        self, path: str, func: Callable[..., Any], allow_session_lost: bool = True, send_event: bool = False
    ) -> ChildrenWatch: ...

    def ChildrenWatch(
        self,
        path: str,
        func: Callable[..., Any] | None = None,
        allow_session_lost: bool = True,
        send_event: bool = False,
    ) -> Any:
        """kazoo's ChildrenWatch, in kazoo's argument order: ``@c.ChildrenWatch(path)``
        on ``fn(children)``, or ``c.ChildrenWatch(path, fn)``; ``send_event=True``:
        ``fn(children, event)``; ``allow_session_lost=False``: it ends with the
        session. See ``concord.aio.cache.ChildrenWatch``."""

        def decorate(fn: Callable[..., Any]) -> ChildrenWatch:
            return ChildrenWatch(self, path, fn, send_event, allow_session_lost).begin()

        return decorate if func is None else decorate(func)

    def _track(self, watch: Any) -> None:
        self._watches.add(watch)

    # -- recipes (concord.aio.recipes) --------------------------------------------

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
        """kazoo's Election: ``await run(func)`` campaigns, runs func while leader,
        resigns; ``value`` (default: the identifier's bytes) is what it announces."""
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

    def observe(self, name: str, *, resume: Retry | None = RESUME_FOREVER) -> LeaderObserver:
        """The leader changes of election ``name`` (the Rust SDK's ``observe``):
        ``async for change in c.observe(name)`` yields ``LeaderChange(zxid,
        leader)``, the current leader (a Participant with its value, or None) first,
        then each change of leader or of its value, resuming by itself after a broken
        stream or a move to another host (``resume``: the retry policy of those
        reopens; None ends it at the first break). It never reports a state older
        than one it reported, or than the client has seen. Opens at the first use
        (``async with``, ``async for``, ``next()``, ``start()``), which raises the
        server's refusal. Needs no session."""
        return LeaderObserver(self, name, resume)

    # -- internals ----------------------------------------------------------------

    def _keyed(self, req: Any, ephemeral: bool) -> bool:
        """Gives a write (create, set, delete, multi) the client's session id and a
        fresh request id, so that the server applies it at most once and answers a
        retry with the first outcome: a retry of it is safe when its outcome is
        unknown. Returns True when it did (the write is deduplicated).

        Without a live session (before ``start()``, after LOST or ``stop()``) a
        persistent write goes without them and is not retried once its outcome is
        unknown; an ephemeral one needs the session (SessionExpiredError before
        ``start()``; after LOST the server refuses the ended session)."""
        session = self._session
        if ephemeral:
            req.session_id = self._live_session_id()
        elif session is None or session.ended:
            req.session_id = 0
            req.request_id = 0
            return False
        else:
            req.session_id = session.id
        req.request_id = next(self._request_ids)
        return True

    def _live_session_id(self) -> int:
        if self._session is None:
            raise SessionExpiredError(
                ErrorCode.SESSION_EXPIRED, "no session: call start() first", origin=Origin.CLIENT
            )
        return self._session.id

    def _saw(self, zxid: int) -> None:
        # Under a lock: the sync client's threads record zxids beside the loop.
        if zxid > self._seen:
            with self._seen_lock:
                if zxid > self._seen:
                    self._seen = zxid

    def _endpoint(self) -> _Endpoint:
        if self._closed:
            raise make_error(ErrorCode.BAD_STATE, "the client is closed")
        if not self._endpoints:
            self._endpoints = [self._pooled(h) for h in self.hosts]
        return self._endpoints[self._current % len(self._endpoints)]

    def _pooled(self, target: str) -> _Endpoint:
        ep = self._pool.get(target)
        if ep is None:
            ep = self._pool[target] = _Endpoint(target, self.tls)
        return ep

    def _rotate(self) -> None:
        """Moves calls and keep-alives to the next host of the list."""
        if len(self.hosts) > 1:
            self._current = (self._current + 1) % len(self.hosts)

    def _after_not_leader(self, err: ConcordError) -> None:
        """Where calls go after a NOT_LEADER from the current host: to the leader it
        named when that address is one of the client's hosts, else to the next host."""
        index = self._host_index(err.leader_hint.client_addr if err.leader_hint else None)
        if index is not None and index != self._current % max(len(self.hosts), 1):
            self._current = index
        else:
            self._rotate()

    def _leave_after(self, err: ConcordError, index: int) -> None:
        """A stream on host ``index`` failed with ``err``: calls move on when that host
        cannot serve them (unreachable, or without a leader for a while: to the
        leader it named, if listed), unless another failure moved them already."""
        if self._current != index:
            return
        if err.origin in (Origin.NOT_SENT, Origin.TRANSPORT):
            self._rotate()
        elif err.code is ErrorCode.NOT_LEADER:
            self._after_not_leader(err)

    def _host_index(self, addr: str | None) -> int | None:
        """The index in the host list of ``host:port`` ``addr`` (as the server names
        its client address: an IP address, IPv6 in brackets), or None."""
        if not addr:
            return None
        want = addr.strip().lower()
        for i, host in enumerate(self.hosts):
            if host.strip().lower() == want:
                return i
        return None

    def _publish(self, session: Session, state: State) -> None:
        """A state of ``session``, published if it is the client's, has not ended, and
        the state differs; listeners hear it."""
        if session is not self._session or session.ended or state is self._state:
            return
        session.ended = state.ended
        self._state = state
        self._listeners.dispatch(state)

    def _unary(
        self,
        method: Callable[[Any], Any],
        request: Any,
        *,
        write: bool,
        dedup: bool = False,
        limit: float | None = None,
    ) -> Plan[Any]:
        """The plan of one unary call under the client's deadline (or ``limit``) and
        retry policy (``concord._plan.unary``)."""
        return unary(
            self.retry, method, request, write=write, dedup=dedup,
            limit=self.call_timeout if limit is None else limit,
        )

    async def _drive(self, plan: Plan[T]) -> T:
        """Carries ``plan`` out on this loop, one ``_attempt`` at a time."""
        return await drive(plan, self._attempt_step)

    def _attempt_step(self, step: Attempt) -> Awaitable[Any]:
        return self._attempt(step.method, step.request, write=step.write, limit=step.limit)

    async def _attempt(
        self, method: Callable[[_Endpoint], Callable[..., Awaitable[T]]], request: Any, *, write: bool, limit: float | None
    ) -> T:
        """One attempt of a unary call, on the current host."""
        ep = self._endpoint()
        try:
            if limit is None:
                resp: Any = await method(ep)(request)
            else:
                resp = await within(method(ep)(request), limit)
        except asyncio.TimeoutError:
            raise self._failed(deadline_error(write=write, limit_s=limit or 0.0)) from None
        except grpc.RpcError as e:
            err = from_rpc_error(e, write=write)
            if _tls.suspect(err, self.tls):
                err = await asyncio.to_thread(self._diagnose, err, ep)
            raise self._failed(err) from None
        self._saw(resp.header.zxid)
        return resp  # type: ignore[no-any-return]

    def _diagnose(self, err: ConcordError, ep: _Endpoint) -> ConcordError:
        """``err`` with the TLS mismatch behind it named (``concord._tls``): the
        client's own certificate read, or the host probed. Blocking, bounded."""
        try:
            cert = _pem(self.tls.cert) if self.tls is not None else None
        except OSError:
            cert = None
        return _tls.diagnose(err, self.tls, cert, ep.target)

    def _failed(self, err: ConcordError) -> ConcordError:
        """What a failed attempt (on any transport) leaves behind: after a transport
        failure or a missed deadline (a stalled server keeps its connection open) the
        next attempt goes to the next host; after NOT_LEADER to the leader it named.
        Returns ``err``."""
        if err.origin in (Origin.NOT_SENT, Origin.TRANSPORT):
            self._rotate()
        elif err.code is ErrorCode.NOT_LEADER:
            self._after_not_leader(err)
        return err

    async def _call(
        self,
        method: Callable[[_Endpoint], Callable[..., Awaitable[T]]],
        request: Any,
        *,
        write: bool,
        dedup: bool = False,
        limit: float | None = None,
    ) -> T:
        """A unary call under the client's deadline (or ``limit``) and retry policy:
        retried when the failure is retry-safe, or (a deduplicated write) when its
        outcome is unknown."""
        return await self._drive(self._unary(method, request, write=write, dedup=dedup, limit=limit))  # type: ignore[no-any-return]


class _OneShot:
    """kazoo's one-shot watch: ``fn(WatchedEvent(type, "CONNECTED", path))`` once, on
    the client's callback thread (an ``async def`` on its loop), at the first event of
    ``watch`` (a ``once`` watch from the read's zxid, so no change after the read is
    missed, resuming by itself as every watch does). Unlike ZooKeeper's it is not the
    session's: it outlives a lost session, and holds one watch stream until it fires
    or the client closes. Tracked by the client: ``close()`` ends it unfired."""

    def __init__(self, client: Client, watch: Watch, fn: WatchFunc) -> None:
        self._client = client
        self._watch = watch
        self._fn = fn
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._watch.start()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._client._one_shots.add(self)
        self._task.add_done_callback(lambda _: self._client._one_shots.discard(self))
        self._client._track(self)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for ev in self._watch:
                event = WatchedEvent(_KAZOO_TYPES[ev.kind], "CONNECTED", ev.path)
                self._client._callbacks.submit(call_user, loop, self._fn, event)
                return
        except ConcordError as err:
            log.warning("a one-shot watch of %s ended unfired: %s", self._watch.path, err)
        finally:
            self._watch.cancel()

    def cancel(self) -> None:
        self._watch.cancel()
        if self._task is not None:
            self._task.cancel()

    async def aclose(self) -> None:
        self.cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


class Transaction(TransactionOps):
    """kazoo's transaction, async: ``commit()`` returns one result per op (the created
    path, the new Stat, True), or on failure the failing op's exception in its place
    and RolledBackError elsewhere; failures not tied to an op are raised."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self._client = client

    async def commit(self, *, fence: Fence | None = None) -> list[OpResult]:
        ops, ephemeral = self._take()
        return await self._client._commit(ops, ephemeral, fence)

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.commit()


def _snapshot_error(what: str) -> ConcordError:
    return make_error(ErrorCode.INTERNAL, f"the snapshot the server sent fails its check: {what}")


def _file_error(path: str, what: str, e: OSError) -> ConcordError:
    return make_error(ErrorCode.BAD_ARGUMENTS, f"{what} {path}: {e}")


def _flush_durably(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())


def _replace_durably(temp: str, target: str) -> None:
    """Renames ``temp`` to ``target`` and fsyncs the folder: the rename is durable."""
    try:
        os.replace(temp, target)
        folder = os.open(os.path.dirname(target) or ".", os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as e:
        raise _file_error(target, "cannot put the backup in place at", e) from None


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _fence(fence: Fence | None) -> common_pb2.Fence | None:
    return None if fence is None else common_pb2.Fence(key=fence.key, token=fence.token)
