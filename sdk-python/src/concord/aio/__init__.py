"""The asyncio client: ``concord.aio.Client`` (the SDK's one core, on grpc.aio)."""

from .cache import Cache, ChildrenCache, ChildrenWatch, DataWatch, NodeCache
from .client import Client, Transaction
from .recipes import (
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
from .observe import LeaderChange, LeaderObserver
from .watch import Watch

__all__ = [
    "Cache",
    "ChildrenCache",
    "ChildrenWatch",
    "Client",
    "DataWatch",
    "Election",
    "LatchEvent",
    "LeaderChange",
    "LeaderLatch",
    "LeaderObserver",
    "LeaderSelector",
    "Leadership",
    "Lease",
    "Lock",
    "NodeCache",
    "Participant",
    "RecipeState",
    "Semaphore",
    "SemaphoreMutex",
    "Transaction",
    "Watch",
]
