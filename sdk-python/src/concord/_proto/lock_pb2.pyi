from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AcquireRequest(_message.Message):
    __slots__ = ("name", "session_id", "timeout_ms", "owner_id", "permits")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    name: str
    session_id: int
    timeout_ms: int
    owner_id: str
    permits: int
    def __init__(self, name: _Optional[str] = ..., session_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., owner_id: _Optional[str] = ..., permits: _Optional[int] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("header", "key", "token")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    key: str
    token: int
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., key: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("key", "token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ...) -> None: ...

class HolderRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class LockEntry(_message.Message):
    __slots__ = ("key", "token", "session_id", "owner_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    session_id: int
    owner_id: str
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ..., session_id: _Optional[int] = ..., owner_id: _Optional[str] = ...) -> None: ...

class HolderResponse(_message.Message):
    __slots__ = ("header", "holders")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    holders: _containers.RepeatedCompositeFieldContainer[LockEntry]
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., holders: _Optional[_Iterable[_Union[LockEntry, _Mapping]]] = ...) -> None: ...

class WaitersRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WaitersResponse(_message.Message):
    __slots__ = ("header", "entries")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    entries: _containers.RepeatedCompositeFieldContainer[LockEntry]
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[LockEntry, _Mapping]]] = ...) -> None: ...

class ValidateRequest(_message.Message):
    __slots__ = ("key", "token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class ValidateResponse(_message.Message):
    __slots__ = ("header", "valid")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    VALID_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.ResponseHeader
    valid: bool
    def __init__(self, header: _Optional[_Union[_common_pb2.ResponseHeader, _Mapping]] = ..., valid: _Optional[bool] = ...) -> None: ...
