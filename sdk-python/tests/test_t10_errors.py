"""Error parsing and classification, and the retry rules, without a server."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

import concord
import concord.aio
from concord._proto import common_pb2
from concord.errors import ErrorCode, Origin, from_status

S = grpc.StatusCode


def test_error_codes_match_the_proto() -> None:
    assert {c.name: c.value for c in ErrorCode} == dict(common_pb2.ErrorCode.items())


@pytest.mark.parametrize(
    "code, cls",
    [
        (ErrorCode.NO_NODE, concord.NoNodeError),
        (ErrorCode.NODE_EXISTS, concord.NodeExistsError),
        (ErrorCode.BAD_VERSION, concord.BadVersionError),
        (ErrorCode.NOT_EMPTY, concord.NotEmptyError),
        (ErrorCode.NO_CHILDREN_FOR_EPHEMERALS, concord.NoChildrenForEphemeralsError),
        (ErrorCode.SESSION_EXPIRED, concord.SessionExpiredError),
        (ErrorCode.FENCED, concord.FencedError),
        (ErrorCode.PERMISSION_DENIED, concord.PermissionDeniedError),
        (ErrorCode.QUOTA_EXCEEDED, concord.QuotaExceededError),
        (ErrorCode.TIMEOUT, concord.TimeoutError),
        (ErrorCode.UNAVAILABLE, concord.ConnectionLossError),
        (ErrorCode.NOT_LEADER, concord.ConnectionLossError),
        (ErrorCode.OUTCOME_UNKNOWN, concord.ConnectionLossError),
        (ErrorCode.BAD_PATH, concord.BadArgumentsError),
        (ErrorCode.LOCK_HELD, concord.ConcordError),
    ],
)
def test_the_metadata_code_names_the_class(code: ErrorCode, cls: type) -> None:
    md = (("concord-error-code", code.name),)
    e = from_status(S.UNKNOWN, f"{code.name}: what happened", md, write=False)
    assert type(e) is cls and e.code is code and e.message == "what happened"
    assert e.origin is Origin.SERVER and str(e) == f"{code.name}: what happened"


def test_the_message_prefix_names_the_code_without_metadata() -> None:
    e = from_status(S.FAILED_PRECONDITION, "BAD_VERSION: op 2: expected 1", (), write=True)
    assert isinstance(e, concord.BadVersionError) and e.op_index == 2
    assert from_status(S.NOT_FOUND, "NO_NODE: /a", (), write=False).op_index is None


def test_statuses_no_server_answered_map_from_the_grpc_code() -> None:
    refused = from_status(S.UNAVAILABLE, "failed to connect to all addresses; x", (), write=True)
    assert refused.origin is Origin.NOT_SENT and refused.retry_safe and not refused.indeterminate
    reset = from_status(S.UNAVAILABLE, "Socket closed", (), write=True)
    assert reset.origin is Origin.TRANSPORT and isinstance(reset, concord.ConnectionLossError)
    assert reset.indeterminate and not reset.retry_safe
    deadline = from_status(S.DEADLINE_EXCEEDED, "Deadline Exceeded", (), write=False)
    assert isinstance(deadline, concord.TimeoutError) and deadline.retry_safe
    assert isinstance(deadline, TimeoutError)  # the builtin too
    assert from_status(S.DATA_LOSS, "?", (), write=False).code is ErrorCode.INTERNAL


@pytest.mark.parametrize(
    "code, write, retry_safe, indeterminate",
    [
        (ErrorCode.NOT_LEADER, True, True, False),  # the server did nothing
        (ErrorCode.UNAVAILABLE, True, False, True),  # it may have proposed it
        (ErrorCode.OUTCOME_UNKNOWN, True, False, True),
        (ErrorCode.UNAVAILABLE, False, True, False),  # reads change nothing
        (ErrorCode.SLOW_CONSUMER, False, True, False),
        (ErrorCode.NO_NODE, False, False, False),
        (ErrorCode.FENCED, True, False, False),
        (ErrorCode.QUOTA_EXCEEDED, True, False, False),
    ],
)
def test_retry_safety_follows_the_rust_sdk(
    code: ErrorCode, write: bool, retry_safe: bool, indeterminate: bool
) -> None:
    md = (("concord-error-code", code.name),)
    e = from_status(S.UNAVAILABLE, code.name, md, write=write)
    assert (e.retry_safe, e.indeterminate) == (retry_safe, indeterminate)


def test_backoff_doubles_within_bounds_with_equal_jitter() -> None:
    r = concord.Retry(delay=0.1, max_delay=0.5, max_tries=3, deadline=None)
    assert [r.backoff(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.5]
    for _ in range(100):
        assert 0.2 <= r.jittered(3) <= 0.4
    assert r.allows(3, 1e9) and not r.allows(4, 0.0)
    assert not concord.Retry(deadline=1.0).allows(1, 1.0)


class FakeRpcError(grpc.RpcError):
    def __init__(self, status: grpc.StatusCode, details: str, code: str | None = None) -> None:
        self._status, self._details = status, details
        self._md = (("concord-error-code", code),) if code else ()

    def code(self) -> grpc.StatusCode:
        return self._status

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._md


class FakeResponse:
    class header:  # noqa: N801 - a message's field
        zxid = 42


class _Driver:
    """A client whose calls are scripted, and a way to make one through its
    ``driver``: the aio core's (``_call`` awaited on a loop) or the sync client's
    (the same plan carried out on this thread by ``_BlockingCalls``)."""

    def __init__(self, driver: str, hosts: str = "127.0.0.1:1") -> None:
        self.driver = driver
        retry = concord.Retry(max_tries=5, delay=0.001, max_delay=0.002)
        if driver == "aio":
            self.core = concord.aio.Client(hosts, retry=retry, randomize_hosts=False)
            self.core._endpoint = lambda: None  # type: ignore[method-assign,assignment,return-value]
            self.sync: concord.Client | None = None
        else:
            self.sync = concord.Client(hosts, retry=retry, randomize_hosts=False)
            self.core = self.sync.aio
            self.sync._calls._endpoint = lambda: None  # type: ignore[method-assign,assignment,return-value]

    def scripted(self, failures: list[FakeRpcError]) -> tuple[Any, list[int]]:
        """A method that fails with ``failures`` in turn, then answers; and its call count."""
        calls = [0]

        def answer(_request: Any) -> FakeResponse:
            calls[0] += 1
            if calls[0] <= len(failures):
                raise failures[calls[0] - 1]
            return FakeResponse()

        if self.driver == "aio":

            async def send(request: Any) -> FakeResponse:
                return answer(request)

            return (lambda _ep: send), calls
        return (lambda _ep: lambda request, timeout=None: answer(request)), calls

    def call(self, method: Any, *, write: bool, dedup: bool = False, limit: float | None = None) -> Any:
        if self.sync is None:
            return asyncio.run(self.core._call(method, None, write=write, dedup=dedup, limit=limit))
        return self.sync._calls.run(self.core._unary(method, None, write=write, dedup=dedup, limit=limit))

    def close(self) -> None:
        if self.sync is not None:
            self.sync.close()


@pytest.mark.parametrize("driver", ["aio", "blocking"])
def test_retry_safe_failures_are_retried_and_others_are_not(driver: str) -> None:
    d = _Driver(driver)
    try:
        lost = FakeRpcError(S.UNAVAILABLE, "Socket closed")
        method, calls = d.scripted([lost, lost])
        d.call(method, write=False)  # a read: retried
        assert calls[0] == 3 and d.core.last_zxid == 42

        method, calls = d.scripted([lost])
        with pytest.raises(concord.ConnectionLossError):
            d.call(method, write=True)  # outcome unknown: not retried
        assert calls[0] == 1

        method, calls = d.scripted([lost])
        d.call(method, write=True, dedup=True)  # deduplicated: retried
        assert calls[0] == 2

        not_leader = FakeRpcError(S.UNAVAILABLE, "NOT_LEADER: x", "NOT_LEADER")
        method, calls = d.scripted([not_leader])
        d.call(method, write=True)  # the server did nothing: retried
        assert calls[0] == 2

        method, calls = d.scripted([FakeRpcError(S.NOT_FOUND, "NO_NODE: /a", "NO_NODE")])
        with pytest.raises(concord.NoNodeError):
            d.call(method, write=False)
        assert calls[0] == 1

        method, calls = d.scripted([lost] * 10)
        with pytest.raises(concord.ConnectionLossError):
            d.call(method, write=False)
        assert calls[0] == 6  # the first attempt and max_tries retries

        d.core.retry = None
        method, calls = d.scripted([lost])
        with pytest.raises(concord.ConnectionLossError):
            d.call(method, write=False)  # no policy: sent once
        assert calls[0] == 1
    finally:
        d.close()


def test_the_blocking_driver_fails_as_the_aio_core_does() -> None:
    """The sync client's attempts map a missed deadline to the aio core's TimeoutError
    (indeterminate for a write) and move to the next host after it, and follow a
    NOT_LEADER hint to the host it names, through the core's bookkeeping."""
    d = _Driver("blocking", hosts="127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
    try:
        d.core.retry = None
        late = FakeRpcError(S.DEADLINE_EXCEEDED, "Deadline Exceeded")
        method, _ = d.scripted([late])
        with pytest.raises(concord.TimeoutError) as e:
            d.call(method, write=True, limit=0.25)
        assert e.value.indeterminate and "deadline of 250 ms" in e.value.message
        assert d.core._current == 1  # a stalled server: the next host next time

        hint = FakeRpcError(S.UNAVAILABLE, "NOT_LEADER: ask the leader", "NOT_LEADER")
        hint._md += (("concord-leader-addr", "127.0.0.1:3"),)
        method, _ = d.scripted([hint])
        with pytest.raises(concord.ConcordError) as e2:
            d.call(method, write=True)
        assert e2.value.code is ErrorCode.NOT_LEADER and d.core._current == 2
    finally:
        d.close()


def test_hosts_lists_parse_as_kazoo_connection_strings() -> None:
    from concord.aio.client import parse_hosts

    assert parse_hosts("127.0.0.1:7181, http://h:1,[::1]:5,x,") == [
        "127.0.0.1:7181",
        "h:1",
        "[::1]:5",
        "x:7181",
    ]
    with pytest.raises(ValueError):
        parse_hosts(" , ")


def test_reads_ask_for_at_least_the_newest_zxid_seen() -> None:
    from concord._proto import tree_pb2

    class FakeTree:
        def __init__(self) -> None:
            self.requests: list[Any] = []

        async def Get(self, req: Any) -> Any:  # noqa: N802 - the stub's name
            self.requests.append(req)
            return tree_pb2.GetResponse(header={"zxid": 7}, data=b"d")

        async def Set(self, req: Any) -> Any:  # noqa: N802
            self.requests.append(req)
            return tree_pb2.SetResponse(header={"zxid": 90})

    class FakeEndpoint:
        tree = FakeTree()

    async def main() -> None:
        c = concord.aio.Client("127.0.0.1:1")
        ep = FakeEndpoint()
        c._endpoint = lambda: ep  # type: ignore[method-assign,assignment,return-value]
        await c.get("/a")
        assert ep.tree.requests[-1].min_zxid == 0 and c.last_zxid == 7
        await c.get("/a", linearizable=True)
        assert ep.tree.requests[-1].min_zxid == 7 and ep.tree.requests[-1].linearizable
        await c.set("/a", b"x")
        assert c.last_zxid == 90
        await c.get("/a")  # an older answer does not move the record back
        assert ep.tree.requests[-1].min_zxid == 90 and c.last_zxid == 90

    asyncio.run(main())


def test_keep_alive_timing_follows_the_ttl_and_the_share() -> None:
    from concord.aio._session import Timing

    t = Timing.of(3000, 0.5)
    # LOST only after twice the TTL without an answer, unless a server says so.
    assert (t.ping, t.suspend_after, t.give_up_after) == (1.0, 1.5, 6.0)
    assert (t.stream_silence_max, t.first_answer_max) == (1.5, 0.25)
    assert Timing.of(0, 0.5).first_answer_max == 0.02 and Timing.of(0, 0.5).ping == 0.01
    assert Timing.of(3000, 7.0).suspend_after == 3.0
    assert Timing.of(3000, float("nan")).suspend_after == 1.5
    # The give-up share: 1 to 10 (never before the server could expire the session).
    assert Timing.of(3000, 0.5, 3.0).give_up_after == 9.0
    assert Timing.of(3000, 0.5, 0.2).give_up_after == 3.0
    assert Timing.of(3000, 0.5, 99.0).give_up_after == 30.0
    assert Timing.of(3000, 0.5, float("inf")).give_up_after == 6.0


def test_a_watch_timeout_names_the_time_asked_for_not_what_was_left() -> None:
    """``next(timeout)`` waits on past messages that are no events (progress), for
    what is left of the time; its TIMEOUT names the time the caller asked for (it
    named what was left: "no watch event within 0.19... s")."""
    from concord._proto import watch_pb2

    async def main() -> None:
        c = concord.aio.Client("127.0.0.1:1")
        w = c.watch("/a")
        # As if started: a reader that reads nothing; one progress message comes.
        w._task = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        progress = watch_pb2.WatchResponse(progress=watch_pb2.Progress())
        asyncio.get_running_loop().call_later(0.1, w._queue.put_nowait, progress)
        try:
            with pytest.raises(concord.TimeoutError) as e:
                await w.next(timeout=0.3)
            assert e.value.code is ErrorCode.TIMEOUT
            assert "no watch event within 0.3 s" in str(e.value), str(e.value)
        finally:
            w._task.cancel()
            await c.close()

    asyncio.run(main())

