"""TLS and mTLS with certificates from `concord certs`, and PERMISSION_DENIED from a
real server (a certificate whose identity is neither an admin nor in a team)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

import concord
from concord import TLS, ErrorCode

from conftest import CONCORD_BIN, Server, run_with


@pytest.fixture(scope="module")
def certs() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="concord-py-certs-") as d:
        out = subprocess.run(
            [str(CONCORD_BIN), "certs", d, "--members", "1", "--clients", "admin,stranger"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        yield Path(d)


@pytest.fixture(scope="module")
def tls_server(certs: Path) -> Iterator[Server]:
    s = Server(
        extra=(
            "--cert-file", str(certs / "server-1.pem"),
            "--key-file", str(certs / "server-1-key.pem"),
            "--trusted-ca-file", str(certs / "ca.pem"),
        )
    )
    try:
        yield s
    finally:
        s.kill()


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
