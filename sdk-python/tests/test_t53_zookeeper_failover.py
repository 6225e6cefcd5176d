"""A kazoo client of the ZooKeeper port on a 3-server ensemble whose leader, the
server it is connected to, is killed with -9: it goes SUSPENDED, then CONNECTED to
another server with the same session (never LOST), its ephemeral node is still
there, its watch still fires, and it writes again."""

from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from test_t50_ensemble import SIZE, Ensemble

WAIT_S = 30.0


def wait_for(what: str, check, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_session_moves_to_another_server_when_its_server_dies() -> None:
    ensemble = Ensemble(zookeeper=True)
    try:
        leader = ensemble.leader(list(range(SIZE)))
        order = [leader] + [i for i in range(SIZE) if i != leader]
        hosts = ",".join(ensemble.servers[i].zookeeper_addr for i in order)
        states: list[KazooState] = []
        c = KazooClient(hosts=hosts, timeout=6, randomize_hosts=False)
        c.add_listener(states.append)
        c.start(timeout=WAIT_S)
        other = KazooClient(hosts=ensemble.servers[order[1]].zookeeper_addr, timeout=6)
        other.start(timeout=WAIT_S)
        try:
            session = c.client_id
            c.create("/eph", b"mine", ephemeral=True)
            c.create("/watched", b"0")
            fired = threading.Event()
            c.get("/watched", watch=lambda e: fired.set())
            ensemble.servers[leader].proc.kill()
            wait_for("SUSPENDED", lambda: KazooState.SUSPENDED in states)
            wait_for("CONNECTED again", lambda: states[-1] == KazooState.CONNECTED)
            assert KazooState.LOST not in states, states
            assert c.client_id == session
            # The watch set on the dead server was carried over (setWatches).
            other.set("/watched", b"1")
            assert fired.wait(WAIT_S)
            assert other.get("/eph")[0] == b"mine"
            assert other.get("/eph")[1].ephemeralOwner == session[0]
            c.set("/watched", b"2")
            assert other.get("/watched")[0] == b"2"
        finally:
            c.stop()
            c.close()
            other.stop()
            other.close()
    finally:
        ensemble.kill()
