"""The SDK's own types: what calls take and return, converted from the generated
messages here, once, so that the API never shows a proto message. No IO here."""

from __future__ import annotations

import dataclasses
import enum
import random
from typing import Any, Iterator, NamedTuple


class State(str, enum.Enum):
    """What the client knows of its session's standing (docs/sdk.md, Curator's names)."""

    #: The session was opened; pings are answered.
    CONNECTED = "CONNECTED"
    #: No ping answered for half the TTL: the session may live on, this client cannot tell.
    SUSPENDED = "SUSPENDED"
    #: A ping was answered again after SUSPENDED: the same session lives on.
    RECONNECTED = "RECONNECTED"
    #: The server said the session expired, or no ping was answered for the give-up
    #: time (``give_up_share`` of the TTL, twice it by default).
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


class WatchedEvent(NamedTuple):
    """What a kazoo-style one-shot watch (``get(path, watch=fn)``) is called with,
    as kazoo's: ``type`` "CREATED", "DELETED", "CHANGED" or "CHILD" (kazoo's
    EventType values), ``state`` "CONNECTED", ``path`` the watched node."""

    type: str
    state: str
    path: str


class Id(NamedTuple):
    """kazoo's ``Id`` of an ACL entry: a scheme and an identity in it."""

    scheme: str
    id: str


class ACL(NamedTuple):
    """kazoo's ``ACL`` entry: ZooKeeper's permission bits (``PERMS_ALL`` is all five)
    for an ``Id``. Concord has no per-node ACLs (access is the server's grants,
    docs/security.md): the one ACL it shows and accepts is ``OPEN_ACL_UNSAFE``'s
    entry, as its ZooKeeper port does (docs/zookeeper.md). A kazoo ``ACL`` compares
    equal to the same entry here (both are tuples ``(perms, (scheme, id))``)."""

    perms: int
    id: Id


#: ZooKeeper's READ | WRITE | CREATE | DELETE | ADMIN.
PERMS_ALL = 31
#: The entry of kazoo's ``OPEN_ACL_UNSAFE``: every permission to anyone.
OPEN_ACL = ACL(PERMS_ALL, Id("world", "anyone"))
#: kazoo's ``OPEN_ACL_UNSAFE``: what ``get_acls`` returns for every node, and the one
#: ACL ``create``, ``ensure_path``, a transaction's ``create`` and ``set_acls`` take.
OPEN_ACL_UNSAFE = [OPEN_ACL]


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


class Role(enum.IntEnum):
    """A server's part in the ensemble (the wire's ``concord.v1.Role``)."""

    #: Not known now (or unreachable, for a member another server describes).
    UNKNOWN = 0
    #: Electing a leader; serves no writes.
    LOOKING = 1
    #: Proposes and commits txns (a single server leads an ensemble of one).
    LEADER = 2
    #: Votes on proposals and forwards writes to the leader.
    FOLLOWER = 3
    #: Receives committed txns and serves reads, never votes.
    OBSERVER = 4

    @classmethod
    def of(cls, value: int) -> Role:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclasses.dataclass(frozen=True)
class ServerStatus:
    """``Cluster/Status``: the answering server (the Rust SDK's ``ServerStatus``)."""

    server_id: int
    role: Role
    #: Newest applied zxid.
    zxid: int
    #: Newest zxid known committed.
    commit_zxid: int
    epoch: int
    #: Nodes in the tree, the root included.
    node_count: int
    #: Live sessions.
    session_count: int
    #: Watches registered live on this server.
    watch_count: int
    #: Servers in the ensemble (voters and observers).
    ensemble_size: int
    #: The server's version.
    version: str
    #: Oldest zxid a watch may resume from on this server.
    oldest_resumable_zxid: int
    #: Oldest zxid a watch resumes from out of the in-memory history alone.
    watch_history_oldest_zxid: int
    #: Lock and election waiters woken by a predecessor's removal since it started.
    queue_wakeups: int
    #: The server this one follows (itself when it leads); 0 while looking.
    leader_id: int
    #: A leader: whether it accepts writes and linearizable reads now.
    leader_serving: bool
    #: Where it serves ZooKeeper's protocol (host:port); "" if it does not.
    zookeeper_addr: str

    @classmethod
    def of(cls, s: Any) -> ServerStatus:
        """From a ``concord.v1.StatusResponse``."""
        return cls(
            server_id=s.server_id,
            role=Role.of(s.role),
            zxid=s.zxid,
            commit_zxid=s.commit_zxid,
            epoch=s.epoch,
            node_count=s.node_count,
            session_count=s.session_count,
            watch_count=s.watch_count,
            ensemble_size=s.ensemble_size,
            version=s.version,
            oldest_resumable_zxid=s.oldest_resumable_zxid,
            watch_history_oldest_zxid=s.watch_history_oldest_zxid,
            queue_wakeups=s.queue_wakeups,
            leader_id=s.leader_id,
            leader_serving=s.leader_serving,
            zookeeper_addr=s.zookeeper_addr,
        )


@dataclasses.dataclass(frozen=True)
class MemberStatus:
    """One member, as the answering server knows it (``Cluster/Members``)."""

    id: int
    #: Its client and peer addresses, from the configuration.
    client_addr: str
    peer_addr: str
    #: Configured as a voter (False: an observer, which never votes).
    voter: bool
    #: Its role when known now; UNKNOWN when unknown or unreachable.
    role: Role
    #: Its applied zxid as far as the answering server knows (0: unknown).
    zxid: int
    #: Txns it is behind the newest the answering server knows of.
    lag_txns: int
    #: Whether ``zxid`` and ``lag_txns`` are known.
    known: bool
    #: Milliseconds since the answering server (a leader) last heard from it.
    heard_ms_ago: int
    #: Where ZooKeeper clients reach it, from the configuration ("" when none is named).
    zookeeper_addr: str = ""


@dataclasses.dataclass(frozen=True)
class Members:
    """The answer of ``members()``: exact for every member only on the leader."""

    #: The server that answered.
    server_id: int
    #: The leader it follows or is; 0 while it knows none.
    leader_id: int
    #: Every configured member, by id.
    members: list[MemberStatus]

    @classmethod
    def of(cls, r: Any) -> Members:
        """From a ``concord.v1.MembersResponse``."""
        return cls(
            server_id=r.server_id,
            leader_id=r.leader_id,
            members=[
                MemberStatus(
                    id=m.id,
                    client_addr=m.client_addr,
                    peer_addr=m.peer_addr,
                    voter=m.voter,
                    role=Role.of(m.role),
                    zxid=m.zxid,
                    lag_txns=m.lag_txns,
                    known=m.known,
                    heard_ms_ago=m.heard_ms_ago,
                    zookeeper_addr=m.zookeeper_addr,
                )
                for m in r.members
            ],
        )


@dataclasses.dataclass(frozen=True)
class Grant:
    """Permissions (letters of "rwcda") on the subtree at ``path``, held by an
    ``identity`` (a name, or a pattern with ``*``) or a ``team``: one of the two."""

    path: str
    perms: str
    identity: str | None = None
    team: str | None = None


@dataclasses.dataclass(frozen=True)
class QuotaUsage:
    """One quota of the caller's team and how much of it is in use."""

    #: "nodes", "data_bytes", "sessions", "watches" or "requests_per_second".
    resource: str
    used: int
    #: The limit; 0: unlimited.
    limit: int


@dataclasses.dataclass(frozen=True)
class WhoAmI:
    """What the server takes the caller for (``Cluster/WhoAmI``)."""

    #: From the client certificate, or the server's local identity.
    identity: str
    #: Whether the caller is an admin (sees and may change everything).
    admin: bool
    #: Empty for an admin or an identity no team names.
    team: str
    #: The tree path the caller sees as "/" ("/" for an admin; empty if unmapped).
    namespace_root: str
    #: The grants that apply to the caller, paths as it sees them.
    grants: list[Grant]
    #: The quotas of the caller's team and their use.
    usage: list[QuotaUsage]

    @classmethod
    def of(cls, r: Any) -> WhoAmI:
        """From a ``concord.v1.WhoAmIResponse``."""
        grants = []
        for g in r.grants:
            kind = g.WhichOneof("to")
            if kind is None:
                continue
            grants.append(Grant(g.path, g.perms, **{kind: getattr(g, kind)}))
        return cls(
            identity=r.identity,
            admin=r.admin,
            team=r.team,
            namespace_root=r.namespace_root,
            grants=grants,
            usage=[QuotaUsage(u.resource, u.used, u.limit) for u in r.usage],
        )


@dataclasses.dataclass(frozen=True)
class BackupInfo:
    """What a backup file ``save_snapshot`` wrote holds (the Rust SDK's ``BackupInfo``)."""

    #: The state is the one after every txn up to this zxid.
    zxid: int
    #: Nodes in the tree, the root included.
    node_count: int
    #: Sessions in the snapshot.
    session_count: int
    #: The server that took it.
    server_id: int
    #: Bytes of the snapshot (the file less its 45-byte header).
    snapshot_bytes: int
    #: The snapshot's crc32 (its last 4 bytes), which matched.
    crc32: int
