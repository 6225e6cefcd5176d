from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CampaignRequest(_message.Message):
    __slots__ = ("election", "session_id", "participant_id", "value", "timeout_ms")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    election: str
    session_id: int
    participant_id: str
    value: bytes
    timeout_ms: int
    def __init__(self, election: _Optional[str] = ..., session_id: _Optional[int] = ..., participant_id: _Optional[str] = ..., value: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class LeaderInfo(_message.Message):
    __slots__ = ("election", "key", "term", "participant_id", "value", "session_id")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANT_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    election: str
    key: str
    term: int
    participant_id: str
    value: bytes
    session_id: int
    def __init__(self, election: _Optional[str] = ..., key: _Optional[str] = ..., term: _Optional[int] = ..., participant_id: _Optional[str] = ..., value: _Optional[bytes] = ..., session_id: _Optional[int] = ...) -> None: ...

class CampaignResponse(_message.Message):
    __slots__ = ("header", "leader")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    leader: LeaderInfo
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., leader: _Optional[_Union[LeaderInfo, _Mapping]] = ...) -> None: ...

class ProclaimRequest(_message.Message):
    __slots__ = ("key", "term", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    term: int
    value: bytes
    def __init__(self, key: _Optional[str] = ..., term: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class ProclaimResponse(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ...) -> None: ...

class ResignRequest(_message.Message):
    __slots__ = ("key", "term")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    key: str
    term: int
    def __init__(self, key: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class ResignResponse(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ...) -> None: ...

class LeaderRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class LeaderResponse(_message.Message):
    __slots__ = ("header", "leader", "progress")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    leader: LeaderInfo
    progress: bool
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., leader: _Optional[_Union[LeaderInfo, _Mapping]] = ..., progress: _Optional[bool] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("election", "progress_interval_ms")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    election: str
    progress_interval_ms: int
    def __init__(self, election: _Optional[str] = ..., progress_interval_ms: _Optional[int] = ...) -> None: ...

class ParticipantsRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class ParticipantsResponse(_message.Message):
    __slots__ = ("header", "participants")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    participants: _containers.RepeatedCompositeFieldContainer[LeaderInfo]
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., participants: _Optional[_Iterable[_Union[LeaderInfo, _Mapping]]] = ...) -> None: ...
