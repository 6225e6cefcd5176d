"""kazoo's calls, unchanged, on both clients: kazoo's positional order where a name
is kazoo's (``create(path, value, acl, ephemeral, sequence, makepath,
include_data)``, a transaction's ``create``, ``get_children(path, watch,
include_data)``), ``acl`` accepted as None and refused otherwise (a ``watch`` that
is no function too) with
BAD_ARGUMENTS (nothing sent), kazoo's one-shot ``watch`` callbacks of get, exists
and get_children, kazoo's ZnodeStat names on Stat, ``timeout=``, ``client_id``,
``restart()`` and the sync client's ``retry(func, ...)``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import concord
import concord.aio
from concord import ErrorCode, Stat, WatchedEvent
from concord.errors import Origin, make_error

from conftest import Server, run_with


def test_create_takes_kazoos_positional_order(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root)
        # kazoo: create(path, value, acl, ephemeral): an ephemeral, not sequential.
        path = await c.create(f"{root}/e", b"x", None, True)
        assert path == f"{root}/e"
        stat = await c.exists(path)
        assert stat is not None and stat.ephemeral_owner == c.session_id
        # create(path, value, acl, ephemeral, sequence, makepath)
        path = await c.create(f"{root}/a/s-", b"y", None, False, True, True)
        assert path.startswith(f"{root}/a/s-") and len(path) == len(f"{root}/a/s-") + 10
        stat = await c.exists(path)
        assert stat is not None and stat.ephemeral_owner == 0
        # include_data, positional and by name: (path, Stat)
        created, stat = await c.create(f"{root}/d", b"abc", None, False, False, False, True)
        assert created == f"{root}/d" and isinstance(stat, Stat)
        assert stat.dataLength == 3 and stat.version == 0 and stat.czxid > 0
        created, stat = await c.create(f"{root}/d2", b"", include_data=True)
        assert created == f"{root}/d2" and stat.numChildren == 0

    run_with(kind, server.addr, body)


def test_an_acl_a_bad_watch_or_a_bad_flag_is_refused_and_nothing_created(server: Server, root: str, kind: str) -> None:
    open_acl = [("world", "anyone", 31)]

    async def body(c: Any) -> None:
        await c.create(root)
        refused = [
            lambda: c.create(f"{root}/n", b"", open_acl),
            lambda: c.create(f"{root}/n", b"", open_acl, True),
            # Concord's old order, create(path, value, ephemeral): acl=True is refused.
            lambda: c.create(f"{root}/n", b"", True),
            lambda: c.create(f"{root}/n", b"", None, 1),
            lambda: c.create(f"{root}/n", "text"),
            lambda: c.create(f"{root}/n", 5),
            lambda: c.ensure_path(f"{root}/n/m", open_acl),
            lambda: c.get(root, "not a function"),
            lambda: c.exists(root, 5),
            lambda: c.get_children(root, True),
            lambda: c.get_children(root, None, "yes"),
            lambda: c.set(root, "text"),
        ]
        for call in refused:
            with pytest.raises(concord.BadArgumentsError) as e:
                await call()
            assert e.value.code is ErrorCode.BAD_ARGUMENTS and e.value.origin is Origin.CLIENT
            assert not e.value.retry_safe
        with pytest.raises(concord.BadArgumentsError) as e:
            await c.create(f"{root}/n", b"", open_acl)
        assert "grants" in e.value.message and "acl=None" in e.value.message
        assert await c.get_children(root) == []
        assert (await c.get(root))[1].version == 0
        # None is kazoo's default, accepted in every place.
        await c.ensure_path(f"{root}/p/q", None)
        assert (await c.get(f"{root}/p/q", None))[0] == b""
        assert await c.exists(f"{root}/p", None) is not None

    run_with(kind, server.addr, body)


def test_a_transaction_create_takes_kazoos_order(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root)
        t = c.transaction()
        t.create(f"{root}/e", b"x", None, True)  # kazoo: (path, value, acl, ephemeral)
        t.create(f"{root}/s-", b"y", None, False, True)
        with pytest.raises(concord.BadArgumentsError):
            t.create(f"{root}/bad", b"", [("world", "anyone", 31)])
        with pytest.raises(concord.BadArgumentsError):
            t.create(f"{root}/bad", b"", True)
        with pytest.raises(concord.BadArgumentsError):
            t.set_data(root, "text")
        e, s = await t.commit()
        assert e == f"{root}/e" and s.startswith(f"{root}/s-")
        stat = await c.exists(e)
        assert stat is not None and stat.ephemeral_owner == c.session_id
        assert sorted(await c.get_children(root)) == sorted([e, s][i].rsplit("/", 1)[1] for i in (0, 1))

    run_with(kind, server.addr, body)


def test_get_children_include_data_gives_the_nodes_stat(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root, b"parent")
        for i in range(7):  # the shared server pages children 3 at a time
            await c.create(f"{root}/c{i}")
        names, stat = await c.get_children(root, None, True)
        assert names == [f"c{i}" for i in range(7)]
        assert isinstance(stat, Stat) and stat.numChildren == 7 and stat.dataLength == 6
        assert stat.cversion == 7 and stat.children_count == 7
        names2, stat2 = await c.get_children(root, include_data=True)
        assert names2 == names and stat2.pzxid == stat.pzxid
        assert await c.get_children(root) == names
        with pytest.raises(concord.NoNodeError):
            await c.get_children(f"{root}/none", include_data=True)

    run_with(kind, server.addr, body)


def test_stat_has_kazoos_names_properties_and_order(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root)
        await c.create(f"{root}/e", b"four", ephemeral=True)
        await c.set(f"{root}/e", b"five!")
        _, s = await c.get(f"{root}/e")
        assert (s.czxid, s.mzxid, s.pzxid, s.version, s.cversion, s.aversion) == (
            s.creation_transaction_id, s.last_modified_transaction_id, s.pzxid, 1, 0, s.acl_version,
        )
        assert s.mzxid > s.czxid and s.children_version == s.cversion
        assert s.ctime == s.ctime_ms and s.mtime == s.mtime_ms and s.mtime >= s.ctime > 0
        assert s.created == s.ctime / 1000.0 and s.last_modified == s.mtime / 1000.0
        assert s.ephemeralOwner == c.session_id == s.owner_session_id
        assert s.dataLength == 5 == s.data_length and s.numChildren == 0 == s.children_count
        # kazoo's ZnodeStat is a namedtuple: unpacking and indexing in its order.
        czxid, mzxid, ctime, mtime, version, cversion, aversion, owner, length, children, pzxid = s
        assert (czxid, mzxid, ctime, mtime, version) == (s.czxid, s.mzxid, s.ctime, s.mtime, 1)
        assert (cversion, aversion, owner, length, children, pzxid) == (0, 0, c.session_id, 5, 0, s.pzxid)
        assert s[4] == 1 and s[-1] == s.pzxid and len(s) == 11
        _, p = await c.get(root)
        assert p.owner_session_id is None and p.ephemeralOwner == 0 and p.numChildren == 1

    run_with(kind, server.addr, body)


def test_timeout_client_id_and_restart(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        assert c.session_ttl_ms == 3000  # timeout=, kazoo's name of session_timeout
        assert c.client_id == (c.session_id, b"")
        first = c.session_id
        await c.restart()  # kazoo's: stop(), start(): a new session
        assert c.session_id != first and c.client_id == (c.session_id, b"")

    run_with(kind, server.addr, body, timeout=3.0)
    c = concord.Client(server.addr, timeout=3.0)
    try:
        assert c.client_id is None  # no session yet
        c.start()
        assert c.client_id == (c.session_id, b"")
        c.stop()
        assert c.client_id is None  # closed
    finally:
        c.close()
    for make in (concord.Client, concord.aio.Client):
        with pytest.raises(ValueError):
            make(server.addr, 4.0, timeout=3.0)


def test_the_sync_clients_retry_calls_a_function_again_while_it_fails_retry_safe(server: Server) -> None:
    with concord.Client(server.addr, retry=concord.Retry(max_tries=3, delay=0.001, max_delay=0.002)) as c:
        calls: list[int] = []

        def flaky(value: bytes) -> bytes:
            calls.append(1)
            if len(calls) < 3:
                raise make_error(ErrorCode.UNAVAILABLE, "not yet", origin=Origin.NOT_SENT, write=True)
            return value

        assert c.retry(flaky, b"v") == b"v" and len(calls) == 3
        calls.clear()

        def never() -> None:
            calls.append(1)
            raise make_error(ErrorCode.UNAVAILABLE, "never", origin=Origin.NOT_SENT)

        with pytest.raises(concord.ConnectionLossError):
            c.retry(never)
        assert len(calls) == 4  # the call and max_tries retries
        calls.clear()

        def unknown() -> None:
            calls.append(1)
            raise make_error(ErrorCode.TIMEOUT, "lost", origin=Origin.TRANSPORT, write=True)

        with pytest.raises(concord.TimeoutError):
            c.retry(unknown)  # an outcome unknown is not retried: func is no one write
        assert len(calls) == 1
        assert c.retry(c.get, "/")[1].numChildren >= 0
        assert c.retry_policy == concord.Retry(max_tries=3, delay=0.001, max_delay=0.002)


def test_one_shot_watches_fire_once_as_zookeepers_do(server: Server, root: str, kind: str) -> None:
    """kazoo's ``get(path, watch)``, ``exists(path, watch)`` and
    ``get_children(path, watch)``: each function is called once, with kazoo's
    WatchedEvent, at the first change of its kind after the read, on the callback
    thread; later changes do not call it again; a change made before the read (but
    after an earlier zxid) does not fire it."""
    import queue
    import threading

    events: queue.Queue[tuple[str, WatchedEvent, str]] = queue.Queue()

    def recorder(name: str) -> Any:
        def fn(event: WatchedEvent) -> None:
            events.put((name, event, threading.current_thread().name))

        return fn

    async def take() -> tuple[str, WatchedEvent, str]:
        # Off the loop: the aio client's watches need it to deliver.
        return await asyncio.to_thread(events.get, True, 10)

    async def body(c: Any) -> None:
        await c.create(root, b"0")
        await c.set(root, b"1")  # before the read: must not fire the watch
        data, _ = await c.get(root, recorder("get"))
        assert data == b"1"
        assert await c.exists(f"{root}/x", recorder("exists")) is None
        assert await c.get_children(root, recorder("children")) == []
        assert events.empty()

        await c.set(root, b"2")  # fires get's watch (CHANGED)
        name, event, thread = await take()
        assert (name, event) == ("get", WatchedEvent("CHANGED", "CONNECTED", root))
        assert thread.startswith("concord-watch")
        await c.create(f"{root}/x")  # fires exists' (CREATED) and children's (CHILD)
        fired = {(await take())[:2], (await take())[:2]}
        assert fired == {
            ("exists", WatchedEvent("CREATED", "CONNECTED", f"{root}/x")),
            ("children", WatchedEvent("CHILD", "CONNECTED", root)),
        }
        await c.set(root, b"3")  # nothing fires again: each watch was one-shot
        await c.delete(f"{root}/x")
        # A get watch on a node that goes: DELETED; a missing node: NoNodeError, no watch.
        _, _ = await c.get(f"{root}", recorder("gone"))
        with pytest.raises(concord.NoNodeError):
            await c.get(f"{root}/none", recorder("none"))
        await c.delete(root)
        name, event, _ = await take()
        assert (name, event) == ("gone", WatchedEvent("DELETED", "CONNECTED", root))
        # A last watch, fired after every change above: nothing else was queued.
        await c.create(f"{root}-last")
        await c.get(f"{root}-last", recorder("last"))
        await c.set(f"{root}-last", b"x")
        name, event, _ = await take()
        assert (name, event) == ("last", WatchedEvent("CHANGED", "CONNECTED", f"{root}-last"))
        assert events.empty(), events.get()

    run_with(kind, server.addr, body)


def test_an_unfired_one_shot_watch_ends_with_the_client(server: Server, root: str) -> None:
    calls: list[WatchedEvent] = []

    async def main() -> None:
        c = concord.aio.Client(server.addr)
        await c.start()
        await c.create(root)
        await c.get(root, calls.append)
        await c.exists(f"{root}/none", calls.append)
        shots = list(c._one_shots)
        assert len(shots) == 2
        await c.close()
        assert not c._one_shots
        assert all(shot._task.done() and shot._watch.cancelled for shot in shots)

    asyncio.run(main())
    assert calls == []
    with concord.Client(server.addr) as s:
        s.get(root, calls.append)
        assert len(s.aio._one_shots) == 1
    assert not s.aio._one_shots and calls == []


def test_client_id_takes_a_session_over(server: Server, root: str, kind: str) -> None:
    """kazoo's ``KazooClient(client_id=...)``: a client given another's client_id
    takes its session over, ephemerals included, and keeps it alive after the first
    stops pinging (a process gone); a session that is gone cannot be taken over."""
    import time

    first = concord.Client(server.addr, timeout=1.0)
    first.start()
    try:
        eph = first.create(f"{root}-eph", b"mine", ephemeral=True)
        client_id = first.client_id
        assert client_id is not None

        async def body(c: Any) -> None:
            assert c.session_id == client_id[0] and c.client_id == client_id
            assert c.session_ttl_ms == first.session_ttl_ms
            # Its writes carry the session and request ids of their own, not the
            # first client's (the server remembers those: a reused id would be
            # refused, or answered with another write's outcome).
            assert await c.create(f"{root}-other", b"x") == f"{root}-other"
            assert (await c.set(eph, b"new")).version == 1
            # The first client stops pinging; this one keeps the session alive
            # past several TTLs.
            first._io.run(first.aio._session.stop())
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                stat = await c.exists(eph)
                assert stat is not None and stat.ephemeral_owner == client_id[0]
                await asyncio.sleep(0.1)
            assert c.state.connected
            await c.stop()  # closes the session: the ephemeral goes
            assert await c.exists(eph) is None

        run_with(kind, server.addr, body, client_id=client_id)
    finally:
        first.close()

    gone = concord.Client(server.addr, client_id=client_id)
    try:
        with pytest.raises(concord.SessionExpiredError):
            gone.start()
        gone.start()  # a new session once the old one is known gone
        assert gone.session_id not in (None, client_id[0])
    finally:
        gone.close()
    for bad in ((0, b""), (client_id[0],), "x", (True, b"")):
        with pytest.raises(ValueError):
            concord.Client(server.addr, client_id=bad)  # type: ignore[arg-type]
