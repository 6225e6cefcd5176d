"""A rolling restart of a 3-server ensemble under a writer that never pauses, done as
docs/operations.md says ("Rolling upgrade", by hand): each server in turn gets
SIGTERM, exits 0, starts again on its data folder and ports, and the next goes only
once it is ready. Two writers (the sync client's and the asyncio client's, every
server given, the default retry policy) make persistent sequential creates, sets,
creates and deletes of a node of their own, and transactions with a sequential
create, one after the other.

Checked: no error reaches a writer (every write carries the session and a request
id, so one whose outcome a restart lost is retried and answered with its first
outcome), no session is lost, and no write is applied twice: the sequential
children are exactly the creates acknowledged, the set node's version is the sets
acknowledged (a transaction's check of it passes each round), and no
created-then-deleted node is left (a create applied twice fails NODE_EXISTS, a
delete applied twice NO_NODE).

::

    writers ──create seq/n- ─ set counter ─ create+delete d-N ─ multi(seq/t-, check)──▶ SDK
    roller: for i in 3, 2, 1: SIGTERM i ─▶ exit 0 ─▶ start i ─▶ ready(i) ─▶ writes go on
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any

import concord
import concord.aio
from concord import State

from conftest import SyncAdapter
from test_t50_ensemble import SIZE, Ensemble, _status

#: Longest a restarted server may take to be ready again, or to see writes after.
READY_WAIT_S = 20.0
#: Writes acknowledged after each restart before the next one.
PROGRESS_WRITES = 10


class Writer:
    """Two writers without a pause, the sync client's and the asyncio client's, each
    in a subtree of its own, on one event loop of their own thread (the sync client's
    calls through ``SyncAdapter``, on worker threads)."""

    def __init__(self, hosts: str) -> None:
        self.hosts = hosts
        #: Per writer ("sync", "aio"): creates acknowledged (sequential nodes made,
        #: one by a create and one by a transaction each round) and sets.
        self.creates = {"sync": 0, "aio": 0}
        self.sets = {"sync": 0, "aio": 0}
        self.acked = 0
        #: Each writer's session id at the start, and the states its client saw.
        self.sessions: dict[str, int] = {}
        self.states: list[State] = []
        self.errors: list[BaseException] = []
        self.started = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        kw: dict[str, Any] = {"session_timeout": 5.0, "call_timeout": 2.0}
        try:
            async with concord.aio.Client(self.hosts, **kw) as a:
                with concord.Client(self.hosts, **kw) as s:
                    clients = {"aio": a, "sync": SyncAdapter(s)}
                    for kind, c in clients.items():
                        c.add_listener(self.states.append)
                        self.sessions[kind] = c.session_id
                        await c.ensure_path(f"/roll/{kind}/seq")
                        await c.create(f"/roll/{kind}/counter")
                    self.started.set()
                    await asyncio.gather(*(self._write(k, c) for k, c in clients.items()))
        except BaseException as err:  # every failure that reaches a writer
            self.errors.append(err)

    async def _write(self, kind: str, c: Any) -> None:
        base = f"/roll/{kind}"
        i = 0
        while not self.stop.is_set():
            i += 1
            await c.create(f"{base}/seq/n-", b"%d" % i, sequence=True)
            await c.set(f"{base}/counter", b"%d" % i)
            self.sets[kind] += 1
            await c.create(f"{base}/d-{i}", b"x")
            await c.delete(f"{base}/d-{i}")
            t = c.transaction()
            t.create(f"{base}/seq/t-", b"%d" % i, sequence=True)
            t.check(f"{base}/counter", i)
            failed = [r for r in await t.commit() if isinstance(r, concord.ConcordError)]
            assert not failed, f"{kind}: the transaction failed: {failed!r}"
            self.creates[kind] += 2
            self.acked += 5

    def wait_for(self, writes: int, what: str) -> None:
        deadline = time.monotonic() + READY_WAIT_S
        while self.acked < writes:
            assert not self.errors, f"{what}: a writer failed: {self.errors!r}"
            assert time.monotonic() < deadline, f"{what}: writes stalled at {self.acked}"
            time.sleep(0.02)


def _ready(ensemble: Ensemble, i: int) -> bool:
    """Ready as docs/operations.md's roll asks: the server knows a leader, that leader
    serves, and the server has applied the leader's commit point."""
    status = _status(ensemble.servers[i].addr)
    if status is None or status.leader_id == 0:
        return False
    leader = _status(ensemble.servers[status.leader_id - 1].addr)
    return bool(leader and leader.leader_serving and status.zxid >= leader.commit_zxid)


def _restart(ensemble: Ensemble, i: int) -> None:
    server = ensemble.servers[i]
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=10) == 0, server.log()
    server.restart()  # the same address and data folder
    deadline = time.monotonic() + READY_WAIT_S
    while not _ready(ensemble, i):
        assert time.monotonic() < deadline, f"server {i + 1} not ready:\n{server.log()}"
        time.sleep(0.05)


def test_a_rolling_restart_loses_no_write_and_applies_none_twice() -> None:
    ensemble = Ensemble()
    writer = None
    try:
        ensemble.leader(list(range(SIZE)))
        writer = Writer(",".join(s.addr for s in ensemble.servers))
        writer.thread.start()
        assert writer.started.wait(READY_WAIT_S), f"the writers did not start: {writer.errors!r}"
        writer.wait_for(PROGRESS_WRITES, "before the roll")
        for i in reversed(range(SIZE)):  # highest id first, as a StatefulSet rolls
            _restart(ensemble, i)
            writer.wait_for(writer.acked + PROGRESS_WRITES, f"after restarting server {i + 1}")
        writer.stop.set()
        writer.thread.join(timeout=30)
        assert not writer.thread.is_alive()
        assert not writer.errors, f"errors reached a writer: {writer.errors!r}"
        assert State.LOST not in writer.states

        with concord.Client(ensemble.servers[0].addr) as c:
            for kind in ("sync", "aio"):
                base = f"/roll/{kind}"
                seq = c.get_children(f"{base}/seq", linearizable=True)
                assert len(seq) == writer.creates[kind], (
                    f"{kind}: {len(seq)} sequential nodes for {writer.creates[kind]} creates"
                )
                data, stat = c.get(f"{base}/counter", linearizable=True)
                assert stat.version == writer.sets[kind] and data == b"%d" % writer.sets[kind]
                assert sorted(c.get_children(base)) == ["counter", "seq"], kind
    finally:
        if writer is not None:
            writer.stop.set()
            writer.thread.join(timeout=30)
        ensemble.kill()
