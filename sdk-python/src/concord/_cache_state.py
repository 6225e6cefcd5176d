"""The pure core of the caches (the Rust SDK's ``cache/state.rs``): a map of nodes
fed with watch messages, returning the CacheEvents each causes. No IO, no clock.

::

    SnapshotNode  -> pending snapshot (filtered by scope)
    SnapshotDone  -> diff(nodes, pending): DELETED..., CREATED/CHANGED... (+ INITIALIZED once)
    Event         -> CREATED / CHANGED / DELETED (CHILDREN_CHANGED: the stat only, silently)
    Progress      -> zxid only

A first snapshot is diffed against an empty map (every node is CREATED); a rebuild
after a watch that could not be resumed is diffed against what the cache held, so
listeners see exactly the differences. Nothing outside the scope is kept.
"""

from __future__ import annotations

import enum

from .events import CacheEvent, CacheEventType, EventKind, Node, WatchEvent


class ScopeKind(enum.Enum):
    #: The root node only (DataWatch).
    NODE = "node"
    #: The root's direct children, not the root (ChildrenWatch).
    CHILDREN = "children"
    #: The root and everything below it (Cache).
    TREE = "tree"


def parent(path: str) -> str | None:
    """The parent of an absolute path (None for ``/``)."""
    if path == "/":
        return None
    i = path.rfind("/")
    if i < 0:
        return None
    return "/" if i == 0 else path[:i]


def is_below(path: str, root: str) -> bool:
    """True when ``path`` is strictly below ``root``."""
    if root == "/":
        return path != "/" and path.startswith("/")
    return len(path) > len(root) and path.startswith(root) and path[len(root)] == "/"


class Scope:
    def __init__(self, kind: ScopeKind, root: str) -> None:
        self.kind = kind
        self.root = root

    @property
    def recursive(self) -> bool:
        """Whether the watch must be recursive to see what the scope holds."""
        return self.kind is not ScopeKind.NODE

    def contains(self, path: str) -> bool:
        if self.kind is ScopeKind.NODE:
            return path == self.root
        if self.kind is ScopeKind.CHILDREN:
            return path != self.root and parent(path) == self.root
        return path == self.root or is_below(path, self.root)


def _data_differs(a: Node, b: Node) -> bool:
    """The data changed, or the node's identity (a delete and re-create)."""
    return (
        a.data != b.data
        or a.stat.mzxid != b.stat.mzxid
        or a.stat.czxid != b.stat.czxid
        or a.stat.version != b.stat.version
    )


def diff(old: dict[str, Node], new: dict[str, Node]) -> list[CacheEvent]:
    """The events that turn ``old`` into ``new``: deletions first (children before
    parents), then creations and changes in path order. A node whose only difference
    is its children's bookkeeping changes silently."""
    events = [
        CacheEvent(CacheEventType.DELETED, node)
        for path, node in sorted(old.items(), reverse=True)
        if path not in new
    ]
    for path, node in sorted(new.items()):
        before = old.get(path)
        if before is None:
            events.append(CacheEvent(CacheEventType.CREATED, node))
        elif _data_differs(before, node):
            events.append(CacheEvent(CacheEventType.CHANGED, node, before))
    return events


class CacheState:
    """The nodes of a cache and the zxid they reflect."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        #: The cached nodes by full path.
        self.nodes: dict[str, Node] = {}
        #: The zxid the nodes reflect (0 before the first snapshot is done).
        self.zxid = 0
        #: The nodes of a snapshot being received; applied whole at SnapshotDone.
        self._pending: dict[str, Node] = {}
        #: A snapshot is being received: Progress must not move ``zxid`` until it is done.
        self._snapshot_pending = False
        #: The first snapshot is done (INITIALIZED was emitted).
        self.initialized = False

    def begin_snapshot(self) -> None:
        """A new watch with an initial snapshot starts: forget any half-received one."""
        self._pending = {}
        self._snapshot_pending = True

    def on_snapshot_node(self, node: Node) -> list[CacheEvent]:
        if self.scope.contains(node.path):
            self._pending[node.path] = node
        return []

    def on_snapshot_done(self, zxid: int) -> list[CacheEvent]:
        """Replaces the nodes with the received snapshot; the differences as events."""
        self._snapshot_pending = False
        fresh, self._pending = self._pending, {}
        events = diff(self.nodes, fresh)
        self.nodes = fresh
        self.zxid = zxid
        if not self.initialized:
            self.initialized = True
            events.append(CacheEvent(CacheEventType.INITIALIZED))
        return events

    def on_progress(self, zxid: int) -> list[CacheEvent]:
        if not self._snapshot_pending:
            self.zxid = max(self.zxid, zxid)
        return []

    def on_event(self, event: WatchEvent) -> list[CacheEvent]:
        """Applies one event; the cache event it causes, if any."""
        self.zxid = max(self.zxid, event.zxid)
        if not self.scope.contains(event.path):
            return []
        node = Node(event.path, event.data, event.stat)
        if event.kind in (EventKind.CREATED, EventKind.DATA_CHANGED):
            old = self.nodes.get(node.path)
            self.nodes[node.path] = node
            if old is None:
                return [CacheEvent(CacheEventType.CREATED, node)]
            return [CacheEvent(CacheEventType.CHANGED, node, old)]
        if event.kind is EventKind.DELETED:
            gone = self.nodes.pop(node.path, None)
            return [] if gone is None else [CacheEvent(CacheEventType.DELETED, gone)]
        if event.kind is EventKind.CHILDREN_CHANGED:
            cached = self.nodes.get(node.path)
            if cached is not None:
                self.nodes[node.path] = Node(cached.path, cached.data, node.stat)
        return []

    def sorted_nodes(self) -> list[Node]:
        """The cached nodes in path order (parents before children)."""
        return [self.nodes[p] for p in sorted(self.nodes)]
