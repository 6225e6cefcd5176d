"""The asyncio client: ``concord.aio.Client`` (the SDK's one core, on grpc.aio)."""

from .client import Client, Transaction

__all__ = ["Client", "Transaction"]
