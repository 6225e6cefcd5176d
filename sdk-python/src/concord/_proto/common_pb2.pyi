from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_UNSPECIFIED: _ClassVar[ErrorCode]
    NODE_EXISTS: _ClassVar[ErrorCode]
    NO_NODE: _ClassVar[ErrorCode]
    BAD_VERSION: _ClassVar[ErrorCode]
    NOT_EMPTY: _ClassVar[ErrorCode]
    NO_CHILDREN_FOR_EPHEMERALS: _ClassVar[ErrorCode]
    BAD_PATH: _ClassVar[ErrorCode]
    DATA_TOO_LARGE: _ClassVar[ErrorCode]
    SESSION_EXPIRED: _ClassVar[ErrorCode]
    FENCED: _ClassVar[ErrorCode]
    NOT_LEADER: _ClassVar[ErrorCode]
    QUOTA_EXCEEDED: _ClassVar[ErrorCode]
    PERMISSION_DENIED: _ClassVar[ErrorCode]
    BAD_ARGUMENTS: _ClassVar[ErrorCode]
    ZXID_COMPACTED: _ClassVar[ErrorCode]
    SLOW_CONSUMER: _ClassVar[ErrorCode]
    TIMEOUT: _ClassVar[ErrorCode]
    UNAVAILABLE: _ClassVar[ErrorCode]
    UNIMPLEMENTED: _ClassVar[ErrorCode]
    INTERNAL: _ClassVar[ErrorCode]
    LOCK_HELD: _ClassVar[ErrorCode]
    BAD_STATE: _ClassVar[ErrorCode]
    BAD_MESSAGE: _ClassVar[ErrorCode]
    MESSAGE_TOO_LARGE: _ClassVar[ErrorCode]
    RESPONSE_TOO_LARGE: _ClassVar[ErrorCode]
    OUTCOME_UNKNOWN: _ClassVar[ErrorCode]
ERROR_CODE_UNSPECIFIED: ErrorCode
NODE_EXISTS: ErrorCode
NO_NODE: ErrorCode
BAD_VERSION: ErrorCode
NOT_EMPTY: ErrorCode
NO_CHILDREN_FOR_EPHEMERALS: ErrorCode
BAD_PATH: ErrorCode
DATA_TOO_LARGE: ErrorCode
SESSION_EXPIRED: ErrorCode
FENCED: ErrorCode
NOT_LEADER: ErrorCode
QUOTA_EXCEEDED: ErrorCode
PERMISSION_DENIED: ErrorCode
BAD_ARGUMENTS: ErrorCode
ZXID_COMPACTED: ErrorCode
SLOW_CONSUMER: ErrorCode
TIMEOUT: ErrorCode
UNAVAILABLE: ErrorCode
UNIMPLEMENTED: ErrorCode
INTERNAL: ErrorCode
LOCK_HELD: ErrorCode
BAD_STATE: ErrorCode
BAD_MESSAGE: ErrorCode
MESSAGE_TOO_LARGE: ErrorCode
RESPONSE_TOO_LARGE: ErrorCode
OUTCOME_UNKNOWN: ErrorCode

class ResponseHeader(_message.Message):
    __slots__ = ("zxid", "server_id")
    ZXID_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    zxid: int
    server_id: int
    def __init__(self, zxid: _Optional[int] = ..., server_id: _Optional[int] = ...) -> None: ...

class Stat(_message.Message):
    __slots__ = ("czxid", "mzxid", "pzxid", "ctime_ms", "mtime_ms", "version", "cversion", "aversion", "ephemeral_owner", "data_length", "num_children")
    CZXID_FIELD_NUMBER: _ClassVar[int]
    MZXID_FIELD_NUMBER: _ClassVar[int]
    PZXID_FIELD_NUMBER: _ClassVar[int]
    CTIME_MS_FIELD_NUMBER: _ClassVar[int]
    MTIME_MS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CVERSION_FIELD_NUMBER: _ClassVar[int]
    AVERSION_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_OWNER_FIELD_NUMBER: _ClassVar[int]
    DATA_LENGTH_FIELD_NUMBER: _ClassVar[int]
    NUM_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    czxid: int
    mzxid: int
    pzxid: int
    ctime_ms: int
    mtime_ms: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int
    def __init__(self, czxid: _Optional[int] = ..., mzxid: _Optional[int] = ..., pzxid: _Optional[int] = ..., ctime_ms: _Optional[int] = ..., mtime_ms: _Optional[int] = ..., version: _Optional[int] = ..., cversion: _Optional[int] = ..., aversion: _Optional[int] = ..., ephemeral_owner: _Optional[int] = ..., data_length: _Optional[int] = ..., num_children: _Optional[int] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ("key", "token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...
