"""The SDK's own types: what calls take and return, converted from the generated
messages here, once, so that the API never shows a proto message. No IO here."""

from __future__ import annotations

import dataclasses
import enum
import random
from typing import Any, Iterator


class State(str, enum.Enum):
    """What the client knows of its session's standing (docs/sdk.md, Curator's names)."""

    #: The session was opened; pings are answered.
    CONNECTED = "CONNECTED"
    #: No ping answered for half the TTL: the session may live on, this client cannot tell.
    SUSPENDED = "SUSPENDED"
    #: A ping was answered again after SUSPENDED: the same session lives on.
    RECONNECTED = "RECONNECTED"
    #: The server said the session expired, or no ping was answered for a whole TTL.
    #: The session and its ephemerals are gone; it never comes back.
    LOST = "LOST"
    #: ``stop()`` closed the session on the server.
    CLOSED = "CLOSED"

    @property
    def ended(self) -> bool:
        """True for the states a session never leaves (LOST, CLOSED)."""
        return self in (State.LOST, State.CLOSED)

    @property
    def connected(self) -> bool:
        """True while pings are answered (CONNECTED, RECONNECTED)."""
        return self in (State.CONNECTED, State.RECONNECTED)


@dataclasses.dataclass(frozen=True)
class Stat:
    """Node metadata, with ZooKeeper's meaning for every field."""

    czxid: int = 0
    mzxid: int = 0
    pzxid: int = 0
    ctime_ms: int = 0
    mtime_ms: int = 0
    version: int = 0
    cversion: int = 0
    aversion: int = 0
    ephemeral_owner: int = 0
    data_length: int = 0
    num_children: int = 0

    @classmethod
    def of(cls, stat: Any) -> Stat:
        """From a ``concord.v1.Stat`` message."""
        return cls(
            czxid=stat.czxid,
            mzxid=stat.mzxid,
            pzxid=stat.pzxid,
            ctime_ms=stat.ctime_ms,
            mtime_ms=stat.mtime_ms,
            version=stat.version,
            cversion=stat.cversion,
            aversion=stat.aversion,
            ephemeral_owner=stat.ephemeral_owner,
            data_length=stat.data_length,
            num_children=stat.num_children,
        )

    # kazoo's ZnodeStat: its field names (ZooKeeper's), its properties, and its
    # order as a tuple (``czxid, mzxid, ctime, ... = stat``, ``stat[4]``).

    @property
    def ctime(self) -> int:
        """Creation time in ms since the Unix epoch (ZooKeeper's ``ctime``)."""
        return self.ctime_ms

    @property
    def mtime(self) -> int:
        """Last data change in ms since the Unix epoch (ZooKeeper's ``mtime``)."""
        return self.mtime_ms

    @property
    def ephemeralOwner(self) -> int:  # noqa: N802 (ZooKeeper's name)
        """The owning session of an ephemeral node, 0 for a persistent one."""
        return self.ephemeral_owner

    @property
    def dataLength(self) -> int:  # noqa: N802
        return self.data_length

    @property
    def numChildren(self) -> int:  # noqa: N802
        return self.num_children

    @property
    def acl_version(self) -> int:
        return self.aversion

    @property
    def children_version(self) -> int:
        return self.cversion

    @property
    def creation_transaction_id(self) -> int:
        return self.czxid

    @property
    def last_modified_transaction_id(self) -> int:
        return self.mzxid

    @property
    def created(self) -> float:
        """Creation time in seconds since the Unix epoch."""
        return self.ctime_ms / 1000.0

    @property
    def last_modified(self) -> float:
        """Last data change in seconds since the Unix epoch."""
        return self.mtime_ms / 1000.0

    @property
    def children_count(self) -> int:
        return self.num_children

    @property
    def owner_session_id(self) -> int | None:
        """The owning session of an ephemeral node, else None."""
        return self.ephemeral_owner or None

    @property
    def ephemeral(self) -> bool:
        return self.ephemeral_owner != 0

    def _kazoo_tuple(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in KAZOO_STAT_FIELDS)

    def __iter__(self) -> Iterator[int]:
        """kazoo's ZnodeStat is a namedtuple: the fields in its order."""
        return iter(self._kazoo_tuple())

    def __getitem__(self, index: int | slice) -> Any:
        return self._kazoo_tuple()[index]

    def __len__(self) -> int:
        return len(KAZOO_STAT_FIELDS)


#: kazoo's ZnodeStat fields, in its order (ZooKeeper's Stat).
KAZOO_STAT_FIELDS = (
    "czxid",
    "mzxid",
    "ctime",
    "mtime",
    "version",
    "cversion",
    "aversion",
    "ephemeralOwner",
    "dataLength",
    "numChildren",
    "pzxid",
)


@dataclasses.dataclass(frozen=True)
class Fence:
    """A fencing token for writes: a lock hold's or a leadership's key and token."""

    key: str
    token: int


@dataclasses.dataclass(frozen=True)
class TLS:
    """TLS to the servers: ``ca`` (PEM) to verify them, and ``cert``/``key`` (PEM) for
    servers that require a client certificate. Each is a file path or the PEM bytes."""

    ca: str | bytes | None = None
    cert: str | bytes | None = None
    key: str | bytes | None = None


@dataclasses.dataclass(frozen=True)
class Retry:
    """Retries of retry-safe failures (docs/sdk.md, "What is retried").

    Delays double from ``delay`` up to ``max_delay``, each drawn with "equal jitter" (a
    random point in the upper half); retrying stops after ``max_tries`` retries in a row
    or once ``deadline`` seconds have passed since the first failure, whichever comes
    first (None: no bound of that kind). The default: up to a minute, 50 ms to 2 s apart.
    """

    max_tries: int | None = None
    deadline: float | None = 60.0
    delay: float = 0.05
    max_delay: float = 2.0

    def backoff(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (from 1), without jitter."""
        shift = min(max(attempt - 1, 0), 32)
        return min(self.delay * (1 << shift), self.max_delay)

    def jittered(self, attempt: int) -> float:
        """The delay before retry ``attempt`` with equal jitter."""
        full = self.backoff(attempt)
        return full / 2 + random.uniform(0, full / 2)

    def allows(self, attempt: int, elapsed: float) -> bool:
        """True when retry number ``attempt`` may start ``elapsed`` s after the first failure."""
        tries_ok = self.max_tries is None or attempt <= self.max_tries
        time_ok = self.deadline is None or elapsed < self.deadline
        return tries_ok and time_ok


#: The retry policy of a client given no ``retry=``: up to a minute, 50 ms to 2 s
#: apart. Every write carries the session and a request id, so writes whose outcome
#: was lost in a failover or a restart are retried under it too (docs/python.md,
#: "Retries"). ``retry=None`` sends each call once.
DEFAULT_RETRY = Retry()
