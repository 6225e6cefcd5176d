"""The ZooKeeper port over TLS with client certificates (ZooKeeper's secureClientPort):
a certificate gives a kazoo client the same identity, team, namespace, grants and
quotas as on gRPC, and one team's ZooKeeper client can neither see nor touch another
team's nodes or sessions."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, QuotaExceededError

import concord
from concord import TLS

from conftest import Server, made_certs

SEEDED = "the grant table and team roots are seeded"

TEAMS = """
[[teams]]
name = "a"
root = "/teams/a"
identities = ["team-a"]
[teams.quota]
nodes_max = 3
[[teams]]
name = "b"
root = "/teams/b"
identities = ["team-b"]
"""


@pytest.fixture(scope="module")
def certs() -> Iterator[Path]:
    with made_certs("admin,team-a,team-b") as d:
        yield d


@pytest.fixture(scope="module")
def server(certs: Path) -> Iterator[Server]:
    flags = (
        "--cert-file", str(certs / "server-1.pem"),
        "--key-file", str(certs / "server-1-key.pem"),
        "--trusted-ca-file", str(certs / "ca.pem"),
    )
    s = Server(config=TEAMS, extra=flags, zookeeper=True)
    try:
        deadline = time.monotonic() + 20
        while SEEDED not in s.log():
            assert time.monotonic() < deadline, f"no seed in 20 s:\n{s.log()}"
            time.sleep(0.02)
        yield s
    finally:
        s.kill()


def kazoo_as(server: Server, certs: Path, who: str, **kw) -> KazooClient:
    c = KazooClient(
        hosts=server.zookeeper_addr,
        timeout=5,
        use_ssl=True,
        verify_certs=True,
        ca=str(certs / "ca.pem"),
        certfile=str(certs / f"{who}.pem"),
        keyfile=str(certs / f"{who}-key.pem"),
        **kw,
    )
    c.start(timeout=10)
    return c


def test_a_team_sees_its_namespace_as_the_root(server: Server, certs: Path) -> None:
    a = kazoo_as(server, certs, "team-a")
    b = kazoo_as(server, certs, "team-b")
    try:
        a.create("/x", b"a's")
        assert a.get_children("/") == ["x"]
        assert a.get("/x")[0] == b"a's"
        # b has a root of its own: a's node is not there, and b's create is b's.
        with pytest.raises(NoNodeError):
            b.get("/x")
        b.create("/x", b"b's")
        assert a.get("/x")[0] == b"a's"
        with concord.Client(
            server.addr,
            tls=TLS(ca=str(certs / "ca.pem"), cert=str(certs / "admin.pem"), key=str(certs / "admin-key.pem")),
        ) as admin:
            assert admin.get("/teams/a/x")[0] == b"a's"
            assert admin.get("/teams/b/x")[0] == b"b's"
        # One session per identity.
        assert a.client_id[0] != b.client_id[0]
    finally:
        for c in (a, b):
            c.stop()
            c.close()


def test_a_team_cannot_take_over_another_teams_session(server: Server, certs: Path) -> None:
    a = kazoo_as(server, certs, "team-a")
    try:
        session_id, passwd = a.client_id
        # b with a's id and password: refused as an expired session (kazoo, not
        # yet connected, then starts a session of its own).
        b = kazoo_as(server, certs, "team-b", client_id=(session_id, passwd))
        try:
            assert b.client_id[0] != session_id
        finally:
            b.stop()
            b.close()
        assert a.exists("/") is not None, "a's session goes on"
    finally:
        a.stop()
        a.close()


def test_a_teams_quota_holds_on_the_zookeeper_port(server: Server, certs: Path) -> None:
    a = kazoo_as(server, certs, "team-a")
    try:
        a.ensure_path("/q")
        with pytest.raises(QuotaExceededError):
            for i in range(10):
                a.create(f"/q/n{i}")
    finally:
        a.stop()
        a.close()


def test_plain_text_gets_no_connection(server: Server) -> None:
    host, port = server.zookeeper_addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    try:
        # A connect request in the clear: the TLS handshake fails and closes it.
        s.sendall(b"\0\0\0\x2c" + b"\0" * 44)
        s.settimeout(10)
        data = s.recv(100)
        assert not data.startswith(b"\0\0\0"), data
    finally:
        s.close()
