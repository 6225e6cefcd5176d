"""A rolling restart of a 3-server ensemble under a writer that never pauses, done as
docs/operations.md says ("Rolling upgrade", by hand): each server in turn gets
SIGTERM, exits 0, starts again on its data folder and ports, and the next goes only
once it is ready. The writer (the sync client, every server given, the default
retry policy) makes persistent sequential creates, sets, and creates and deletes of
a node of its own, one after the other.

Checked: no error reaches the writer (every write carries the session and a request
id, so one whose outcome a restart lost is retried and answered with its first
outcome), and no write is applied twice: the sequential children are exactly the
creates acknowledged, the set node's version is the sets acknowledged, and no
created-then-deleted node is left (a create applied twice fails NODE_EXISTS, a
delete applied twice NO_NODE).

::

    writer ──create /roll/seq/n- ─ set /roll/counter ─ create+delete /roll/d-N──▶ SDK
    roller: for i in 3, 2, 1: SIGTERM i ─▶ exit 0 ─▶ start i ─▶ ready(i) ─▶ writes go on
"""

from __future__ import annotations

import signal
import threading
import time

import concord
from concord import State

from test_t50_ensemble import SIZE, Ensemble, _status

#: Longest a restarted server may take to be ready again, or to see writes after.
READY_WAIT_S = 20.0
#: Writes acknowledged after each restart before the next one.
PROGRESS_WRITES = 10


class Writer:
    """Persistent creates, sets and deletes without a pause, on its own thread."""

    def __init__(self, c: concord.Client) -> None:
        self.c = c
        self.creates = 0
        self.sets = 0
        self.deleted = 0
        self.acked = 0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                i += 1
                self.c.create("/roll/seq/n-", b"%d" % i, sequence=True)
                self.creates += 1
                self.c.set("/roll/counter", b"%d" % i)
                self.sets += 1
                self.c.create(f"/roll/d-{i}", b"x")
                self.c.delete(f"/roll/d-{i}")
                self.deleted += 1
                self.acked += 4
        except BaseException as err:  # every failure that reaches the writer
            self.errors.append(err)

    def wait_for(self, writes: int, what: str) -> None:
        deadline = time.monotonic() + READY_WAIT_S
        while self.acked < writes:
            assert not self.errors, f"{what}: the writer failed: {self.errors!r}"
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
    c = None
    writer = None
    try:
        ensemble.leader(list(range(SIZE)))
        c = concord.Client(
            ",".join(s.addr for s in ensemble.servers), session_timeout=5.0, call_timeout=2.0
        )
        states: list[State] = []
        c.add_listener(states.append)
        c.start()
        session = c.session_id
        c.ensure_path("/roll/seq")
        c.create("/roll/counter")
        writer = Writer(c)
        writer.thread.start()
        writer.wait_for(PROGRESS_WRITES, "before the roll")
        for i in reversed(range(SIZE)):  # highest id first, as a StatefulSet rolls
            _restart(ensemble, i)
            writer.wait_for(writer.acked + PROGRESS_WRITES, f"after restarting server {i + 1}")
        writer.stop.set()
        writer.thread.join(timeout=30)
        assert not writer.thread.is_alive()
        assert not writer.errors, f"errors reached the writer: {writer.errors!r}"

        seq = c.get_children("/roll/seq", linearizable=True)
        assert len(seq) == writer.creates, f"{len(seq)} sequential nodes for {writer.creates} creates"
        data, stat = c.get("/roll/counter", linearizable=True)
        assert stat.version == writer.sets and data == b"%d" % writer.sets
        assert sorted(c.get_children("/roll")) == ["counter", "seq"]
        assert c.session_id == session and State.LOST not in states
    finally:
        if writer is not None:
            writer.stop.set()
            writer.thread.join(timeout=30)
        if c is not None:
            c.close()
        ensemble.kill()
