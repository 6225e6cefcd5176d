"""Concord's exceptions, and what a caller may do after one.

Every failed call raises a :class:`ConcordError` subclass named as kazoo names it
(``NoNodeError``, ``NodeExistsError``, ...). The machine-readable :class:`ErrorCode` is
read, in this order, from

1. the ``concord-error-code`` trailing metadata entry the server sets on every failure;
2. the message prefix (``"NO_NODE: /a does not exist"``);
3. the gRPC status code, for failures no server answered (connection refused, a
   client-side deadline, a reset stream).

Two questions follow every failure: :attr:`ConcordError.retry_safe` (sending the same
request again is safe and may succeed) and :attr:`ConcordError.indeterminate` (a
write's outcome is unknown). The rules are the Rust SDK's (``sdk-rust/src/error.rs``).
This module only classifies; it never retries.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
from typing import Any

import grpc

#: The trailing metadata key under which the server names the error code.
ERROR_CODE_METADATA_KEY = "concord-error-code"
#: The trailing metadata keys under which a NOT_LEADER failure names the leader.
LEADER_ID_METADATA_KEY = "concord-leader-id"
LEADER_ADDR_METADATA_KEY = "concord-leader-addr"


@dataclasses.dataclass(frozen=True)
class LeaderHint:
    """The leader a NOT_LEADER failure named (the Rust SDK's ``LeaderHint``)."""

    #: The leader's server id.
    id: int
    #: Where the leader's clients connect (``host:port``), if the server knows it.
    client_addr: str | None = None


class ErrorCode(enum.IntEnum):
    """The wire's ``concord.v1.ErrorCode`` (a test checks it matches the proto)."""

    ERROR_CODE_UNSPECIFIED = 0
    NODE_EXISTS = 1
    NO_NODE = 2
    BAD_VERSION = 3
    NOT_EMPTY = 4
    NO_CHILDREN_FOR_EPHEMERALS = 5
    BAD_PATH = 6
    DATA_TOO_LARGE = 7
    SESSION_EXPIRED = 8
    FENCED = 9
    NOT_LEADER = 10
    QUOTA_EXCEEDED = 11
    PERMISSION_DENIED = 12
    BAD_ARGUMENTS = 13
    ZXID_COMPACTED = 14
    SLOW_CONSUMER = 15
    TIMEOUT = 16
    UNAVAILABLE = 17
    UNIMPLEMENTED = 18
    INTERNAL = 19
    LOCK_HELD = 20
    BAD_STATE = 21
    BAD_MESSAGE = 22
    MESSAGE_TOO_LARGE = 23
    RESPONSE_TOO_LARGE = 24
    OUTCOME_UNKNOWN = 25


class Origin(enum.Enum):
    """Where an error came from; decides the retry classification."""

    #: The server answered with a Concord error (code in metadata or message prefix).
    SERVER = "server"
    #: The request never reached a server (connecting failed): nothing was done.
    NOT_SENT = "not_sent"
    #: The transport failed after the request may have been sent.
    TRANSPORT = "transport"
    #: The SDK refused the call before sending it.
    CLIENT = "client"


# Codes that describe the moment rather than the request: trying again may work.
_TRANSIENT = frozenset(
    {
        ErrorCode.NOT_LEADER,
        ErrorCode.OUTCOME_UNKNOWN,
        ErrorCode.UNAVAILABLE,
        ErrorCode.TIMEOUT,
        ErrorCode.INTERNAL,
        ErrorCode.SLOW_CONSUMER,
    }
)


class ConcordError(Exception):
    """A failed Concord call. ``str()`` is ``"CODE: message"``."""

    def __init__(
        self,
        code: ErrorCode,
        message: str = "",
        *,
        origin: Origin = Origin.CLIENT,
        write: bool = False,
        grpc_code: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        #: The machine-readable code.
        self.code = code
        #: The human-readable message, without the ``CODE: `` prefix.
        self.message = message
        #: Where the error came from.
        self.origin = origin
        #: Whether the failed call could have changed anything (a write).
        self.write = write
        #: The gRPC status code that carried it (None for the SDK's own errors).
        self.grpc_code = grpc_code
        #: For NOT_LEADER: the leader the server named, if it knows one.
        self.leader_hint: LeaderHint | None = None

    @property
    def retry_safe(self) -> bool:
        """True when sending the same request again is safe and may succeed.

        Only transient failures qualify (NOT_LEADER, UNAVAILABLE, TIMEOUT, INTERNAL,
        SLOW_CONSUMER, OUTCOME_UNKNOWN), and then only for a read, or for a write the
        server certainly did not apply (never sent, or refused with NOT_LEADER).
        """
        if self.code not in _TRANSIENT:
            return False
        return not self.write or self._server_did_nothing()

    @property
    def indeterminate(self) -> bool:
        """True when a write's outcome is unknown: it may or may not have been applied."""
        return self.write and self.code in _TRANSIENT and not self._server_did_nothing()

    @property
    def op_index(self) -> int | None:
        """For a failed transaction: the index (from 0) of the op that failed."""
        if not self.message.startswith("op "):
            return None
        index, sep, _ = self.message[3:].partition(": ")
        return int(index) if sep and index.isdigit() else None

    def _server_did_nothing(self) -> bool:
        if self.origin in (Origin.NOT_SENT, Origin.CLIENT):
            return True
        return self.origin is Origin.SERVER and self.code is ErrorCode.NOT_LEADER


class NodeExistsError(ConcordError):
    """NODE_EXISTS: the node already exists."""


class NoNodeError(ConcordError):
    """NO_NODE: the node (or, for a create, its parent) does not exist."""


class BadVersionError(ConcordError):
    """BAD_VERSION: the expected version did not match the node's."""


class NotEmptyError(ConcordError):
    """NOT_EMPTY: the node has children and cannot be deleted."""


class NoChildrenForEphemeralsError(ConcordError):
    """NO_CHILDREN_FOR_EPHEMERALS: ephemeral nodes cannot have children."""


class SessionExpiredError(ConcordError):
    """SESSION_EXPIRED: the session expired, was closed, or never existed."""


class FencedError(ConcordError):
    """FENCED: the write's fence no longer holds its lock or leadership."""


class PermissionDeniedError(ConcordError):
    """PERMISSION_DENIED: the caller may not do this."""


class QuotaExceededError(ConcordError):
    """QUOTA_EXCEEDED: a team quota would be exceeded; nothing was done."""


class BadArgumentsError(ConcordError):
    """BAD_ARGUMENTS, BAD_PATH, DATA_TOO_LARGE, BAD_MESSAGE, MESSAGE_TOO_LARGE or
    RESPONSE_TOO_LARGE: the request itself is wrong; it fails the same way again."""


class InvalidACLError(BadArgumentsError):
    """BAD_ARGUMENTS, raised by the SDK before anything is sent: an ``acl`` other
    than None or ``OPEN_ACL_UNSAFE`` (kazoo's InvalidACLError; ZooKeeper's INVALIDACL,
    which Concord's ZooKeeper port answers): Concord has no per-node ACLs, access is
    the server's grants (docs/security.md)."""


class ConnectionLossError(ConcordError):
    """UNAVAILABLE, NOT_LEADER or OUTCOME_UNKNOWN: no server could take the call."""


class TLSReason(str, enum.Enum):
    """What is wrong with a TLS connection (``TLSError.reason``)."""

    #: The server requires a client certificate (mTLS) and the client gave none.
    CLIENT_CERTIFICATE_MISSING = "CLIENT_CERTIFICATE_MISSING"
    #: The client's certificate has expired.
    CLIENT_CERTIFICATE_EXPIRED = "CLIENT_CERTIFICATE_EXPIRED"
    #: The client's certificate is not valid yet.
    CLIENT_CERTIFICATE_NOT_YET_VALID = "CLIENT_CERTIFICATE_NOT_YET_VALID"
    #: The server refused the client's certificate (not from a CA it trusts), or
    #: closed the connection right after the handshake for a reason not known here.
    CLIENT_CERTIFICATE_REFUSED = "CLIENT_CERTIFICATE_REFUSED"
    #: The server's certificate is not signed by the client's ``ca``, or names
    #: another host.
    SERVER_CERTIFICATE_UNTRUSTED = "SERVER_CERTIFICATE_UNTRUSTED"
    #: The server's certificate has expired.
    SERVER_CERTIFICATE_EXPIRED = "SERVER_CERTIFICATE_EXPIRED"
    #: The server speaks TLS; the client was given no ``tls=``.
    TLS_EXPECTED = "TLS_EXPECTED"
    #: The server speaks plain text; the client was given ``tls=``.
    PLAIN_TEXT_SERVER = "PLAIN_TEXT_SERVER"


class TLSError(ConnectionLossError):
    """UNAVAILABLE: no TLS connection could be made, for a reason a retry does not
    fix (``reason``: a TLSReason; the message says what to change). Nothing was
    sent, so ``retry_safe`` and ``indeterminate`` are False: the client's retry
    policy gives up at once."""

    def __init__(self, reason: TLSReason, message: str, *, write: bool = False) -> None:
        super().__init__(
            ErrorCode.UNAVAILABLE,
            message,
            origin=Origin.NOT_SENT,
            write=write,
            grpc_code=grpc.StatusCode.UNAVAILABLE,
        )
        #: What is wrong.
        self.reason = reason

    @property
    def retry_safe(self) -> bool:
        return False

    @property
    def indeterminate(self) -> bool:
        return False


class TimeoutError(ConcordError, builtins.TimeoutError):
    """TIMEOUT: no answer within the deadline (for a write: outcome unknown)."""


class LockTimeout(TimeoutError):
    """TIMEOUT: a lock or semaphore was not acquired within ``acquire``'s timeout
    (kazoo's LockTimeout); the acquire left no place in the queue."""


class CancelledError(ConcordError):
    """BAD_STATE, raised by the SDK: ``cancel()`` of a lock or semaphore ended the
    acquire (kazoo's CancelledError); the acquire left no place in the queue. Not
    retried (``retry_safe`` is False). Not ``asyncio.CancelledError``: the task that
    awaited the acquire was not cancelled."""


class RolledBackError(ConcordError):
    """In a failed transaction's results: this op was not applied because another failed."""


_CLASSES: dict[ErrorCode, type[ConcordError]] = {
    ErrorCode.NODE_EXISTS: NodeExistsError,
    ErrorCode.NO_NODE: NoNodeError,
    ErrorCode.BAD_VERSION: BadVersionError,
    ErrorCode.NOT_EMPTY: NotEmptyError,
    ErrorCode.NO_CHILDREN_FOR_EPHEMERALS: NoChildrenForEphemeralsError,
    ErrorCode.SESSION_EXPIRED: SessionExpiredError,
    ErrorCode.FENCED: FencedError,
    ErrorCode.PERMISSION_DENIED: PermissionDeniedError,
    ErrorCode.QUOTA_EXCEEDED: QuotaExceededError,
    ErrorCode.BAD_ARGUMENTS: BadArgumentsError,
    ErrorCode.BAD_PATH: BadArgumentsError,
    ErrorCode.DATA_TOO_LARGE: BadArgumentsError,
    ErrorCode.BAD_MESSAGE: BadArgumentsError,
    ErrorCode.MESSAGE_TOO_LARGE: BadArgumentsError,
    ErrorCode.RESPONSE_TOO_LARGE: BadArgumentsError,
    ErrorCode.UNAVAILABLE: ConnectionLossError,
    ErrorCode.NOT_LEADER: ConnectionLossError,
    ErrorCode.OUTCOME_UNKNOWN: ConnectionLossError,
    ErrorCode.TIMEOUT: TimeoutError,
}

_FROM_GRPC: dict[grpc.StatusCode, ErrorCode] = {
    grpc.StatusCode.ALREADY_EXISTS: ErrorCode.NODE_EXISTS,
    grpc.StatusCode.NOT_FOUND: ErrorCode.NO_NODE,
    grpc.StatusCode.FAILED_PRECONDITION: ErrorCode.BAD_STATE,
    grpc.StatusCode.INVALID_ARGUMENT: ErrorCode.BAD_ARGUMENTS,
    grpc.StatusCode.OUT_OF_RANGE: ErrorCode.ZXID_COMPACTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ErrorCode.QUOTA_EXCEEDED,
    grpc.StatusCode.PERMISSION_DENIED: ErrorCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED: ErrorCode.PERMISSION_DENIED,
    grpc.StatusCode.DEADLINE_EXCEEDED: ErrorCode.TIMEOUT,
    grpc.StatusCode.CANCELLED: ErrorCode.TIMEOUT,
    grpc.StatusCode.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    grpc.StatusCode.ABORTED: ErrorCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED: ErrorCode.UNIMPLEMENTED,
}

# grpc-core's words for a call that never left the client: no connection could be made.
_NOT_SENT_MARKERS = (
    "failed to connect to all addresses",
    "connection refused",
    "connections to all backends failing",
)


def _tls_error(message: str, *, write: bool) -> TLSError | None:
    """The TLSError that grpc's words for a failed TLS connection mean, if they are
    such words (the client, which knows its certificate, may name it further:
    ``concord._tls.diagnose``)."""
    if "TSI_DATA_CORRUPTED" in message:
        return TLSError(
            TLSReason.CLIENT_CERTIFICATE_REFUSED,
            "the server closed the connection after the TLS handshake: it refused this "
            f"client's certificate (none given, expired, or not from a CA it trusts) ({message})",
            write=write,
        )
    if "CERTIFICATE_VERIFY_FAILED" in message:
        why = message.split("CERTIFICATE_VERIFY_FAILED:", 1)[1].strip()
        why = why[: -len(": OK")] if why.endswith(": OK") else why
        if "expired" in why.lower():
            return TLSError(
                TLSReason.SERVER_CERTIFICATE_EXPIRED,
                f"the server's certificate has expired ({why})",
                write=write,
            )
        return TLSError(
            TLSReason.SERVER_CERTIFICATE_UNTRUSTED,
            f"the server's certificate is not trusted: {why} (is the client's ca= the CA "
            "that signed the server's certificate?)",
            write=write,
        )
    if "is not in peer certificate" in message:
        return TLSError(
            TLSReason.SERVER_CERTIFICATE_UNTRUSTED,
            f"the server's certificate does not name the host dialled ({message})",
            write=write,
        )
    if "WRONG_VERSION_NUMBER" in message:
        return TLSError(
            TLSReason.PLAIN_TEXT_SERVER,
            "the server speaks plain text and this client TLS: drop tls=, or start the "
            "server with --cert-file, --key-file and --trusted-ca-file",
            write=write,
        )
    return None


def make_error(
    code: ErrorCode,
    message: str = "",
    *,
    origin: Origin = Origin.CLIENT,
    write: bool = False,
    grpc_code: grpc.StatusCode | None = None,
) -> ConcordError:
    """The exception of the class ``code`` maps to."""
    cls = _CLASSES.get(code, ConcordError)
    return cls(code, message, origin=origin, write=write, grpc_code=grpc_code)


def parse_code_name(name: str) -> ErrorCode | None:
    """An ``ErrorCode`` by its wire name; the unspecified code is not a real code."""
    code = ErrorCode.__members__.get(name.strip())
    if code is None or code is ErrorCode.ERROR_CODE_UNSPECIFIED:
        return None
    return code


def _code_from_message(message: str) -> tuple[ErrorCode, str] | None:
    name, sep, rest = message.partition(":")
    code = parse_code_name(name)
    if code is None:
        return None
    return code, rest[1:] if rest.startswith(" ") else rest


def _metadata_code(metadata: Any) -> ErrorCode | None:
    for key, value in metadata or ():
        if key == ERROR_CODE_METADATA_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return parse_code_name(text)
    return None


def _metadata_text(metadata: Any, name: str) -> str | None:
    for key, value in metadata or ():
        if key == name:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def leader_hint_of(metadata: Any) -> LeaderHint | None:
    """The leader named by ``concord-leader-id`` / ``concord-leader-addr``, if any."""
    id_text = _metadata_text(metadata, LEADER_ID_METADATA_KEY)
    addr = _metadata_text(metadata, LEADER_ADDR_METADATA_KEY)
    if id_text is None and addr is None:
        return None
    try:
        leader_id = int(id_text) if id_text is not None else 0
    except ValueError:
        leader_id = 0
    return LeaderHint(leader_id, addr.strip() if addr else None)


def from_status(
    status: grpc.StatusCode, message: str, metadata: Any, *, write: bool
) -> ConcordError:
    """The exception for a failed call's status, details and trailing metadata."""
    code = _metadata_code(metadata)
    if code is not None:
        parsed = _code_from_message(message)
        if parsed is not None and parsed[0] is code:
            message = parsed[1]
        err = make_error(code, message, origin=Origin.SERVER, write=write, grpc_code=status)
        if code is ErrorCode.NOT_LEADER:
            err.leader_hint = leader_hint_of(metadata)
        return err
    parsed = _code_from_message(message)
    if parsed is not None:
        return make_error(
            parsed[0], parsed[1], origin=Origin.SERVER, write=write, grpc_code=status
        )
    if status is grpc.StatusCode.UNAVAILABLE:
        tls = _tls_error(message, write=write)
        if tls is not None:
            return tls
    lowered = message.lower()
    if status is grpc.StatusCode.UNAVAILABLE and any(m in lowered for m in _NOT_SENT_MARKERS):
        return make_error(
            ErrorCode.UNAVAILABLE, message, origin=Origin.NOT_SENT, write=write, grpc_code=status
        )
    code = _FROM_GRPC.get(status, ErrorCode.INTERNAL)
    return make_error(code, message, origin=Origin.TRANSPORT, write=write, grpc_code=status)


def from_rpc_error(err: grpc.RpcError, *, write: bool) -> ConcordError:
    """The exception for a failed grpc call (``grpc.aio.AioRpcError`` or ``grpc.Call``)."""
    status = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else "") or ""
    metadata = err.trailing_metadata() if hasattr(err, "trailing_metadata") else ()
    return from_status(status, details, metadata, write=write)


def deadline_error(*, write: bool, limit_s: float) -> ConcordError:
    """TIMEOUT for a call that got no answer within its deadline (after it may have been sent)."""
    return make_error(
        ErrorCode.TIMEOUT,
        f"no answer within the call's deadline of {int(limit_s * 1000)} ms",
        origin=Origin.TRANSPORT,
        write=write,
        grpc_code=grpc.StatusCode.DEADLINE_EXCEEDED,
    )
