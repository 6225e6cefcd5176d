"""Every call of both clients against a real server, and the exceptions it raises."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import pytest

import concord
from concord import ErrorCode, State

from conftest import Server, eventually, run_with


def test_create_get_set_exists_delete(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        assert await c.create(root, b"v0") == root
        data, stat = await c.get(root)
        assert (data, stat.version, stat.ephemeral_owner) == (b"v0", 0, 0)
        assert stat.czxid == stat.mzxid and stat.czxid > 0

        stat = await c.set(root, b"v1")
        assert stat.version == 1
        stat = await c.set(root, b"v2", version=1)
        assert stat.version == 2
        with pytest.raises(concord.BadVersionError) as e:
            await c.set(root, b"x", version=1)
        assert e.value.code is ErrorCode.BAD_VERSION and not e.value.retry_safe

        seen = (await c.exists(root, linearizable=True))
        assert seen is not None and seen.version == 2 and seen.data_length == 2
        assert (await c.get(root, linearizable=True))[0] == b"v2"
        assert c.last_zxid >= stat.mzxid

        with pytest.raises(concord.BadVersionError):
            await c.delete(root, version=7)
        await c.delete(root, version=2)
        assert await c.exists(root) is None
        with pytest.raises(concord.NoNodeError) as e:
            await c.get(root)
        assert e.value.code is ErrorCode.NO_NODE and root in e.value.message
        with pytest.raises(concord.NoNodeError):
            await c.delete(root)
        with pytest.raises(concord.NoNodeError):
            await c.set(root, b"x")

    run_with(kind, server.addr, body)


def test_create_errors_makepath_and_ensure_path(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        with pytest.raises(concord.NoNodeError):
            await c.create(f"{root}/a/b")
        assert await c.create(f"{root}/a/b", b"x", makepath=True) == f"{root}/a/b"
        assert (await c.get(f"{root}/a"))[0] == b""
        with pytest.raises(concord.NodeExistsError) as e:
            await c.create(f"{root}/a/b")
        assert e.value.code is ErrorCode.NODE_EXISTS and not e.value.retry_safe

        await c.ensure_path(f"{root}/p/q/r")
        await c.ensure_path(f"{root}/p/q/r")
        assert await c.exists(f"{root}/p/q/r") is not None

        with pytest.raises(concord.BadArgumentsError) as e:
            await c.create("no-slash")
        assert e.value.code is ErrorCode.BAD_PATH

    run_with(kind, server.addr, body)


def test_sequential_nodes(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.ensure_path(root)
        first = await c.create(f"{root}/job-", sequence=True)
        second = await c.create(f"{root}/job-", b"2", sequence=True)
        assert re.fullmatch(re.escape(root) + r"/job-\d{10}", first)
        assert int(second[-10:]) > int(first[-10:])
        eph = await c.create(f"{root}/e-", ephemeral=True, sequence=True)
        stat = await c.exists(eph)
        assert stat is not None and stat.ephemeral_owner == c.session_id
        # Keep-alive pings carry the newest zxid seen, as reads do.
        core = c if kind == "aio" else c.sync.aio
        assert core._session._ping().min_zxid == c.last_zxid >= stat.czxid

    run_with(kind, server.addr, body)


def test_children_follow_pages(server: Server, root: str, kind: str) -> None:
    # The shared server's pages hold 3 children: 8 take three pages.
    names = [f"n{i}" for i in range(8)]

    async def body(c: Any) -> None:
        await c.ensure_path(root)
        for n in reversed(names):
            await c.create(f"{root}/{n}")
        assert await c.get_children(root) == sorted(names)
        assert await c.get_children(root, linearizable=True) == sorted(names)
        assert await c.get_children(f"{root}/n0") == []
        with pytest.raises(concord.NoNodeError):
            await c.get_children(f"{root}/missing")

    run_with(kind, server.addr, body)


def test_delete_not_empty_and_recursive(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        for p in ("a/b/c", "a/b/d", "a/e", "f"):
            await c.create(f"{root}/{p}", makepath=True)
        with pytest.raises(concord.NotEmptyError) as e:
            await c.delete(root)
        assert e.value.code is ErrorCode.NOT_EMPTY
        await c.delete(f"{root}/a", recursive=True)
        assert await c.get_children(root) == ["f"]
        await c.delete(root, recursive=True)
        assert await c.exists(root) is None
        await c.delete(root, recursive=True)  # gone already: nothing to do (kazoo's way)

    run_with(kind, server.addr, body)


def test_ephemerals_belong_to_the_session_and_go_at_stop(server: Server, root: str, kind: str) -> None:
    observer = concord.Client(server.addr)
    observer.start()
    try:
        observer.ensure_path(root)

        async def owner_body(c: Any) -> None:
            path = await c.create(f"{root}/eph", b"mine", ephemeral=True)
            stat = await c.exists(path)
            assert stat is not None and stat.ephemeral_owner == c.session_id
            with pytest.raises(concord.NoChildrenForEphemeralsError) as e:
                await c.create(f"{path}/child")
            assert e.value.code is ErrorCode.NO_CHILDREN_FOR_EPHEMERALS
            assert await asyncio.to_thread(observer.exists, path) is not None

        # The owner's client is stopped as its body ends: the node goes with its session.
        run_with(kind, server.addr, owner_body)
        assert observer.exists(f"{root}/eph", linearizable=True) is None
    finally:
        observer.close()


def test_stop_closes_and_start_opens_a_new_session(server: Server, root: str) -> None:
    c = concord.Client(server.addr)
    try:
        c.start()
        first = c.session_id
        c.create(root, ephemeral=True)
        c.stop()
        assert c.state is State.CLOSED
        assert c.exists(root) is None
        with pytest.raises(concord.SessionExpiredError) as e:
            c.create(root, ephemeral=True)
        assert e.value.code is ErrorCode.SESSION_EXPIRED and not e.value.retry_safe
        c.start()
        assert c.state is State.CONNECTED and c.session_id != first
        c.create(root, ephemeral=True)
    finally:
        c.close()


def test_transaction_applies_all_or_nothing(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        await c.create(root, b"0")
        t = c.transaction()
        t.create(f"{root}/a", b"a")
        t.create(f"{root}/s-", sequence=True)
        t.create(f"{root}/e", ephemeral=True)
        t.set_data(root, b"1", version=0)
        t.check(f"{root}/a", 0)
        t.delete(f"{root}/a")
        results = await t.commit()
        assert results[0] == f"{root}/a"
        assert results[1].startswith(f"{root}/s-")
        assert results[2] == f"{root}/e"
        assert isinstance(results[3], concord.Stat) and results[3].version == 1
        assert results[4:] == [True, True]
        stat = await c.exists(f"{root}/e")
        assert stat is not None and stat.ephemeral_owner == c.session_id
        with pytest.raises(ValueError):
            await t.commit()

        t = c.transaction()
        t.create(f"{root}/b")
        t.set_data(root, b"2", version=0)  # the version is 1 now
        results = await t.commit()
        assert isinstance(results[0], concord.RolledBackError)
        assert isinstance(results[1], concord.BadVersionError) and results[1].op_index == 1
        assert await c.exists(f"{root}/b") is None
        assert (await c.get(root))[0] == b"1"

    run_with(kind, server.addr, body)


def test_fenced_writes_fail_once_the_hold_is_gone(server: Server, root: str) -> None:
    import grpc

    from concord._proto import lock_pb2, lock_pb2_grpc

    c = concord.Client(server.addr)
    c.start()
    try:
        c.create(root, b"0")
        with grpc.insecure_channel(server.addr) as ch:
            locks = lock_pb2_grpc.LockStub(ch)
            held = locks.Acquire(
                lock_pb2.AcquireRequest(name=root[1:], session_id=c.session_id, owner_id="t"),
                timeout=10,
            )
            fence = concord.Fence(held.key, held.token)
            assert c.set(root, b"1", fence=fence).version == 1
            locks.Release(lock_pb2.ReleaseRequest(key=held.key, token=held.token), timeout=10)
        with pytest.raises(concord.FencedError) as e:
            c.set(root, b"2", fence=fence)
        assert e.value.code is ErrorCode.FENCED and not e.value.retry_safe
        with pytest.raises(concord.FencedError):
            c.create(f"{root}/x", fence=fence)
        t = c.transaction()
        t.delete(root)
        with pytest.raises(concord.FencedError):
            t.commit(fence=fence)
        assert c.get(root)[0] == b"1"
    finally:
        c.close()


def test_a_dead_address_is_connection_loss_and_a_stalled_server_times_out(own_server: Server) -> None:
    from conftest import free_port

    dead = concord.Client(f"127.0.0.1:{free_port()}", retry=None)
    try:
        with pytest.raises(concord.ConnectionLossError) as e:
            dead.exists("/")
        assert e.value.code is ErrorCode.UNAVAILABLE and e.value.retry_safe
        with pytest.raises(concord.TimeoutError):
            dead.start(timeout=0.5)
    finally:
        dead.close()

    c = concord.Client(own_server.addr, call_timeout=0.3, retry=None)
    c.start()
    try:
        c.create("/x")
        own_server.stop()
        try:
            with pytest.raises(concord.TimeoutError) as e:
                c.set("/x", b"1")
            assert e.value.code is ErrorCode.TIMEOUT
            assert e.value.indeterminate and not e.value.retry_safe
            with pytest.raises(concord.TimeoutError) as e:
                c.get("/x")
            assert e.value.retry_safe and not e.value.indeterminate
        finally:
            own_server.cont()
    finally:
        c.close()


def test_retries_ride_out_a_stall_for_reads(own_server: Server) -> None:
    async def body() -> None:
        # The write goes through a client without a tight deadline: a write whose
        # outcome is unknown is not retried, and a loaded machine can take 0.5 s.
        async with concord.aio.Client(own_server.addr) as writer:
            await writer.create("/r", b"v")
        async with concord.aio.Client(
            own_server.addr, call_timeout=0.5, retry=concord.Retry(deadline=20.0, max_delay=0.2)
        ) as c:
            own_server.stop()
            loop = asyncio.get_running_loop()
            # The read fails (times out) while the server is stopped, and is retried
            # until it answers again.
            loop.call_later(0.8, own_server.cont)
            data, _ = await asyncio.wait_for(c.get("/r"), 20)
            assert data == b"v"

    import concord.aio

    asyncio.run(body())


def test_calls_move_past_a_dead_host_of_the_list(server: Server, root: str, kind: str) -> None:
    from conftest import free_port

    hosts = f"127.0.0.1:{free_port()},{server.addr}"

    async def body(c: Any) -> None:
        assert await c.create(root, b"x") == root
        for _ in range(4):  # whichever host is current, reads land on the live one
            assert (await c.get(root))[0] == b"x"

    run_with(kind, hosts, body, retry=concord.Retry(deadline=10.0, max_delay=0.1), randomize_hosts=False)


def test_calls_move_past_a_stalled_host_of_the_list(server: Server, own_server: Server, root: str) -> None:
    c = concord.Client(
        f"{own_server.addr},{server.addr}",
        call_timeout=0.5,
        retry=concord.Retry(deadline=10.0, max_delay=0.1),
        randomize_hosts=False,
    )
    try:
        c.exists("/")  # answered by the first host
        own_server.stop()
        try:
            # The first attempt times out on the stalled host; the retry goes to the next.
            assert c.exists("/") is not None
            c.create(root, b"x")  # now sent to the live host at once
            assert c.get(root)[0] == b"x"
        finally:
            own_server.cont()
    finally:
        c.close()


def test_sync_calls_do_not_wait_for_the_io_loop(server: Server, root: str) -> None:
    """The sync client's unary calls go out on the caller's thread: they are answered
    while the client's I/O loop is held up (they would wait for it through the loop)."""
    c = concord.Client(server.addr)
    held, release = threading.Event(), threading.Event()
    try:
        c.start()
        c.aio_loop.call_soon_threadsafe(lambda: (held.set(), release.wait(10)))
        assert held.wait(5)
        started = time.monotonic()
        assert c.create(root, b"x", ephemeral=True) == root
        assert c.get(root, linearizable=True)[0] == b"x"
        assert c.set(root, b"y").version == 1
        with c.transaction() as t:
            t.check(root, 1)
            t.create(f"{root}-e", ephemeral=True)
        assert c.exists(f"{root}-e") is not None and c.get_children("/")
        assert time.monotonic() - started < 5, "the calls waited for the loop"
    finally:
        release.set()
        c.close()


def test_threads_share_one_sync_client(server: Server, root: str) -> None:
    """8 threads on one sync client: every write lands, the ephemerals (a create and a
    transaction's, retried with their request ids) are the session's, and the client's
    zxid is the newest any answer carried."""
    threads, rounds = 8, 25
    c = concord.Client(server.addr, retry=concord.Retry(deadline=5.0))
    newest = [0] * threads
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            path = f"{root}/n{i}"
            c.create(path, b"0", makepath=True)
            for n in range(1, rounds + 1):
                stat = c.set(path, str(n).encode(), version=n - 1)
                newest[i] = max(newest[i], stat.mzxid)
                assert c.get(path)[0] == str(n).encode()
            c.create(f"{path}-e", ephemeral=True)
            with c.transaction() as t:
                t.create(f"{path}-t", ephemeral=True)
        except BaseException as e:  # reported by the main thread
            failures.append(e)

    try:
        c.start()
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        assert not failures, failures
        assert c.last_zxid >= max(newest)
        owned = [c.exists(f"{root}/n{i}-{s}") for i in range(threads) for s in "et"]
        assert all(st is not None and st.ephemeral_owner == c.session_id for st in owned)
        c.stop()  # the session's ephemerals go with it
        with concord.Client(server.addr) as other:
            assert sorted(other.get_children(root)) == sorted(f"n{i}" for i in range(threads))
    finally:
        c.close()
