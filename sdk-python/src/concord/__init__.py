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
)
from .sync import Client, Transaction
from .types import TLS, Fence, Retry, Stat, State

__all__ = [
    "Semaphore",
    "RecipeState",
    "Participant",
    "Lock",
    "Lease",
    "Leadership",
    "LeaderSelector",
    "LeaderLatch",
    "LatchEvent",
    "Election",
    "BadArgumentsError",
    "BadVersionError",
    "Client",
    "ConcordError",
    "ConnectionLossError",
    "ErrorCode",
    "Fence",
    "FencedError",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "PermissionDeniedError",
    "QuotaExceededError",
    "Retry",
    "RolledBackError",
    "SessionExpiredError",
    "Stat",
    "State",
    "TLS",
    "TimeoutError",
    "Transaction",
]
