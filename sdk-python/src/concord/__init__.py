"""Concord's Python SDK.

``concord.Client`` is the blocking client; ``concord.aio.Client`` the asyncio one.
Both are one core (``concord.aio``): the sync client drives it on a private
event-loop thread. Names and shapes follow kazoo's.
"""

from .errors import (
    BadArgumentsError,
    BadVersionError,
    ConcordError,
    ConnectionLossError,
    ErrorCode,
    FencedError,
    LeaderHint,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    PermissionDeniedError,
    QuotaExceededError,
    RolledBackError,
    SessionExpiredError,
    TimeoutError,
)
from ._recipes_sync import (
    Election,
    LatchEvent,
    Leadership,
    LeaderLatch,
    LeaderSelector,
    Lease,
    Lock,
    Participant,
    RecipeState,
    Semaphore,
    SemaphoreMutex,
)
from .events import CacheEvent, CacheEventType, EventKind, Node, WatchEvent
from .sync import Cache, ChildrenCache, Client, NodeCache, Transaction, Watch
from .types import TLS, Fence, Retry, Stat, State

__all__ = [
    "BadArgumentsError",
    "BadVersionError",
    "Cache",
    "CacheEvent",
    "CacheEventType",
    "ChildrenCache",
    "Client",
    "ConcordError",
    "ConnectionLossError",
    "Election",
    "ErrorCode",
    "EventKind",
    "Fence",
    "FencedError",
    "LatchEvent",
    "LeaderLatch",
    "LeaderSelector",
    "Leadership",
    "LeaderHint",
    "Lease",
    "Lock",
    "NodeCache",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "Node",
    "NodeExistsError",
    "NotEmptyError",
    "Participant",
    "PermissionDeniedError",
    "QuotaExceededError",
    "RecipeState",
    "Retry",
    "RolledBackError",
    "Semaphore",
    "SemaphoreMutex",
    "SessionExpiredError",
    "Stat",
    "State",
    "TLS",
    "TimeoutError",
    "Transaction",
    "Watch",
    "WatchEvent",
]
