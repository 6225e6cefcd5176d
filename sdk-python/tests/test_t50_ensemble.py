"""A 3-server ensemble on 127.0.0.1 whose leader is killed: a client with the three
hosts and a retry policy goes on reading and writing, and its session lives on."""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import grpc
import pytest

import concord
from concord import State
from concord._proto import cluster_pb2, cluster_pb2_grpc

from conftest import Server, free_port

SIZE = 3


class OneWayProxy:
    """A TCP proxy for one peer link, server i dialling server j (as tests/src/proxy.rs):
    while ``cut`` is set, what i sends is read and dropped (the connection stays open,
    as in a one-way partition); what j sends back passes."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self.cut = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = [self._listener]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                up = socket.create_connection(self._target, timeout=5)
            except OSError:
                conn.close()  # the server is down: the dialler tries again
                continue
            up.settimeout(None)
            with self._lock:
                self._sockets += [conn, up]
            threading.Thread(target=self._pump, args=(conn, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, conn, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_dialler: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (from_dialler and self.cut.is_set()):
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            for s in self._sockets:
                s.close()


class Ensemble:
    """SIZE voters, each with a config naming every member (as tests/src/ensemble.rs);
    with ``proxied``, server i reaches server j's peer address through
    ``proxies[(i, j)]`` (its member list names the proxy), so a test can cut one
    direction of a link. With ``zookeeper``, each also serves ZooKeeper's protocol."""

    def __init__(self, proxied: bool = False, zookeeper: bool = False) -> None:
        addrs = [(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}") for _ in range(SIZE)]
        self.proxies: dict[tuple[int, int], OneWayProxy] = {}
        self.servers: list[Server] = []
        try:
            if proxied:
                for i in range(SIZE):
                    for j, (_, peer) in enumerate(addrs):
                        if i != j:
                            self.proxies[(i, j)] = OneWayProxy(peer)
            for i, (client, peer) in enumerate(addrs):
                members = "".join(
                    f'[[members]]\nid = {j + 1}\nclient_addr = "{c}"\n'
                    f'peer_addr = "{self.proxies[(i, j)].addr if (i, j) in self.proxies else p}"\n'
                    'role = "voter"\n'
                    for j, (c, p) in enumerate(addrs)
                )
                config = (
                    f'server_id = {i + 1}\nclient_addr = "{client}"\npeer_addr = "{peer}"\n'
                    f"cluster_id = 7\n{members}"
                )
                self.servers.append(Server(config=config, listen=client, zookeeper=zookeeper))
        except BaseException:
            self.kill()
            raise

    def leader(self, among: list[int], timeout_s: float = 20.0) -> int:
        """The index of the serving leader among ``among``; fails after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in among:
                status = _status(self.servers[i].addr)
                if status and status.leader_serving and status.leader_id == status.server_id:
                    return i
            time.sleep(0.05)
        raise AssertionError(f"no serving leader among {among} within {timeout_s} s")

    def kill(self) -> None:
        for s in self.servers:
            s.kill()
        for p in self.proxies.values():
            p.close()


def _status(addr: str) -> cluster_pb2.StatusResponse | None:
    try:
        with grpc.insecure_channel(addr) as ch:
            return cluster_pb2_grpc.ClusterStub(ch).Status(cluster_pb2.StatusRequest(), timeout=1)
    except grpc.RpcError:
        return None


@pytest.fixture
def ensemble() -> Iterator[Ensemble]:
    e = Ensemble()
    try:
        yield e
    finally:
        e.kill()


def test_the_leader_killed_the_client_goes_on_with_its_session(ensemble: Ensemble) -> None:
    leader = ensemble.leader(list(range(SIZE)))
    states: list[State] = []
    lock = threading.Lock()

    def listener(state: State) -> None:
        with lock:
            states.append(state)

    # The leader first: calls and keep-alives go to it until it dies.
    order = [leader] + [i for i in range(SIZE) if i != leader]
    c = concord.Client(
        ",".join(ensemble.servers[i].addr for i in order),
        session_timeout=5.0,
        call_timeout=2.0,
        retry=concord.Retry(deadline=20.0, max_delay=0.5),
        randomize_hosts=False,
    )
    c.add_listener(listener)
    try:
        c.start()
        first = c.session_id
        eph = c.create("/eph", b"mine", ephemeral=True)
        c.create("/p", b"1")

        ensemble.servers[leader].kill()
        rest = [i for i in range(SIZE) if i != leader]
        # Reads, and writes the server deduplicates, are retried across the election.
        assert c.get("/p")[0] == b"1"
        after = c.create("/after", b"2", ephemeral=True)
        assert ensemble.leader(rest) in rest

        assert c.session_id == first and c.state is not State.LOST
        for path in (eph, after):
            stat = c.exists(path, linearizable=True)
            assert stat is not None and stat.ephemeral_owner == first
        c.stop()
        assert c.exists(eph, linearizable=True) is None
    finally:
        c.close()
    with lock:
        assert State.LOST not in states
