"""kazoo's calls that issue 46 left unported, on both clients: ``get_acls`` and
``set_acls`` as Concord's ZooKeeper port answers getACL and setACL (the open ACL
only), the open ACL accepted by ``create``, ``ensure_path`` and a transaction's
``create``; ``Lock.cancel()`` and ``Semaphore.cancel()``; a state listener that
returns True removed, and ``remove_listener`` dropping the states queued for it;
``set_hosts``; a chroot in the connection string (``"host:port/app"``), with
``chroot`` and ``unchroot``, through calls, transactions, watches and caches."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from kazoo.security import OPEN_ACL_UNSAFE as KAZOO_OPEN_ACL
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

import concord
import concord.aio
from concord import ErrorCode, State, WatchedEvent
from concord.errors import Origin

from conftest import Server, SyncAdapter, eventually, free_port, run_with
from recipe_util import make, raw
from test_t60_watch import brief, open_watch, take
from test_t70_cache import Calls, children_watch, data_watch


def _name() -> str:
    return f"k-{uuid.uuid4().hex[:10]}"


async def _true(v: bool) -> bool:
    return v


# -- ACLs ------------------------------------------------------------------------------


def test_get_acls_and_set_acls_answer_as_the_zookeeper_port(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root, b"x")
        acls, stat = await c.get_acls(root)
        assert acls == concord.OPEN_ACL_UNSAFE == KAZOO_OPEN_ACL
        assert (acls[0].perms, acls[0].id.scheme, acls[0].id.id) == (31, "world", "anyone")
        assert stat == await c.exists(root)
        # The open ACL, kazoo's or Concord's, at any version or the node's aversion.
        assert await c.set_acls(root, KAZOO_OPEN_ACL) == stat
        assert await c.set_acls(root, concord.OPEN_ACL_UNSAFE, 0) == stat
        with pytest.raises(concord.BadVersionError):
            await c.set_acls(root, KAZOO_OPEN_ACL, 1)
        for bad in (READ_ACL_UNSAFE, [make_digest_acl("u", "p", all=True)], [], None, KAZOO_OPEN_ACL[0], "world"):
            with pytest.raises(concord.InvalidACLError) as e:
                await c.set_acls(root, bad)
            assert isinstance(e.value, concord.BadArgumentsError)
            assert e.value.code is ErrorCode.BAD_ARGUMENTS and e.value.origin is Origin.CLIENT
            assert "grants" in e.value.message or bad is None
        # The ACL is checked first, as ZooKeeper does; then the node.
        with pytest.raises(concord.InvalidACLError):
            await c.set_acls(f"{root}/none", READ_ACL_UNSAFE)
        with pytest.raises(concord.NoNodeError):
            await c.set_acls(f"{root}/none", KAZOO_OPEN_ACL)
        with pytest.raises(concord.NoNodeError):
            await c.get_acls(f"{root}/none")
        _, after = await c.get_acls(root)
        assert after.aversion == 0 and after == stat  # nothing changed

    run_with(kind, server.addr, body)


def test_creates_take_the_open_acl_and_refuse_any_other(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root)
        assert await c.create(f"{root}/o", b"", KAZOO_OPEN_ACL) == f"{root}/o"
        # kazoo's positional order: create(path, value, acl, ephemeral)
        assert await c.create(f"{root}/e", b"", concord.OPEN_ACL_UNSAFE, True) == f"{root}/e"
        assert (await c.exists(f"{root}/e")).ephemeral_owner == raw(c).session_id
        await c.ensure_path(f"{root}/p/q", KAZOO_OPEN_ACL)
        t = c.transaction()
        t.create(f"{root}/t", b"", KAZOO_OPEN_ACL)
        assert await t.commit() == [f"{root}/t"]
        with pytest.raises(concord.InvalidACLError):
            await c.create(f"{root}/r", b"", READ_ACL_UNSAFE)
        with pytest.raises(concord.InvalidACLError):
            await c.create(f"{root}/r", b"", [KAZOO_OPEN_ACL[0], READ_ACL_UNSAFE[0]])
        with pytest.raises(concord.InvalidACLError):
            await c.ensure_path(f"{root}/r/s", [make_digest_acl("u", "p", all=True)])
        t = c.transaction()
        with pytest.raises(concord.InvalidACLError):
            t.create(f"{root}/r", b"", READ_ACL_UNSAFE)
        assert sorted(await c.get_children(root)) == ["e", "o", "p", "t"]

    run_with(kind, server.addr, body)


# -- Lock.cancel, Semaphore.cancel -----------------------------------------------------


async def _unblock(waiting: "asyncio.Future[Any]", holder: Any) -> None:
    """After a failure: an acquire still waiting gets the lock and ends, so that the
    client can close (a sync acquire's worker thread would hold up the test's end)."""
    if not waiting.done():
        await holder.release()
        await asyncio.wait([waiting], timeout=10)


def test_lock_cancel_ends_a_waiting_acquire_as_kazoos(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        for recipe in ("Lock", "SemaphoreMutex"):
            name = _name()
            a, b = make(c, recipe, name, "a"), make(c, recipe, name, "b")

            async def b_waits() -> bool:
                return await a.contenders() == ["a", "b"]

            assert await a.acquire()
            waiting = asyncio.ensure_future(b.acquire())
            try:
                await eventually("b waits", b_waits)
                await b.cancel()
                with pytest.raises(concord.CancelledError) as caught:
                    await asyncio.wait_for(waiting, 10)
            finally:
                await _unblock(waiting, a)
            assert caught.value.code is ErrorCode.BAD_STATE and not caught.value.retry_safe
            assert not isinstance(caught.value, asyncio.CancelledError)
            assert await a.contenders() == ["a"] and not b.is_acquired  # it left the queue
            # The cancel is spent: b waits and gets the lock once a releases it.
            again = asyncio.ensure_future(b.acquire(timeout=10))
            try:
                await eventually("b waits again", b_waits)
            finally:
                await a.release()
            assert await asyncio.wait_for(again, 10) is True
            await b.release()
            # With none waiting, the next acquire is cancelled, once (kazoo's Lock).
            await b.cancel()
            with pytest.raises(concord.CancelledError):
                await b.acquire(timeout=5)
            assert await b.acquire(timeout=5) is True
            await b.release()

    run_with(kind, server.addr, body)


def test_semaphore_cancel_ends_a_waiting_acquire_as_kazoos(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        name = _name()
        first, second = make(c, "Semaphore", name, "s1", 1), make(c, "Semaphore", name, "s2", 1)
        queue = make(c, "Lock", name)  # only to read the queue of the name

        async def second_waits() -> bool:
            return await queue.contenders() == ["s1", "s2"]

        assert await first.acquire()
        waiting = asyncio.ensure_future(second.acquire())
        try:
            await eventually("s2 waits", second_waits)
            await second.cancel()
            with pytest.raises(concord.CancelledError):
                await asyncio.wait_for(waiting, 10)
        finally:
            await _unblock(waiting, first)
        assert await queue.contenders() == ["s1"]
        # kazoo's Semaphore forgets a cancel made while no acquire waits.
        await second.cancel()
        again = asyncio.ensure_future(second.acquire(timeout=10))
        try:
            await eventually("s2 waits again", second_waits)
        finally:
            await first.release()
        assert await asyncio.wait_for(again, 10) is True
        assert await second.lease_holders() == ["s2"]
        await second.release()

    run_with(kind, server.addr, body)


# -- state listeners -------------------------------------------------------------------


def test_a_listener_that_returns_true_is_removed(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        once: list[State] = []
        every: list[State] = []

        def removing(state: State) -> bool:
            once.append(state)
            return True

        def keeping(state: State) -> bool:
            every.append(state)
            return False  # only True removes

        c.add_listener(removing)
        c.add_listener(keeping)
        once_async: list[State] = []
        if kind == "aio":

            async def removing_async(state: State) -> bool:
                once_async.append(state)
                return True

            c.add_listener(removing_async)
        await c.restart()  # CLOSED, then CONNECTED (a new session)
        await eventually("both states heard", lambda: _true(every == [State.CLOSED, State.CONNECTED]))
        assert once == [State.CLOSED]
        if kind == "aio":
            assert once_async == [State.CLOSED]
        # Removed: adding it again makes it a listener again.
        c.add_listener(removing)
        await c.restart()
        await eventually("four states heard", lambda: _true(len(every) == 4))
        assert once == [State.CLOSED, State.CLOSED]

    run_with(kind, server.addr, body)


def test_remove_listener_drops_the_states_queued_for_it(server: Server, kind: str) -> None:
    async def body(c: Any) -> None:
        heard: list[State] = []
        others: list[State] = []
        busy, go_on = threading.Event(), threading.Event()

        def slow(state: State) -> None:
            heard.append(state)
            busy.set()
            go_on.wait(10)

        def other(state: State) -> None:
            others.append(state)

        c.add_listener(slow)
        c.add_listener(other)
        await c.restart()  # slow is held in CLOSED while CONNECTED queues for it
        assert await asyncio.to_thread(busy.wait, 10)
        c.remove_listener(slow)
        go_on.set()
        # The listener thread runs the queues in order: once `other` has CONNECTED,
        # slow's queued CONNECTED was dropped (or handed to it, before the fix).
        await eventually("the other listener heard both", lambda: _true(others == [State.CLOSED, State.CONNECTED]))
        assert heard == [State.CLOSED]

    run_with(kind, server.addr, body)


# -- set_hosts ---------------------------------------------------------------------------


async def _set_hosts(c: Any, hosts: str, randomize_hosts: bool | None = None) -> None:
    if isinstance(c, SyncAdapter):
        await c.set_hosts(hosts, randomize_hosts)
    else:
        c.set_hosts(hosts, randomize_hosts)


def test_set_hosts_moves_the_calls_and_keeps_the_session(server: Server, root: str, kind: str) -> None:
    dead = f"127.0.0.1:{free_port()}"

    async def body(c: Any) -> None:
        client = raw(c)
        session = client.session_id
        await c.create(root, b"1")
        await c.create(f"{root}/e", b"", ephemeral=True)
        w = await open_watch(c, root)
        # Only a host nothing listens on: the calls go there (retry=None: sent once).
        await _set_hosts(c, dead)
        assert client.hosts == [dead]
        with pytest.raises(concord.ConnectionLossError):
            await c.get(root)
        # Back: the same session, its ephemeral, and the watch opened before.
        await _set_hosts(c, server.addr)
        assert client.hosts == [server.addr]
        assert (await c.get(root))[0] == b"1"
        await c.set(root, b"2")
        assert brief(await take(w, 1)) == [("DATA_CHANGED", root, b"2")]
        # A listed host in use keeps the calls, wherever it is in the list.
        await _set_hosts(c, f"{dead},{server.addr}", randomize_hosts=False)
        assert client.hosts == [dead, server.addr]
        assert (await c.get(root))[0] == b"2"  # not sent to the dead host first
        # The chroot cannot change (kazoo's): refused, nothing changed.
        with pytest.raises(concord.BadArgumentsError, match="chroot"):
            await _set_hosts(c, f"{server.addr}/other")
        with pytest.raises(ValueError):
            await _set_hosts(c, " , ")
        assert client.hosts == [dead, server.addr]
        assert client.session_id == session and client.state is State.CONNECTED
        assert (await c.exists(f"{root}/e")).ephemeral_owner == session
        w.cancel()

    run_with(kind, server.addr, body, retry=None)


def test_set_hosts_before_start(server: Server, kind: str) -> None:
    """A client made with a host that answers nothing starts on the hosts it is given."""
    dead = f"127.0.0.1:{free_port()}"
    if kind == "aio":

        async def use() -> None:
            c = concord.aio.Client(dead)
            c.set_hosts(server.addr)
            try:
                await c.start(timeout=10)
                assert await c.exists("/") is not None
            finally:
                await c.close()

        asyncio.run(use())
        return
    s = concord.Client(dead)
    try:
        s.set_hosts(server.addr)
        s.start(timeout=10)
        assert s.exists("/") is not None
    finally:
        s.close()


# -- a chroot --------------------------------------------------------------------------


def test_connection_strings_parse_as_kazoos() -> None:
    from concord.aio.client import parse_connect

    assert parse_connect("a:1,b:2/app") == (["a:1", "b:2"], "/app")
    assert parse_connect("http://a:1,https://b/app//x/") == (["a:1", "b:7181"], "/app/x")
    assert parse_connect("a:1/") == (["a:1"], "")
    assert parse_connect("a:1") == (["a:1"], "")
    with pytest.raises(ValueError):
        parse_connect("a:1/app/../x")
    with pytest.raises(ValueError):
        parse_connect("/app")
    c = concord.aio.Client("a:1/app")
    assert c.hosts == ["a:1"] and c.chroot == "/app"
    assert c.unchroot("/app") == "/" and c.unchroot("/app/x/y") == "/x/y"
    assert c.unchroot("/apple") == "/apple" and c.unchroot("/other") == "/other"
    plain = concord.aio.Client("a:1")
    assert plain.chroot == "" and plain.unchroot("/app/x") == "/app/x"
    s = concord.Client("a:1/app")
    try:
        assert s.chroot == "/app" and s.hosts == ["a:1"] and s.unchroot("/app/x") == "/x"
    finally:
        s.close()


def test_a_chroot_puts_every_call_below_it(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        assert raw(c).chroot == root
        async with concord.aio.Client(server.addr) as plain:
            assert await plain.exists(root) is None
            # makepath creates the chroot too, as kazoo's ensure_path does.
            assert await c.create("/m/n", b"", makepath=True) == "/m/n"
            assert await plain.exists(f"{root}/m/n") is not None
            await c.ensure_path("/a")
            assert await c.create("/a/b", b"x") == "/a/b"
            assert (await plain.get(f"{root}/a/b"))[0] == b"x"
            created, stat = await c.create("/a/s-", b"", sequence=True, include_data=True)
            assert created.startswith("/a/s-") and len(created) == len("/a/s-") + 10
            assert await plain.exists(f"{root}{created}") is not None
            assert await c.get_children("/") == ["a", "m"]
            names, parent = await c.get_children("/a", include_data=True)
            assert names == ["b", created.rsplit("/", 1)[1]] and parent.num_children == 2
            assert (await c.get("/a/b"))[0] == b"x"
            assert (await c.set("/a/b", b"y")).version == 1
            assert (await plain.get(f"{root}/a/b"))[0] == b"y"
            assert (await c.exists("/")) == (await plain.exists(root))
            synced = await (asyncio.to_thread(c.sync.sync, "/a") if isinstance(c, SyncAdapter) else c.sync("/a"))
            assert synced >= stat.czxid
            assert (await c.get_acls("/a/b"))[0] == concord.OPEN_ACL_UNSAFE
            t = c.transaction()
            t.create("/a/t", b"1")
            t.set_data("/a/b", b"z")
            t.check("/a", 0)
            t.delete("/m/n")
            results = await t.commit()
            assert results[0] == "/a/t" and results[1].version == 2 and results[2:] == [True, True]
            assert await plain.exists(f"{root}/m/n") is None
            with pytest.raises(concord.NoNodeError):
                await c.get("/m/n")
            await c.delete("/m")
            await c.delete("/a", recursive=True)
            assert await plain.get_children(root) == []
            assert raw(c).unchroot(f"{root}/a") == "/a"

    run_with(kind, f"{server.addr}{root}", body)


def test_a_chroot_gives_watches_and_caches_the_clients_paths(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.ensure_path("/")  # the chroot
        w = await open_watch(c, "/w", recursive=True)
        assert w.path == "/w"
        await c.create("/w", b"1")
        await c.create("/w/x", b"2")
        assert brief(await take(w, 3)) == [
            ("CREATED", "/w", b"1"),
            ("CREATED", "/w/x", b"2"),
            ("CHILDREN_CHANGED", "/w", b""),
        ]
        w.cancel()
        # kazoo's one-shot watch
        fired: list[WatchedEvent] = []
        await c.get("/w/x", fired.append)
        # kazoo's ChildrenWatch and DataWatch
        names = Calls()
        await children_watch(c, "/w", names)
        await names.has(1)
        data = Calls()
        await data_watch(c, "/w/x", data)
        await data.has(1)
        await c.set("/w/x", b"3")
        await c.create("/w/y")
        await eventually("the one-shot watch fires", lambda: _true(len(fired) == 1))
        assert fired == [WatchedEvent("CHANGED", "CONNECTED", "/w/x")]
        await names.has(2)
        await data.has(2)
        assert names.snapshot() == [["x"], ["x", "y"]]
        assert [d for d, _ in data.snapshot()] == [b"2", b"3"]
        # A cache of the subtree
        if isinstance(c, SyncAdapter):
            cache: Any = c.sync.Cache("/w")
            await asyncio.to_thread(cache.start)
            assert await asyncio.to_thread(cache.wait_initialized, 10)
        else:
            cache = c.Cache("/w")
            await cache.start()
            assert await cache.wait_initialized(10)
        _, nodes = cache.snapshot()
        assert [(n.path, n.data) for n in nodes] == [("/w", b"1"), ("/w/x", b"3"), ("/w/y", b"")]
        assert cache.get("/w/y") is not None
        if isinstance(c, SyncAdapter):
            await asyncio.to_thread(cache.close)
        else:
            await cache.aclose()

    run_with(kind, f"{server.addr}{root}", body)
