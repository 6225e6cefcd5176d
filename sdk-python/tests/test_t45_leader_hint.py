"""NOT_LEADER hints: a server that refuses a call with NOT_LEADER names the leader in
``concord-leader-id`` / ``concord-leader-addr``; when that address is one of the
client's hosts the retry (of a unary call, a watch's open or its resume after the
stream ended so, the session's KeepAlive stream) goes there first, else to the next
host of the list. A real server answers NOT_LEADER only in an ensemble (a follower
cut off from its leader, or a server without a leader for `leader_wait_ms_max`), so
the refusing servers here are mostly fakes (a grpc.aio server that refuses every
call) before a real leader; the last test cuts a real follower off from its leader
one way."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import grpc
import pytest

import concord
from concord._proto import tree_pb2, tree_pb2_grpc
from concord.errors import ErrorCode, LeaderHint, from_status

from conftest import Server, eventually, run_with
from test_t50_ensemble import SIZE, Ensemble


class _Refuser(grpc.GenericRpcHandler):
    """Answers every call NOT_LEADER, naming ``leader`` (or no address); with
    ``forward_unary``, passes unary calls on to the leader instead (a follower that
    serves them but refuses the KeepAlive stream), and a Watch's first message
    before it refuses (a server that lost its leader with the stream open)."""

    def __init__(self, leader: str | None, forward_unary: bool = False) -> None:
        self.leader = leader
        self.calls: list[str] = []
        self._forward = grpc.aio.insecure_channel(leader) if forward_unary and leader else None

    def service(self, details: Any) -> Any:
        method = str(details.method)

        async def refuse(request: Any, context: Any) -> None:
            self.calls.append(method)
            metadata = [("concord-error-code", "NOT_LEADER"), ("concord-leader-id", "7")]
            if self.leader is not None:
                metadata.append(("concord-leader-addr", self.leader))
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "NOT_LEADER: not the leader", trailing_metadata=tuple(metadata)
            )

        async def refuse_stream(request: Any, context: Any) -> Any:
            await refuse(request, context)
            yield b""  # never reached: makes this an async generator

        async def forward(request: bytes, context: Any) -> bytes:
            assert self._forward is not None
            return await self._forward.unary_unary(method)(request)  # type: ignore[no-any-return]

        async def started_then_refuse(request: bytes, context: Any) -> Any:
            assert self._forward is not None
            call = self._forward.unary_stream(method)(request)
            yield await call.read()
            call.cancel()
            await refuse(request, context)

        if self._forward is not None and method.endswith("/Watch"):
            return grpc.unary_stream_rpc_method_handler(started_then_refuse)
        if self._forward is not None and not method.endswith("/KeepAlive"):
            return grpc.unary_unary_rpc_method_handler(forward)
        if method.endswith("/Watch"):
            return grpc.unary_stream_rpc_method_handler(refuse_stream)
        if method.endswith("/KeepAlive"):
            return grpc.stream_stream_rpc_method_handler(refuse_stream)
        return grpc.unary_unary_rpc_method_handler(refuse)


async def _refusers(
    leader: str | None, n: int, forward_unary: bool = False
) -> tuple[list[Any], list[_Refuser], list[str]]:
    servers, handlers, addrs = [], [], []
    for _ in range(n):
        server = grpc.aio.server()
        handler = _Refuser(leader, forward_unary)
        server.add_generic_rpc_handlers([handler])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        handlers.append(handler)
        addrs.append(f"127.0.0.1:{port}")
    return servers, handlers, addrs


RETRY = concord.Retry(max_tries=5, deadline=10.0, delay=0.01, max_delay=0.05)


def test_not_leader_goes_to_the_named_leader_first(server: Server) -> None:
    async def main() -> None:
        servers, (first, second), addrs = await _refusers(server.addr, 2)
        try:
            async with concord.aio.Client(",".join(addrs + [server.addr]), retry=RETRY, randomize_hosts=False) as c:
                pass  # starting a session goes through the hint too
            assert first.calls and not second.calls, (first.calls, second.calls)
            c = concord.aio.Client(",".join(addrs + [server.addr]), retry=RETRY, randomize_hosts=False)
            try:
                assert await c.exists("/") is not None
                assert c._current == 2 and len(first.calls) == 2 and not second.calls
            finally:
                await c.close()
        finally:
            for s in servers:
                await s.stop(None)

    asyncio.run(main())


@pytest.mark.parametrize("started", [False, True], ids=["refused", "started_then_refused"])
def test_a_watch_refused_not_leader_opens_on_the_named_leader(server: Server, root: str, started: bool) -> None:
    """The first host refuses the watch's open, or (``started``) starts the stream and
    then ends it NOT_LEADER: either way the watch opens, or resumes, on the named
    leader, not on the host that refused."""

    async def main() -> None:
        servers, (first, second), addrs = await _refusers(server.addr, 2, forward_unary=started)
        try:
            c = concord.aio.Client(",".join(addrs + [server.addr]), randomize_hosts=False)
            try:
                async with c.watch(root) as events:
                    async with concord.aio.Client(server.addr) as writer:
                        await writer.create(root, b"x")
                    event = await events.next(timeout=10)
                    assert event is not None and event.path == root
                    assert events.resumes == (1 if started else 0)
                assert first.calls == ["/concord.v1.Watch/Watch"] and not second.calls
                assert c._current == 2
            finally:
                await c.close()
        finally:
            for s in servers:
                await s.stop(None)

    asyncio.run(main())


def test_a_keep_alive_refused_not_leader_reopens_on_the_named_leader(server: Server) -> None:
    async def main() -> None:
        servers, (first, second), addrs = await _refusers(server.addr, 2, forward_unary=True)
        try:
            # The session opens through the first host (it forwards the Open); its
            # KeepAlive stream there is refused, naming the real server.
            async with concord.aio.Client(
                ",".join(addrs + [server.addr]), session_timeout=2.0, randomize_hosts=False
            ) as c:
                assert c._current == 0 and c.state is concord.State.CONNECTED

                async def moved() -> bool:
                    return c._current == 2

                await eventually("the keep-alive on the named leader", moved)
                assert first.calls == ["/concord.v1.Session/KeepAlive"] and not second.calls
                await asyncio.sleep(1.2)  # more than half the TTL: the pings are answered
                assert c.state is concord.State.CONNECTED and c._current == 2
                assert await c.exists("/") is not None
        finally:
            for s in servers:
                await s.stop(None)

    asyncio.run(main())


def test_not_leader_without_a_usable_hint_moves_to_the_next_host(server: Server) -> None:
    async def main() -> None:
        # The hint names a server not in the list (as a server may name it by another
        # address): the next host of the list, then the next.
        servers, (first, second), addrs = await _refusers("127.0.0.1:1", 2)
        try:
            c = concord.aio.Client(",".join(addrs + [server.addr]), retry=RETRY, randomize_hosts=False)
            try:
                assert await c.exists("/") is not None
                assert len(first.calls) == 1 and len(second.calls) == 1
            finally:
                await c.close()
            # Without retries the NOT_LEADER is raised, carrying the hint.
            c = concord.aio.Client(addrs[0], retry=None)
            try:
                with pytest.raises(concord.ConnectionLossError) as caught:
                    await c.exists("/")
                assert caught.value.code is ErrorCode.NOT_LEADER
                assert caught.value.leader_hint == LeaderHint(7, "127.0.0.1:1")
            finally:
                await c.close()
        finally:
            for s in servers:
                await s.stop(None)

    asyncio.run(main())


def test_leader_hint_parsing() -> None:
    md = (("concord-error-code", "NOT_LEADER"), ("concord-leader-id", "3"), ("concord-leader-addr", "[::1]:7181"))
    err = from_status(grpc.StatusCode.UNAVAILABLE, "NOT_LEADER: no", md, write=True)
    assert err.leader_hint == LeaderHint(3, "[::1]:7181") and err.retry_safe
    bare = from_status(grpc.StatusCode.UNAVAILABLE, "NOT_LEADER: no", md[:1], write=True)
    assert bare.leader_hint is None
    other = from_status(grpc.StatusCode.NOT_FOUND, "NO_NODE: /x", (("concord-error-code", "NO_NODE"),) + md[1:], write=False)
    assert other.leader_hint is None
    c = concord.aio.Client("a:1,[::1]:7181,b")
    assert c._host_index("[::1]:7181") == 1 and c._host_index("B:7181") == 2 and c._host_index("c:1") is None


def test_randomize_hosts_starts_clients_over_the_whole_list() -> None:
    # kazoo's randomize_hosts: clients given one list spread over it; False: the first.
    hosts = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
    assert {concord.aio.Client(hosts)._current for _ in range(200)} == {0, 1, 2}
    assert {concord.aio.Client(hosts, randomize_hosts=False)._current for _ in range(20)} == {0}
    synced = concord.Client(hosts, randomize_hosts=False)
    try:
        assert synced.aio._current == 0
    finally:
        synced.close()


def _refused_not_leader(addr: str) -> bool:
    """Whether a create through ``addr`` is refused with NOT_LEADER."""
    with grpc.insecure_channel(addr) as ch:
        try:
            path = f"/probe-{uuid.uuid4().hex[:8]}"
            tree_pb2_grpc.TreeStub(ch).Create(tree_pb2.CreateRequest(path=path), timeout=5)
        except grpc.RpcError as err:
            return dict(err.trailing_metadata() or ()).get("concord-error-code") == "NOT_LEADER"
    return False


def test_a_follower_cut_off_one_way_sends_the_write_to_the_leader_it_names(kind: str) -> None:
    """A real follower whose bytes to its leader are dropped (the leader's still
    arrive) stays in touch but refuses writes with NOT_LEADER, naming the leader. A
    client listing [that follower, the other follower, the leader] retries the write
    at the leader, not at the other follower (which would forward it too)."""
    ensemble = Ensemble(proxied=True)
    try:
        leader = ensemble.leader(list(range(SIZE)))
        cut = next(i for i in range(SIZE) if i != leader)
        other = next(i for i in range(SIZE) if i not in (leader, cut))
        ensemble.proxies[(cut, leader)].cut.set()
        # Writes sent before the follower gives up the silent path may still try it.
        deadline = time.monotonic() + 20
        while not _refused_not_leader(ensemble.servers[cut].addr):
            assert time.monotonic() < deadline, "the cut follower never refused a write"
            time.sleep(0.05)
        hosts = ",".join(ensemble.servers[i].addr for i in (cut, other, leader))

        async def body(c: Any) -> None:
            await c.create(f"/hint-{uuid.uuid4().hex[:8]}", b"x")
            core = c.sync._aio if kind == "sync" else c
            assert core._current == 2, f"the write went to host {core._current}, not the leader"

        run_with(kind, hosts, body, retry=RETRY, randomize_hosts=False)
    finally:
        ensemble.kill()
