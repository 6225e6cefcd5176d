from . import common_pb2 as _common_pb2
from . import tree_pb2 as _tree_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    CREATED: _ClassVar[EventKind]
    DELETED: _ClassVar[EventKind]
    DATA_CHANGED: _ClassVar[EventKind]
    CHILDREN_CHANGED: _ClassVar[EventKind]
EVENT_KIND_UNSPECIFIED: EventKind
CREATED: EventKind
DELETED: EventKind
DATA_CHANGED: EventKind
CHILDREN_CHANGED: EventKind

class WatchRequest(_message.Message):
    __slots__ = ("path", "recursive", "kinds", "once", "with_data", "start_zxid", "initial_snapshot", "progress_interval_ms")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    ONCE_FIELD_NUMBER: _ClassVar[int]
    WITH_DATA_FIELD_NUMBER: _ClassVar[int]
    START_ZXID_FIELD_NUMBER: _ClassVar[int]
    INITIAL_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    kinds: _containers.RepeatedScalarFieldContainer[EventKind]
    once: bool
    with_data: bool
    start_zxid: int
    initial_snapshot: bool
    progress_interval_ms: int
    def __init__(self, path: _Optional[str] = ..., recursive: _Optional[bool] = ..., kinds: _Optional[_Iterable[_Union[EventKind, str]]] = ..., once: _Optional[bool] = ..., with_data: _Optional[bool] = ..., start_zxid: _Optional[int] = ..., initial_snapshot: _Optional[bool] = ..., progress_interval_ms: _Optional[int] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("zxid", "kind", "path", "data", "prev_data", "stat")
    ZXID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PREV_DATA_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    zxid: int
    kind: EventKind
    path: str
    data: bytes
    prev_data: bytes
    stat: _common_pb2.Stat
    def __init__(self, zxid: _Optional[int] = ..., kind: _Optional[_Union[EventKind, str]] = ..., path: _Optional[str] = ..., data: _Optional[bytes] = ..., prev_data: _Optional[bytes] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("zxid",)
    ZXID_FIELD_NUMBER: _ClassVar[int]
    zxid: int
    def __init__(self, zxid: _Optional[int] = ...) -> None: ...

class SnapshotNode(_message.Message):
    __slots__ = ("path", "data", "stat")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    stat: _common_pb2.Stat
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., stat: _Optional[_Union[_common_pb2.Stat, _Mapping]] = ...) -> None: ...

class SnapshotDone(_message.Message):
    __slots__ = ("zxid",)
    ZXID_FIELD_NUMBER: _ClassVar[int]
    zxid: int
    def __init__(self, zxid: _Optional[int] = ...) -> None: ...

class WatchStarted(_message.Message):
    __slots__ = ("zxid", "watch_id")
    ZXID_FIELD_NUMBER: _ClassVar[int]
    WATCH_ID_FIELD_NUMBER: _ClassVar[int]
    zxid: int
    watch_id: int
    def __init__(self, zxid: _Optional[int] = ..., watch_id: _Optional[int] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("started", "event", "progress", "snapshot_node", "snapshot_done")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_NODE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_DONE_FIELD_NUMBER: _ClassVar[int]
    started: WatchStarted
    event: WatchEvent
    progress: Progress
    snapshot_node: SnapshotNode
    snapshot_done: SnapshotDone
    def __init__(self, started: _Optional[_Union[WatchStarted, _Mapping]] = ..., event: _Optional[_Union[WatchEvent, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., snapshot_node: _Optional[_Union[SnapshotNode, _Mapping]] = ..., snapshot_done: _Optional[_Union[SnapshotDone, _Mapping]] = ...) -> None: ...
