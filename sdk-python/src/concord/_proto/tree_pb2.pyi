from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERSISTENT: _ClassVar[CreateMode]
    EPHEMERAL: _ClassVar[CreateMode]
    PERSISTENT_SEQUENTIAL: _ClassVar[CreateMode]
    EPHEMERAL_SEQUENTIAL: _ClassVar[CreateMode]
    CONTAINER: _ClassVar[CreateMode]
    PERSISTENT_WITH_TTL: _ClassVar[CreateMode]
    PERSISTENT_SEQUENTIAL_WITH_TTL: _ClassVar[CreateMode]
PERSISTENT: CreateMode
EPHEMERAL: CreateMode
PERSISTENT_SEQUENTIAL: CreateMode
EPHEMERAL_SEQUENTIAL: CreateMode
CONTAINER: CreateMode
PERSISTENT_WITH_TTL: CreateMode
PERSISTENT_SEQUENTIAL_WITH_TTL: CreateMode

class CreateRequest(_message.Message):
    __slots__ = ("path", "data", "mode", "session_id", "ttl_ms", "request_id", "fence")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    mode: CreateMode
    session_id: int
    ttl_ms: int
    request_id: int
    fence: _common_pb2.Fence
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., mode: _Optional[_Union[CreateMode, str]] = ..., session_id: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., request_id: _Optional[int] = ..., fence: _Optional[_Union[_common_pb2.Fence, _Mapping]] = ...) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("header", "path", "stat")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    path: str
    stat: _common_pb2.Stat
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., path: _Optional[str] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("path", "min_zxid", "linearizable")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MIN_ZXID_FIELD_NUMBER: _ClassVar[int]
    LINEARIZABLE_FIELD_NUMBER: _ClassVar[int]
    path: str
    min_zxid: int
    linearizable: bool
    def __init__(self, path: _Optional[str] = ..., min_zxid: _Optional[int] = ..., linearizable: _Optional[bool] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("header", "data", "stat")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    data: bytes
    stat: _common_pb2.Stat
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class ExistsRequest(_message.Message):
    __slots__ = ("path", "min_zxid", "linearizable")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MIN_ZXID_FIELD_NUMBER: _ClassVar[int]
    LINEARIZABLE_FIELD_NUMBER: _ClassVar[int]
    path: str
    min_zxid: int
    linearizable: bool
    def __init__(self, path: _Optional[str] = ..., min_zxid: _Optional[int] = ..., linearizable: _Optional[bool] = ...) -> None: ...

class ExistsResponse(_message.Message):
    __slots__ = ("header", "exists", "stat")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    exists: bool
    stat: _common_pb2.Stat
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., exists: _Optional[bool] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class SetRequest(_message.Message):
    __slots__ = ("path", "data", "version", "session_id", "request_id", "fence")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    version: int
    session_id: int
    request_id: int
    fence: _common_pb2.Fence
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., version: _Optional[int] = ..., session_id: _Optional[int] = ..., request_id: _Optional[int] = ..., fence: _Optional[_Union[_common_pb2.Fence, _Mapping]] = ...) -> None: ...

class SetResponse(_message.Message):
    __slots__ = ("header", "stat")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    stat: _common_pb2.Stat
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("path", "version", "session_id", "request_id", "fence")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    path: str
    version: int
    session_id: int
    request_id: int
    fence: _common_pb2.Fence
    def __init__(self, path: _Optional[str] = ..., version: _Optional[int] = ..., session_id: _Optional[int] = ..., request_id: _Optional[int] = ..., fence: _Optional[_Union[_common_pb2.Fence, _Mapping]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ...) -> None: ...

class ChildrenRequest(_message.Message):
    __slots__ = ("path", "with_stats", "page_size", "page_token", "min_zxid", "linearizable")
    PATH_FIELD_NUMBER: _ClassVar[int]
    WITH_STATS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MIN_ZXID_FIELD_NUMBER: _ClassVar[int]
    LINEARIZABLE_FIELD_NUMBER: _ClassVar[int]
    path: str
    with_stats: bool
    page_size: int
    page_token: str
    min_zxid: int
    linearizable: bool
    def __init__(self, path: _Optional[str] = ..., with_stats: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., min_zxid: _Optional[int] = ..., linearizable: _Optional[bool] = ...) -> None: ...

class Child(_message.Message):
    __slots__ = ("name", "stat")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    name: str
    stat: _common_pb2.Stat
    def __init__(self, name: _Optional[str] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class ChildrenResponse(_message.Message):
    __slots__ = ("header", "children", "next_page_token", "stat")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    children: _containers.RepeatedCompositeFieldContainer[Child]
    next_page_token: str
    stat: _common_pb2.Stat
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., children: _Optional[_Iterable[_Union[Child, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class Op(_message.Message):
    __slots__ = ("create", "set", "delete", "check")
    CREATE_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    create: CreateOp
    set: SetOp
    delete: DeleteOp
    check: CheckOp
    def __init__(self, create: _Optional[_Union[CreateOp, _Mapping]] = ..., set: _Optional[_Union[SetOp, _Mapping]] = ..., delete: _Optional[_Union[DeleteOp, _Mapping]] = ..., check: _Optional[_Union[CheckOp, _Mapping]] = ...) -> None: ...

class CreateOp(_message.Message):
    __slots__ = ("path", "data", "mode", "ttl_ms")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    mode: CreateMode
    ttl_ms: int
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., mode: _Optional[_Union[CreateMode, str]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class SetOp(_message.Message):
    __slots__ = ("path", "data", "version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    version: int
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., version: _Optional[int] = ...) -> None: ...

class DeleteOp(_message.Message):
    __slots__ = ("path", "version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    version: int
    def __init__(self, path: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class CheckOp(_message.Message):
    __slots__ = ("path", "version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    version: int
    def __init__(self, path: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class MultiRequest(_message.Message):
    __slots__ = ("ops", "session_id", "request_id", "fence")
    OPS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[Op]
    session_id: int
    request_id: int
    fence: _common_pb2.Fence
    def __init__(self, ops: _Optional[_Iterable[_Union[Op, _Mapping]]] = ..., session_id: _Optional[int] = ..., request_id: _Optional[int] = ..., fence: _Optional[_Union[_common_pb2.Fence, _Mapping]] = ...) -> None: ...

class OpResult(_message.Message):
    __slots__ = ("create", "set", "delete", "check")
    CREATE_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    create: CreateResult
    set: SetResult
    delete: DeleteResult
    check: CheckResult
    def __init__(self, create: _Optional[_Union[CreateResult, _Mapping]] = ..., set: _Optional[_Union[SetResult, _Mapping]] = ..., delete: _Optional[_Union[DeleteResult, _Mapping]] = ..., check: _Optional[_Union[CheckResult, _Mapping]] = ...) -> None: ...

class CreateResult(_message.Message):
    __slots__ = ("path", "stat")
    PATH_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    path: str
    stat: _common_pb2.Stat
    def __init__(self, path: _Optional[str] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class SetResult(_message.Message):
    __slots__ = ("stat",)
    STAT_FIELD_NUMBER: _ClassVar[int]
    stat: _common_pb2.Stat
    def __init__(self, stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class DeleteResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MultiResponse(_message.Message):
    __slots__ = ("header", "results")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    results: _containers.RepeatedCompositeFieldContainer[OpResult]
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., results: _Optional[_Iterable[_Union[OpResult, _Mapping]]] = ...) -> None: ...

class SyncRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class SyncResponse(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ...) -> None: ...
