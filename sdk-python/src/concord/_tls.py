"""Why a TLS connection failed, in words a user can act on (docs/python.md, "TLS
errors"): grpc's C core reports a server that refused the client's certificate as
``Unwrap failed (TSI_DATA_CORRUPTED)`` (TLS 1.3 ends the client's handshake before
the server checks its certificate; the server's alert arrives as undecryptable
data), and plain text sent to a TLS port as ``Socket closed``.

::

    failed call ──▶ errors.from_status: grpc's TLS words ──▶ TLSError(reason, generic)
                     │ (client side, knowing its TLS config)
                     ▼
                diagnose(err, tls, target): the client's own certificate read here
                (missing, expired, not yet valid), or a probe of the host when a
                plain-text client's connection was closed (does it speak TLS?)

The certificate is read with a minimal DER walk (validity and names only, no
signature check); the probe is one TCP connection with a TLS handshake that checks
nothing, bounded by a timeout. What it must not do: decide that a certificate is
good (the server does), or probe a host for any failure but a closed connection of a
plain-text client.
"""

from __future__ import annotations

import base64
import datetime
import re
import socket
import ssl
from typing import Any

from .errors import ConcordError, ErrorCode, Origin, TLSError, TLSReason

#: How long the probe of a host may take (seconds).
PROBE_TIMEOUT_S = 1.0
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)
#: The OID of an X.509 name's common name (2.5.4.3).
_CN_OID = bytes([0x55, 0x04, 0x03])


def _tlv(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``at``."""
    tag = der[at]
    length = der[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(der[at : at + count], "big")
        at += count
    if at + length > len(der):
        raise ValueError("a DER element runs past the end")
    return tag, at, at + length


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    out = []
    while start < end:
        tag, vs, ve = _tlv(der, start)
        out.append((tag, vs, ve))
        start = ve
    return out


def _time(der: bytes, tag: int, start: int, end: int) -> datetime.datetime:
    text = der[start:end].decode("ascii")
    if tag == 0x17:  # UTCTime: YYMMDDHHMMSSZ
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    return datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=datetime.timezone.utc)


def _cn(der: bytes, start: int, end: int) -> str:
    """The common name in an X.509 Name (empty if none)."""
    for _, rs, re_ in _children(der, start, end):  # RDN sets
        for _, as_, ae in _children(der, rs, re_):  # AttributeTypeAndValue
            parts = _children(der, as_, ae)
            if len(parts) == 2 and der[parts[0][1] : parts[0][2]] == _CN_OID:
                return der[parts[1][1] : parts[1][2]].decode("utf-8", "replace")
    return ""


class Certificate:
    """What a client certificate says of itself: subject and issuer CN, validity."""

    def __init__(self, der: bytes) -> None:
        _, cs, ce = _tlv(der, 0)
        _, ts, te = _children(der, cs, ce)[0]  # tbsCertificate
        fields = _children(der, ts, te)
        if fields[0][0] == 0xA0:  # [0] version
            fields = fields[1:]
        # serialNumber, signature, issuer, validity, subject, ...
        self.issuer = _cn(der, fields[2][1], fields[2][2])
        not_before, not_after = _children(der, fields[3][1], fields[3][2])
        self.not_before = _time(der, *not_before)
        self.not_after = _time(der, *not_after)
        self.subject = _cn(der, fields[4][1], fields[4][2])

    @classmethod
    def of_pem(cls, pem: bytes) -> Certificate | None:
        """The first certificate in ``pem``, or None when there is none to read."""
        m = _PEM_CERT.search(pem)
        if m is None:
            return None
        try:
            return cls(base64.b64decode(b"".join(m.group(1).split())))
        except (ValueError, IndexError):
            return None


def _when(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def suspect(err: ConcordError, tls: Any) -> bool:
    """Whether ``err`` may be a TLS mismatch that ``diagnose`` can name: a refused
    client certificate, or a plain-text client's connection closed at once."""
    if isinstance(err, TLSError):
        return err.reason is TLSReason.CLIENT_CERTIFICATE_REFUSED
    return (
        tls is None
        and err.code is ErrorCode.UNAVAILABLE
        and err.origin is Origin.NOT_SENT
        and "socket closed" in err.message.lower()
    )


def diagnose(err: ConcordError, tls: Any, cert_pem: bytes | None, target: str) -> ConcordError:
    """``err`` with what is wrong named, when ``suspect(err, tls)``; else ``err``.
    May probe ``target`` (blocking, at most PROBE_TIMEOUT_S)."""
    if not suspect(err, tls):
        return err
    if tls is None:
        if not speaks_tls(target):
            return err
        return TLSError(
            TLSReason.TLS_EXPECTED,
            f"the server at {target} speaks TLS and this client plain text: give the client "
            "tls=TLS(ca=..., cert=..., key=...)",
            write=err.write,
        )
    if cert_pem is None:
        return TLSError(
            TLSReason.CLIENT_CERTIFICATE_MISSING,
            f"the server at {target} requires a client certificate (mTLS) and this client "
            "gave none: TLS(cert=..., key=...)",
            write=err.write,
        )
    cert = Certificate.of_pem(cert_pem)
    if cert is None:
        return err
    now = datetime.datetime.now(datetime.timezone.utc)
    who = f"this client's certificate (CN={cert.subject!r}, issued by CN={cert.issuer!r})"
    if now > cert.not_after:
        return TLSError(
            TLSReason.CLIENT_CERTIFICATE_EXPIRED,
            f"{who} expired at {_when(cert.not_after)}; the server at {target} refused it",
            write=err.write,
        )
    if now < cert.not_before:
        return TLSError(
            TLSReason.CLIENT_CERTIFICATE_NOT_YET_VALID,
            f"{who} is not valid before {_when(cert.not_before)}; the server at {target} "
            "refused it",
            write=err.write,
        )
    return TLSError(
        TLSReason.CLIENT_CERTIFICATE_REFUSED,
        f"the server at {target} refused {who}: it is not signed by a CA the server "
        "trusts (its --trusted-ca-file)",
        write=err.write,
    )


def speaks_tls(target: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the server at ``host:port`` answers a TLS handshake (one that checks
    nothing): True once it completes or the server answers with a TLS alert."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            with context.wrap_socket(sock):
                return True
    except ssl.SSLError as e:
        return "ALERT" in str(e).upper()
    except (OSError, ValueError):
        return False
