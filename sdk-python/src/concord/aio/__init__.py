"""The asyncio client: ``concord.aio.Client`` (the SDK's one core, on grpc.aio)."""

from .cache import Cache, ChildrenWatch, DataWatch
from .client import Client, Transaction
from .watch import Watch

__all__ = ["Cache", "ChildrenWatch", "Client", "DataWatch", "Transaction", "Watch"]
