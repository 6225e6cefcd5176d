"""A TLS connection that cannot be made says why, on both clients, and is not
retried: a client certificate missing, expired or from a CA the server does not
trust (grpc reports all three as ``Unwrap failed (TSI_DATA_CORRUPTED)``), a server
certificate expired or not from the client's CA, plain text to a TLS port (grpc:
``Socket closed``) and TLS to a plain-text one. Each raises ``TLSError`` (a
ConnectionLossError) with its ``reason`` after one attempt, though the client has
the default retry policy (a minute of retries for what is retry-safe)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

import concord
from concord import TLS, ErrorCode, TLSError, TLSReason

from conftest import CONCORD_BIN, Server


def _run(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def _expired(ca: Path, name: str, out: Path, server: bool) -> None:
    """A certificate of ``ca`` for ``name`` that expired a day ago (openssl)."""
    ext = out / f"{name}.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
        + ("extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n" if server else "extendedKeyUsage=clientAuth\n")
    )
    key, csr, pem = out / f"{name}-key.pem", out / f"{name}.csr", out / f"{name}.pem"
    _run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
          "-keyout", str(key), "-subj", f"/CN={name}", "-out", str(csr)])
    _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca / "ca.pem"), "-CAkey", str(ca / "ca-key.pem"),
          "-CAcreateserial", "-days", "-1", "-extfile", str(ext), "-out", str(pem)])


@pytest.fixture(scope="module")
def pki() -> Iterator[Path]:
    """``ca/``: the servers' and clients' CA (``concord certs``) with an expired client
    and server certificate; ``other/``: a second CA of the same name."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make expired certificates")
    d = Path(tempfile.mkdtemp(prefix="concord-py-pki-"))
    try:
        for sub in ("ca", "other"):
            _run([str(CONCORD_BIN), "certs", str(d / sub), "--members", "1", "--clients", "admin"])
        _expired(d / "ca", "old-admin", d / "ca", server=False)
        _expired(d / "ca", "old-server", d / "ca", server=True)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _server_flags(pki: Path, name: str = "server-1") -> tuple[str, ...]:
    ca = pki / "ca"
    return (
        "--cert-file", str(ca / f"{name}.pem"),
        "--key-file", str(ca / f"{name}-key.pem"),
        "--trusted-ca-file", str(ca / "ca.pem"),
    )


@pytest.fixture(scope="module")
def servers(pki: Path) -> Iterator[dict[str, Server]]:
    started: dict[str, Server] = {}
    try:
        started["mtls"] = Server(extra=_server_flags(pki))
        started["expired"] = Server(extra=_server_flags(pki, "old-server"))
        started["plain"] = Server()
        yield started
    finally:
        for s in started.values():
            s.kill()


def _tls(pki: Path, ca: str = "ca", cert: str | None = "admin", cert_ca: str = "ca") -> TLS:
    if cert is None:
        return TLS(ca=str(pki / ca / "ca.pem"))
    return TLS(
        ca=str(pki / ca / "ca.pem"),
        cert=str(pki / cert_ca / f"{cert}.pem"),
        key=str(pki / cert_ca / f"{cert}-key.pem"),
    )


#: (server, client TLS, the reason, words the message must hold)
CASES: dict[str, tuple[str, Any, TLSReason, str]] = {
    "no client certificate": ("mtls", lambda p: _tls(p, cert=None), TLSReason.CLIENT_CERTIFICATE_MISSING, "requires a client certificate"),
    "client certificate expired": ("mtls", lambda p: _tls(p, cert="old-admin"), TLSReason.CLIENT_CERTIFICATE_EXPIRED, "expired at"),
    "client certificate of another CA": ("mtls", lambda p: _tls(p, cert_ca="other"), TLSReason.CLIENT_CERTIFICATE_REFUSED, "not signed by a CA the server trusts"),
    "server certificate of another CA": ("mtls", lambda p: _tls(p, ca="other"), TLSReason.SERVER_CERTIFICATE_UNTRUSTED, "not trusted"),
    "server certificate expired": ("expired", lambda p: _tls(p), TLSReason.SERVER_CERTIFICATE_EXPIRED, "has expired"),
    "plain text to a TLS port": ("mtls", lambda p: None, TLSReason.TLS_EXPECTED, "speaks TLS and this client plain text"),
    "TLS to a plain-text port": ("plain", lambda p: _tls(p), TLSReason.PLAIN_TEXT_SERVER, "speaks plain text and this client TLS"),
}


def _counting_failures(core: Any) -> list[ErrorCode]:
    """Counts the failed attempts of ``core`` (both drivers report each to ``_failed``)."""
    failures: list[ErrorCode] = []
    real = core._failed

    def failed(err: Any) -> Any:
        failures.append(err.code)
        return real(err)

    core._failed = failed
    return failures


@pytest.mark.parametrize("case", list(CASES))
def test_a_tls_mismatch_says_what_is_wrong_and_is_not_retried(
    case: str, kind: str, pki: Path, servers: dict[str, Server]
) -> None:
    server, make_tls, reason, words = CASES[case]
    addr = servers[server].addr

    def check(err: TLSError, failures: list[ErrorCode]) -> None:
        assert err.reason is reason, err
        assert words in err.message, err.message
        assert isinstance(err, concord.ConnectionLossError) and err.code is ErrorCode.UNAVAILABLE
        assert not err.retry_safe and not err.indeterminate
        assert "TSI_DATA_CORRUPTED" not in err.message and "Socket closed" not in err.message
        assert len(failures) == 1, failures  # one attempt: no retry

    if kind == "sync":
        c = concord.Client(addr, tls=make_tls(pki))
        try:
            failures = _counting_failures(c.aio)
            with pytest.raises(TLSError) as e:
                c.exists("/")
            check(e.value, failures)
            failures.clear()
            with pytest.raises(TLSError) as e:
                c.start(timeout=20)
            check(e.value, failures)
        finally:
            c.close()
        return

    async def main() -> None:
        c = concord.aio.Client(addr, tls=make_tls(pki))
        try:
            failures = _counting_failures(c)
            with pytest.raises(TLSError) as e:
                await c.exists("/")
            check(e.value, failures)
            failures.clear()
            with pytest.raises(TLSError) as e:
                await c.start(timeout=20)
            check(e.value, failures)
        finally:
            await c.close()

    asyncio.run(main())


def test_a_good_certificate_still_connects(kind: str, pki: Path, servers: dict[str, Server]) -> None:
    if kind == "sync":
        with concord.Client(servers["mtls"].addr, tls=_tls(pki)) as c:
            assert c.exists("/") is not None
        return

    async def main() -> None:
        async with concord.aio.Client(servers["mtls"].addr, tls=_tls(pki)) as c:
            assert await c.exists("/") is not None

    asyncio.run(main())


def test_the_certificate_reader() -> None:
    """The DER walk of ``concord._tls`` on a certificate of ``concord certs``."""
    from concord._tls import Certificate

    d = Path(tempfile.mkdtemp(prefix="concord-py-pki-"))
    try:
        _run([str(CONCORD_BIN), "certs", str(d), "--members", "1", "--clients", "someone"])
        cert = Certificate.of_pem((d / "someone.pem").read_bytes())
        assert cert is not None and cert.subject == "someone" and cert.issuer == "Concord development CA"
        assert cert.not_before.year == 2025 and cert.not_after.year == 2036
        assert Certificate.of_pem(b"not a certificate") is None
    finally:
        shutil.rmtree(d, ignore_errors=True)
