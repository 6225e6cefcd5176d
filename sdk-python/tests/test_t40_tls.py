"""TLS and mTLS with certificates from `concord certs`, and the errors of access
control from a real server: PERMISSION_DENIED (a certificate whose identity is
neither an admin nor in a team) and QUOTA_EXCEEDED (a team over its nodes quota)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import concord
from concord import TLS, ErrorCode

from conftest import Server, made_certs, run_with

#: What the server logs once team roots and grants are seeded (server/src/api/access.rs).
SEEDED = "the grant table and team roots are seeded"


@pytest.fixture(scope="module")
def certs() -> Iterator[Path]:
    with made_certs("admin,stranger,team-a") as d:
        yield d


def _mtls_flags(certs: Path) -> tuple[str, ...]:
    return (
        "--cert-file", str(certs / "server-1.pem"),
        "--key-file", str(certs / "server-1-key.pem"),
        "--trusted-ca-file", str(certs / "ca.pem"),
    )


@pytest.fixture(scope="module")
def tls_server(certs: Path) -> Iterator[Server]:
    s = Server(extra=_mtls_flags(certs))
    try:
        yield s
    finally:
        s.kill()


TEAM_CONFIG = """
[[teams]]
name = "a"
root = "/teams/a"
identities = ["team-a"]
[teams.quota]
nodes_max = 2
"""


def _tls(certs: Path, client: str | None) -> TLS:
    if client is None:
        return TLS(ca=str(certs / "ca.pem"))
    return TLS(
        ca=str(certs / "ca.pem"),
        cert=str(certs / f"{client}.pem"),
        key=(certs / f"{client}-key.pem").read_bytes(),  # a path or the PEM itself
    )


def test_mtls_with_a_client_certificate(tls_server: Server, certs: Path, kind: str) -> None:
    async def body(c: Any) -> None:
        path = await c.create(f"/tls-{kind}", b"secret", ephemeral=True)
        assert (await c.get(path))[0] == b"secret"

    run_with(kind, tls_server.addr, body, tls=_tls(certs, "admin"))


def test_an_identity_without_grants_is_denied(tls_server: Server, certs: Path) -> None:
    c = concord.Client(tls_server.addr, tls=_tls(certs, "stranger"))
    try:
        with pytest.raises(concord.PermissionDeniedError) as e:
            c.exists("/")
        assert e.value.code is ErrorCode.PERMISSION_DENIED and not e.value.retry_safe
        with pytest.raises(concord.PermissionDeniedError):
            c.start(timeout=5)
    finally:
        c.close()


def test_no_client_certificate_or_plain_text_gets_no_connection(tls_server: Server, certs: Path) -> None:
    for tls in (_tls(certs, None), None):
        c = concord.Client(tls_server.addr, tls=tls)
        try:
            with pytest.raises(concord.ConnectionLossError) as e:
                c.exists("/")
            assert e.value.code is ErrorCode.UNAVAILABLE
        finally:
            c.close()


def test_a_team_over_its_nodes_quota_gets_quota_exceeded(certs: Path) -> None:
    s = Server(config=TEAM_CONFIG, extra=_mtls_flags(certs))
    try:
        deadline = time.monotonic() + 20
        while SEEDED not in s.log():  # team members are refused until the seed is in
            assert time.monotonic() < deadline, f"no seed in 20 s:\n{s.log()}"
            time.sleep(0.02)
        c = concord.Client(s.addr, tls=_tls(certs, "team-a"))
        try:
            c.create("/n1")
            c.create("/n2")
            with pytest.raises(concord.QuotaExceededError) as e:
                c.create("/n3")
            assert e.value.code is ErrorCode.QUOTA_EXCEEDED and not e.value.retry_safe
            assert "nodes" in e.value.message
            assert c.get_children("/") == ["n1", "n2"]
        finally:
            c.close()
    finally:
        s.kill()
