"""What watches and caches deliver: ``WatchEvent`` (with its ``EventKind``), ``Node``
and ``CacheEvent``. Converted from the generated messages here, once; no IO."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from .types import Stat


class EventKind(enum.IntEnum):
    """What changed (the wire's ``EventKind``)."""

    #: The node was created.
    CREATED = 1
    #: The node was deleted.
    DELETED = 2
    #: The node's data was set.
    DATA_CHANGED = 3
    #: A child of the node was created or deleted (the event's path is the parent).
    CHILDREN_CHANGED = 4


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One change, as a watch delivers it. ``data`` is the node's data after the
    change (empty for DELETED), ``prev_data`` before it (DATA_CHANGED and DELETED);
    both only with ``with_data``. ``stat`` is the node's Stat after the change
    (before it, for DELETED)."""

    kind: EventKind
    path: str
    zxid: int
    data: bytes = b""
    prev_data: bytes = b""
    stat: Stat = dataclasses.field(default_factory=Stat)

    @classmethod
    def of(cls, event: Any) -> WatchEvent:
        """From a ``concord.v1.WatchEvent`` message."""
        try:
            kind = EventKind(event.kind)
        except ValueError:
            kind = EventKind.DATA_CHANGED  # a kind newer than this SDK: treat as a change
        return cls(
            kind=kind,
            path=str(event.path),
            zxid=int(event.zxid),
            data=bytes(event.data),
            prev_data=bytes(event.prev_data),
            stat=Stat.of(event.stat),
        )


@dataclasses.dataclass(frozen=True)
class Node:
    """A node as a cache holds it."""

    path: str
    data: bytes
    stat: Stat


class CacheEventType(str, enum.Enum):
    """What a cache's change was (Curator's CuratorCacheListener types)."""

    #: A node entered the cache (created, or in the initial snapshot).
    CREATED = "CREATED"
    #: A node's data changed (or it was deleted and re-created during a rebuild).
    CHANGED = "CHANGED"
    #: A node left the cache.
    DELETED = "DELETED"
    #: The initial snapshot is in the cache (sent once, after its CREATED events).
    INITIALIZED = "INITIALIZED"
    #: This listener fell more than ``LISTENER_BACKLOG`` (1024) events behind and
    #: ``missed`` of them were dropped for it; the cache itself is complete (read it
    #: again). Events go on after the gap.
    LAGGED = "LAGGED"


@dataclasses.dataclass(frozen=True)
class CacheEvent:
    """A change a cache made: ``node`` is the node now (for DELETED, as last cached;
    None for INITIALIZED and LAGGED); ``old`` the node before a CHANGED; ``missed``
    how many events a LAGGED listener lost. ``type`` compares equal to kazoo's
    EventType strings ("CREATED", "CHANGED", "DELETED")."""

    type: CacheEventType
    node: Node | None = None
    old: Node | None = None
    missed: int = 0

    @property
    def path(self) -> str | None:
        """The node's path (kazoo's ``WatchedEvent.path``), None without a node."""
        return self.node.path if self.node is not None else None
