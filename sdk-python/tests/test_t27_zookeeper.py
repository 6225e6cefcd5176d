"""The ZooKeeper-protocol port (docs/zookeeper.md), as ZooKeeper's own clients see it:
kazoo 2.11 for what it can say, and raw jute frames for what it cannot (container and
TTL creates, bad frames, setWatches with a chosen zxid). Each expectation is what a
ZooKeeper 3.9 server answers. The mixed cases run kazoo and the Concord SDK on one
server: one tree, one set of sessions, one stream of events.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from typing import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    InvalidACLError,
    NodeExistsError,
    NoChildrenForEphemeralsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import EventType, KazooState
from kazoo.security import make_digest_acl, READ_ACL_UNSAFE

import concord
from conftest import Server

WAIT_S = 10.0


@pytest.fixture(scope="module")
def zk_server() -> Iterator[Server]:
    s = Server(zookeeper=True)
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture
def kz(zk_server: Server) -> Iterator[KazooClient]:
    c = KazooClient(hosts=zk_server.zookeeper_addr, timeout=5)
    c.start(timeout=WAIT_S)
    try:
        yield c
    finally:
        c.stop()
        c.close()


@pytest.fixture
def base(kz: KazooClient) -> str:
    path = f"/zk-{uuid.uuid4().hex[:12]}"
    kz.create(path)
    return path


def wait_for(what: str, check, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


# -- a raw jute client, for what kazoo cannot send ------------------------------------


class Raw:
    """One connection speaking ZooKeeper's protocol frame by frame."""

    def __init__(self, addr: str, session_id: int = 0, passwd: bytes = b"\0" * 16) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        body = struct.pack(">iqiq", 0, 0, 10_000, session_id) + buf(passwd) + b"\0"
        self.send_frame(body)
        r = Reader(self.read_frame())
        self.protocol, self.timeout_ms, self.session_id = r.i32(), r.i32(), r.i64()
        self.passwd = r.buffer()
        self.xid = 0
        self.notifications: list[tuple[int, str]] = []

    def send_frame(self, body: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def read_frame(self) -> bytes:
        n = struct.unpack(">i", self.recv(4))[0]
        return self.recv(n)

    def recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def call(self, op: int, body: bytes, xid: int | None = None) -> tuple[int, int, "Reader"]:
        """Sends one request; returns (err, zxid, reader of the body), keeping the
        notifications that came first."""
        if xid is None:
            self.xid += 1
            xid = self.xid
        self.send_frame(struct.pack(">ii", xid, op) + body)
        while True:
            r = Reader(self.read_frame())
            rxid, zxid, err = r.i32(), r.i64(), r.i32()
            if rxid == -1:
                event_type, _state, path = r.i32(), r.i32(), r.string()
                self.notifications.append((event_type, path))
                continue
            assert rxid == xid, (rxid, xid)
            return err, zxid, r

    def close(self) -> None:
        self.sock.close()


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def buffer(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self.take(n)

    def string(self) -> str:
        return self.buffer().decode()


def buf(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def string(s: str) -> bytes:
    return buf(s.encode())


OPEN_ACL = struct.pack(">i", 1) + struct.pack(">i", 31) + string("world") + string("anyone")
CREATE2, CREATE_CONTAINER, CREATE_TTL, GET_DATA, MULTI, SET_WATCHES, ADD_WATCH = 15, 19, 21, 4, 14, 101, 106


# -- reads and writes ------------------------------------------------------------------


def test_errors_are_zookeepers(kz: KazooClient, base: str) -> None:
    kz.create(f"{base}/a", b"1")
    with pytest.raises(NodeExistsError):
        kz.create(f"{base}/a")
    with pytest.raises(NoNodeError):
        kz.get(f"{base}/missing")
    with pytest.raises(NoNodeError):
        kz.create(f"{base}/missing/child")
    with pytest.raises(BadVersionError):
        kz.set(f"{base}/a", b"2", version=7)
    kz.create(f"{base}/a/b")
    with pytest.raises(NotEmptyError):
        kz.delete(f"{base}/a")
    kz.create(f"{base}/e", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        kz.create(f"{base}/e/c")
    # Nothing was changed by the refusals.
    data, stat = kz.get(f"{base}/a")
    assert (data, stat.version, stat.numChildren) == (b"1", 0, 1)


def test_node_kinds_and_stat(kz: KazooClient, base: str) -> None:
    path = kz.create(f"{base}/s-", b"x", sequence=True)
    assert path == f"{base}/s-0000000000"
    path = kz.create(f"{base}/s-", sequence=True, ephemeral=True)
    assert path == f"{base}/s-0000000001"
    _, stat = kz.get(path)
    assert stat.ephemeralOwner == kz.client_id[0]
    created, stat = kz.create(f"{base}/c2", b"abc", include_data=True)
    assert created == f"{base}/c2" and stat.dataLength == 3 and stat.version == 0
    _, parent = kz.get(base)
    assert parent.numChildren == 3 and parent.cversion == 3


def test_null_data_is_kept_apart_from_empty(zk_server: Server, kz: KazooClient, base: str) -> None:
    """ZooKeeper keeps null data (Java's create(path, null, ...), kazoo's None) apart
    from empty data; gRPC, which has no null bytes, reads it as empty."""
    kz.create(f"{base}/null", None)
    kz.create(f"{base}/empty", b"")
    assert kz.get(f"{base}/null")[0] is None
    assert kz.get(f"{base}/empty")[0] == b""
    kz.set(f"{base}/empty", None)
    assert kz.get(f"{base}/empty")[0] is None
    kz.set(f"{base}/null", b"x")
    assert kz.get(f"{base}/null")[0] == b"x"
    # A multi's create with null data, in frames (kazoo's transactions take bytes only).
    raw = Raw(zk_server.zookeeper_addr)
    try:
        header = struct.pack(">i?i", 1, False, -1)
        create = string(f"{base}/multi") + struct.pack(">i", -1) + OPEN_ACL + struct.pack(">i", 0)
        end = struct.pack(">i?i", -1, True, -1)
        assert raw.call(MULTI, header + create + end)[0] == 0
    finally:
        raw.close()
    assert kz.get(f"{base}/multi")[0] is None
    with concord.Client(zk_server.addr) as client:
        data, stat = client.get(f"{base}/multi")
        assert data == b"" and stat.data_length == 0
        client.set(f"{base}/multi", b"g")
    assert kz.get(f"{base}/multi")[0] == b"g"


def test_get_config_names_the_ensemble_with_its_zookeeper_ports(zk_server: Server, kz: KazooClient) -> None:
    """getConfig is a getData of /zookeeper/config, in ZooKeeper's dynamic config
    form; Cluster/Members names the same ZooKeeper address."""
    data, stat = kz.get("/zookeeper/config", watch=lambda e: None)
    lines = data.decode().split("\n")
    assert len(lines) == 2 and lines[1] == "version=0", lines
    server, client = lines[0].split(";")
    name, peer_host, quorum_port, election_port, role = server.replace("=", ":").split(":")
    assert (name, peer_host, role) == ("server.1", "127.0.0.1", "participant")
    assert quorum_port == election_port and client == zk_server.zookeeper_addr
    assert stat.dataLength == len(data)
    with concord.Client(zk_server.addr) as c:
        assert c.members().members[0].zookeeper_addr == zk_server.zookeeper_addr


def test_get_children_answers_every_child_at_once(kz: KazooClient, base: str) -> None:
    """The gRPC listing pages at 1,000; ZooKeeper's getChildren does not."""
    for start in (0, 750):  # a multi holds at most 1,024 ops
        t = kz.transaction()
        for i in range(start, start + 750):
            t.create(f"{base}/n{i:05}")
        assert all(isinstance(r, str) for r in t.commit())
    children = kz.get_children(base)
    assert len(children) == 1_500 and sorted(children)[0] == "n00000"
    _, stat = kz.get(base)
    assert stat.numChildren == 1_500


def test_a_failed_transaction_changes_nothing_and_names_its_op(kz: KazooClient, base: str) -> None:
    t = kz.transaction()
    t.create(f"{base}/t1")
    t.check(base, 5)
    t.create(f"{base}/t2")
    results = t.commit()
    assert [type(r) for r in results] == [RolledBackError, BadVersionError, RuntimeInconsistency]
    assert kz.exists(f"{base}/t1") is None
    t = kz.transaction()
    t.create(f"{base}/t1", b"v")
    t.set_data(f"{base}/t1", b"w")
    t.delete(f"{base}/t1")
    t.check(base, 0)
    assert t.commit()[0] == f"{base}/t1"


def test_acls_other_than_open_and_auth_are_refused(zk_server: Server, kz: KazooClient, base: str) -> None:
    with pytest.raises(InvalidACLError):
        kz.create(f"{base}/r", acl=READ_ACL_UNSAFE)
    with pytest.raises(InvalidACLError):
        kz.create(f"{base}/d", acl=[make_digest_acl("u", "p", all=True)])
    assert kz.exists(f"{base}/r") is None
    # In a transaction, the op with the ACL is the one that fails.
    t = kz.transaction()
    t.create(f"{base}/ok")
    t.create(f"{base}/bad", acl=READ_ACL_UNSAFE)
    t.create(f"{base}/after")
    assert [type(r) for r in t.commit()] == [RolledBackError, InvalidACLError, RuntimeInconsistency]
    assert kz.exists(f"{base}/ok") is None
    acl, _ = kz.get_acls(base)
    assert [(a.perms, a.id.scheme, a.id.id) for a in acl] == [(31, "world", "anyone")]
    other = KazooClient(hosts=zk_server.zookeeper_addr, timeout=5)
    other.start(timeout=WAIT_S)
    try:
        with pytest.raises(AuthFailedError):
            other.add_auth("digest", "u:p")
    finally:
        other.stop()
        other.close()


def test_a_client_refused_at_connect_sees_auth_failed(zk_server: Server) -> None:
    """kazoo's start() wakes on CONNECTED, then reads whether the client is still
    connected; a refusal of its auth that has already cleared that flag makes it raise
    a connection time-out instead of AuthFailedError (kazoo 2.11: its suite's
    test_invalid_sasl_auth failed so). The server answers an auth after a wait, as
    ZooKeeper's SASL challenge round does; threads keeping this process's GIL busy make
    the race as likely as in a loaded test run (5 to 45% of starts were lost without
    the wait)."""
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    outcomes = []
    try:
        for _ in range(20):
            # A chroot, as kazoo's tests have: start() then checks it, and that call
            # is what raises AuthFailedError.
            c = KazooClient(
                hosts=f"{zk_server.zookeeper_addr}/refused",
                timeout=5,
                auth_data=[("digest", "u:p")],
            )
            try:
                c.start(timeout=WAIT_S)
                outcomes.append("started")
            except Exception as e:  # the outcome's kind is what is checked
                outcomes.append(type(e).__name__)
            finally:
                c.stop()
                c.close()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=WAIT_S)
    assert outcomes == ["AuthFailedError"] * 20


def test_container_and_ttl_creates(zk_server: Server, kz: KazooClient, base: str) -> None:
    raw = Raw(zk_server.zookeeper_addr)
    try:
        body = string(f"{base}/box") + buf(b"") + OPEN_ACL + struct.pack(">i", 4)
        err, _, r = raw.call(CREATE_CONTAINER, body)
        assert err == 0 and r.string() == f"{base}/box"
        # A container by create2 is refused, as ZooKeeper does.
        err, _, _ = raw.call(CREATE2, string(f"{base}/box2") + buf(b"") + OPEN_ACL + struct.pack(">i", 4))
        assert err == -8
        body = string(f"{base}/ttl") + buf(b"t") + OPEN_ACL + struct.pack(">iq", 5, 60_000)
        err, _, r = raw.call(CREATE_TTL, body)
        assert err == 0 and r.string() == f"{base}/ttl"
        # A TTL mode needs a TTL.
        body = string(f"{base}/ttl0") + buf(b"t") + OPEN_ACL + struct.pack(">iq", 5, 0)
        assert raw.call(CREATE_TTL, body)[0] == -8
    finally:
        raw.close()
    kz.create(f"{base}/box/child")
    kz.delete(f"{base}/box/child")
    wait_for("the empty container to be reaped", lambda: kz.exists(f"{base}/box") is None)


# -- watches -----------------------------------------------------------------------------


def test_one_shot_watches_fire_once_as_zookeepers(kz: KazooClient, base: str) -> None:
    events: list = []
    got = threading.Event()

    def watch(e) -> None:
        events.append((e.type, e.path))
        got.set()

    kz.exists(f"{base}/w", watch=watch)
    kz.create(f"{base}/w", b"1")
    assert got.wait(WAIT_S)
    got.clear()
    kz.get(f"{base}/w", watch=watch)
    kz.get_children(f"{base}/w", watch=watch)
    kz.set(f"{base}/w", b"2")
    kz.set(f"{base}/w", b"3")  # the data watch is used up
    assert got.wait(WAIT_S)
    got.clear()
    kz.delete(f"{base}/w")  # the child watch fires NodeDeleted
    assert got.wait(WAIT_S)
    kz.create(f"{base}/after")  # no watch left on base
    kz.sync(base)
    assert events == [
        (EventType.CREATED, f"{base}/w"),
        (EventType.CHANGED, f"{base}/w"),
        (EventType.DELETED, f"{base}/w"),
    ]


def test_a_watch_event_comes_before_data_that_reflects_it(kz: KazooClient, zk_server: Server, base: str) -> None:
    other = KazooClient(hosts=zk_server.zookeeper_addr, timeout=5)
    other.start(timeout=WAIT_S)
    order: list[str] = []
    try:
        kz.get(f"{base}", watch=lambda e: order.append("event"))
        other.set(base, b"new")
        # The reply to this read reflects the change: the event is delivered first.
        data, _ = kz.get(base)
        order.append(f"read {data!r}")
        wait_for("the event", lambda: "event" in order)
        assert order[0] == "event", order
    finally:
        other.stop()
        other.close()


def test_persistent_recursive_watch(zk_server: Server, kz: KazooClient, base: str) -> None:
    """addWatch (kazoo 2.11 cannot send it): every create, change and delete below,
    never NodeChildrenChanged, never used up; each before a reply that reflects it."""
    raw = Raw(zk_server.zookeeper_addr)
    try:
        err, _, body = raw.call(ADD_WATCH, string(base) + struct.pack(">i", 1))
        # ZooKeeper's answer carries an ErrorResponse(0), which Java clients read.
        assert err == 0 and body.i32() == 0 and body.pos == len(body.data)
        kz.create(f"{base}/a")
        kz.create(f"{base}/a/b", b"x")
        kz.set(f"{base}/a/b", b"y")
        kz.delete(f"{base}/a/b")
        kz.create(f"{base}/ab")
        # This read reflects all of it, so every notification comes first.
        assert raw.call(GET_DATA, string(base) + b"\0")[0] == 0
        assert raw.notifications == [
            (1, f"{base}/a"),
            (1, f"{base}/a/b"),
            (3, f"{base}/a/b"),
            (2, f"{base}/a/b"),
            (1, f"{base}/ab"),
        ]
        # A mode that is not one.
        assert raw.call(ADD_WATCH, string(f"{base}/a") + struct.pack(">i", 7))[0] == -8
    finally:
        raw.close()


def test_set_watches_tells_what_changed_since_the_zxid(zk_server: Server, kz: KazooClient, base: str) -> None:
    kz.create(f"{base}/d", b"1")
    _, stat = kz.get(f"{base}/d")
    kz.set(f"{base}/d", b"2")
    raw = Raw(zk_server.zookeeper_addr)
    try:
        # As a client back from a disconnection that last saw the create.
        lists = [[f"{base}/d"], [f"{base}/gone-or-never"], [f"{base}/missing"]]
        body = struct.pack(">q", stat.mzxid)
        for paths in lists:
            body += struct.pack(">i", len(paths)) + b"".join(string(p) for p in paths)
        err, _, _ = raw.call(SET_WATCHES, body, xid=-8)
        assert err == 0
        assert raw.notifications == [(3, f"{base}/d"), (2, f"{base}/missing")]
        # The exist watch was registered: it fires on the create.
        kz.create(f"{base}/gone-or-never")
        err, _, _ = raw.call(GET_DATA, string(base) + b"\0")
        assert err == 0
        assert raw.notifications[-1] == (1, f"{base}/gone-or-never")
    finally:
        raw.close()


# -- sessions ----------------------------------------------------------------------------


def test_closing_a_session_deletes_its_ephemerals(zk_server: Server, kz: KazooClient, base: str) -> None:
    other = KazooClient(hosts=zk_server.zookeeper_addr, timeout=5)
    other.start(timeout=WAIT_S)
    other.create(f"{base}/eph", ephemeral=True)
    assert kz.exists(f"{base}/eph") is not None
    other.stop()
    other.close()
    assert kz.exists(f"{base}/eph") is None


def test_a_session_reattaches_with_its_password_only(zk_server: Server) -> None:
    first = Raw(zk_server.zookeeper_addr)
    try:
        again = Raw(zk_server.zookeeper_addr, first.session_id, first.passwd)
        assert again.session_id == first.session_id and again.timeout_ms > 0
        again.close()
        wrong = Raw(zk_server.zookeeper_addr, first.session_id, b"x" * 16)
        # Refused as ZooKeeper refuses it: an expired session (timeout 0, id 0).
        assert (wrong.session_id, wrong.timeout_ms) == (0, 0)
        wrong.close()
    finally:
        first.close()


def test_an_expired_session_is_lost(zk_server: Server, kz: KazooClient) -> None:
    states: list = []
    victim = KazooClient(hosts=zk_server.zookeeper_addr, timeout=5)
    victim.add_listener(states.append)
    victim.start(timeout=WAIT_S)
    try:
        session_id, passwd = victim.client_id
        # As kazoo's harness expires a session: another connection closes it.
        closer = Raw(zk_server.zookeeper_addr, session_id, passwd)
        closer.call(-11, b"")
        closer.close()
        wait_for("LOST", lambda: KazooState.LOST in states)
    finally:
        victim.stop()
        victim.close()


# -- bad input ---------------------------------------------------------------------------


def test_a_bad_frame_closes_only_its_connection(zk_server: Server, kz: KazooClient, base: str) -> None:
    for garbage in [struct.pack(">i", 1 << 30), struct.pack(">i", -5), struct.pack(">i", 3) + b"abc"]:
        s = socket.create_connection(zk_server.zookeeper_addr.rsplit(":", 1), timeout=WAIT_S)
        try:
            s.sendall(garbage)
            s.shutdown(socket.SHUT_WR)
            assert s.recv(100) == b""
        finally:
            s.close()
    raw = Raw(zk_server.zookeeper_addr)
    try:
        # An unknown opcode is answered UNIMPLEMENTED; a body that does not parse,
        # MARSHALLINGERROR; the connection goes on.
        assert raw.call(9999, b"")[0] == -6
        assert raw.call(GET_DATA, b"\0\0")[0] == -5
        assert raw.call(GET_DATA, string(base) + b"\0")[0] == 0
    finally:
        raw.close()
    assert kz.exists(base) is not None


# -- one tree, two doors -----------------------------------------------------------------


def test_kazoo_and_the_sdk_see_each_others_nodes_and_events(zk_server: Server, kz: KazooClient, base: str) -> None:
    with concord.Client(zk_server.addr) as client:
        # Status names the port ZooKeeper's clients use (concordctl status prints it).
        assert client.status().zookeeper_addr == zk_server.zookeeper_addr
        kz.create(f"{base}/from-zk", b"z")
        data, stat = client.get(f"{base}/from-zk")
        assert data == b"z" and stat.version == 0
        seen = threading.Event()
        kz.get_children(base, watch=lambda e: seen.set())
        client.create(f"{base}/from-sdk", b"s")
        assert seen.wait(WAIT_S)
        assert kz.get(f"{base}/from-sdk")[0] == b"s"
        with client.watch(f"{base}/from-zk") as w:
            kz.set(f"{base}/from-zk", b"z2")
            event = next(iter(w))
            assert event.path == f"{base}/from-zk"


# -- four-letter words and metrics -------------------------------------------------------


def four_letter(addr: str, word: str) -> str:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(word.encode())
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    return out.decode()


def test_four_letter_words_answer_behind_their_allow_list(zk_server: Server, kz: KazooClient) -> None:
    # By default srvr only, as ZooKeeper 3.5 and later.
    assert four_letter(zk_server.zookeeper_addr, "ruok") == (
        "ruok is not executed because it is not in the whitelist.\n"
    )
    srvr = four_letter(zk_server.zookeeper_addr, "srvr")
    assert srvr.startswith("Zookeeper version: 3.9.0-concord-") and "Mode: standalone\n" in srvr
    from conftest import free_port

    metrics = f"127.0.0.1:{free_port()}"
    s = Server(
        config='zookeeper_four_letter_words = ["*"]\n',
        zookeeper=True,
        extra=("--metrics-addr", metrics),
    )
    try:
        c = KazooClient(hosts=s.zookeeper_addr, timeout=5)
        c.start(timeout=WAIT_S)
        try:
            c.create("/w", b"x")
            c.get("/w", watch=lambda e: None)
            assert four_letter(s.zookeeper_addr, "ruok") == "imok"
            assert four_letter(s.zookeeper_addr, "isro") == "rw"
            mntr = dict(
                line.split("\t", 1) for line in four_letter(s.zookeeper_addr, "mntr").splitlines()
            )
            assert mntr["zk_server_state"] == "standalone"
            assert int(mntr["zk_znode_count"]) >= 2 and mntr["zk_watch_count"] == "1"
            assert f"sid=0x{c.client_id[0]:x}" in four_letter(s.zookeeper_addr, "cons")
            assert four_letter(s.zookeeper_addr, "wchs").startswith("1 connections watching 1 paths\n")
            import urllib.request

            text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=WAIT_S).read().decode()
            assert 'concord_zookeeper_requests_total{op="create",code="OK"} 1' in text
            assert "concord_zookeeper_sessions 1" in text
        finally:
            c.stop()
            c.close()
    finally:
        s.kill()
