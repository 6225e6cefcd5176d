from . import access_pb2 as _access_pb2
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    LOOKING: _ClassVar[Role]
    LEADER: _ClassVar[Role]
    FOLLOWER: _ClassVar[Role]
    OBSERVER: _ClassVar[Role]
ROLE_UNSPECIFIED: Role
LOOKING: Role
LEADER: Role
FOLLOWER: Role
OBSERVER: Role

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("header", "server_id", "role", "zxid", "commit_zxid", "epoch", "node_count", "session_count", "watch_count", "ensemble_size", "version", "oldest_resumable_zxid", "watch_history_oldest_zxid", "queue_wakeups", "leader_id", "leader_serving", "zookeeper_addr")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ZXID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_ZXID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    WATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OLDEST_RESUMABLE_ZXID_FIELD_NUMBER: _ClassVar[int]
    WATCH_HISTORY_OLDEST_ZXID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAKEUPS_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_SERVING_FIELD_NUMBER: _ClassVar[int]
    ZOOKEEPER_ADDR_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    server_id: int
    role: Role
    zxid: int
    commit_zxid: int
    epoch: int
    node_count: int
    session_count: int
    watch_count: int
    ensemble_size: int
    version: str
    oldest_resumable_zxid: int
    watch_history_oldest_zxid: int
    queue_wakeups: int
    leader_id: int
    leader_serving: bool
    zookeeper_addr: str
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., server_id: _Optional[int] = ..., role: _Optional[_Union[Role, str]] = ..., zxid: _Optional[int] = ..., commit_zxid: _Optional[int] = ..., epoch: _Optional[int] = ..., node_count: _Optional[int] = ..., session_count: _Optional[int] = ..., watch_count: _Optional[int] = ..., ensemble_size: _Optional[int] = ..., version: _Optional[str] = ..., oldest_resumable_zxid: _Optional[int] = ..., watch_history_oldest_zxid: _Optional[int] = ..., queue_wakeups: _Optional[int] = ..., leader_id: _Optional[int] = ..., leader_serving: _Optional[bool] = ..., zookeeper_addr: _Optional[str] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("header", "identity", "admin", "team", "namespace_root", "grants", "usage")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_ROOT_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    identity: str
    admin: bool
    team: str
    namespace_root: str
    grants: _containers.RepeatedCompositeFieldContainer[_access_pb2.Grant]
    usage: _containers.RepeatedCompositeFieldContainer[QuotaUsage]
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., identity: _Optional[str] = ..., admin: _Optional[bool] = ..., team: _Optional[str] = ..., namespace_root: _Optional[str] = ..., grants: _Optional[_Iterable[_Union[_access_pb2.Grant, _Mapping]]] = ..., usage: _Optional[_Iterable[_Union[QuotaUsage, _Mapping]]] = ...) -> None: ...

class QuotaUsage(_message.Message):
    __slots__ = ("resource", "used", "limit")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    resource: str
    used: int
    limit: int
    def __init__(self, resource: _Optional[str] = ..., used: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("min_zxid", "linearizable")
    MIN_ZXID_FIELD_NUMBER: _ClassVar[int]
    LINEARIZABLE_FIELD_NUMBER: _ClassVar[int]
    min_zxid: int
    linearizable: bool
    def __init__(self, min_zxid: _Optional[int] = ..., linearizable: _Optional[bool] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("info", "data")
    INFO_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    info: SnapshotInfo
    data: bytes
    def __init__(self, info: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("header", "zxid", "node_count", "session_count", "format", "server_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ZXID_FIELD_NUMBER: _ClassVar[int]
    NODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SESSION_COUNT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    zxid: int
    node_count: int
    session_count: int
    format: int
    server_id: int
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., zxid: _Optional[int] = ..., node_count: _Optional[int] = ..., session_count: _Optional[int] = ..., format: _Optional[int] = ..., server_id: _Optional[int] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ("header", "server_id", "leader_id", "members")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    server_id: int
    leader_id: int
    members: _containers.RepeatedCompositeFieldContainer[MemberStatus]
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., server_id: _Optional[int] = ..., leader_id: _Optional[int] = ..., members: _Optional[_Iterable[_Union[MemberStatus, _Mapping]]] = ...) -> None: ...

class MemberStatus(_message.Message):
    __slots__ = ("id", "client_addr", "peer_addr", "voter", "role", "zxid", "lag_txns", "known", "heard_ms_ago", "zookeeper_addr")
    ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ZXID_FIELD_NUMBER: _ClassVar[int]
    LAG_TXNS_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    HEARD_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    ZOOKEEPER_ADDR_FIELD_NUMBER: _ClassVar[int]
    id: int
    client_addr: str
    peer_addr: str
    voter: bool
    role: Role
    zxid: int
    lag_txns: int
    known: bool
    heard_ms_ago: int
    zookeeper_addr: str
    def __init__(self, id: _Optional[int] = ..., client_addr: _Optional[str] = ..., peer_addr: _Optional[str] = ..., voter: _Optional[bool] = ..., role: _Optional[_Union[Role, str]] = ..., zxid: _Optional[int] = ..., lag_txns: _Optional[int] = ..., known: _Optional[bool] = ..., heard_ms_ago: _Optional[int] = ..., zookeeper_addr: _Optional[str] = ...) -> None: ...
