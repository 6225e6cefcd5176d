"""The asyncio client: ``concord.aio.Client`` (the SDK's one core, on grpc.aio)."""

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
)

__all__ = [
    "Client",
    "Election",
    "LatchEvent",
    "LeaderLatch",
    "LeaderSelector",
    "Leadership",
    "Lease",
    "Lock",
    "Participant",
    "RecipeState",
    "Semaphore",
    "Transaction",
]
