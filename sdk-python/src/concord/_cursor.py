"""The watch cursor: what a watch has delivered, so that a resumed stream neither
loses nor repeats an event. Pure bookkeeping, no IO (the Rust SDK's ``watch.rs``
Cursor, line for line).

Several events may share one zxid (a multi, or a session close deleting several
ephemerals), and a stream can break between them. The cursor counts the events
delivered at the newest zxid ``z``; while that count is not known complete (no newer
event and no Progress came after them), a resume starts from ``z - 1`` and drops the
first ``count`` replayed events at ``z``, which the server replays in the same order.
Otherwise it resumes from ``z``. Progress and SnapshotDone advance ``z``.
"""

from __future__ import annotations

from .errors import ErrorCode, make_error

#: Message kinds, as the ``msg`` oneof of ``WatchResponse`` names them.
STARTED = "started"
EVENT = "event"
PROGRESS = "progress"
SNAPSHOT_NODE = "snapshot_node"
SNAPSHOT_DONE = "snapshot_done"


class Cursor:
    """The resume point of a watch and the duplicates to drop after a resume."""

    def __init__(self, start_zxid: int | None, initial_snapshot: bool) -> None:
        #: The newest zxid delivered or known complete; the resume point.
        self.last_zxid: int | None = start_zxid
        #: Events delivered at ``last_zxid``; while non-zero its txn may have more.
        self.delivered_at_last = 0
        #: Replayed events at ``last_zxid`` still to drop after a resume from ``last_zxid - 1``.
        self.skip = 0
        #: An initial snapshot was asked for and is not done yet.
        self.snapshot_pending = initial_snapshot
        #: Events delivered in all (for ``once``).
        self.events_delivered = 0

    def accept(self, kind: str, zxid: int) -> bool:
        """Records a message of ``kind`` at ``zxid``; False for a replayed duplicate,
        which must not be delivered."""
        if kind == STARTED:
            if self.last_zxid is None and not self.snapshot_pending:
                self.last_zxid = zxid
            return True
        if kind == EVENT:
            return self._accept_event(zxid)
        if kind == PROGRESS:
            if not self.snapshot_pending and (self.last_zxid is None or zxid >= self.last_zxid):
                self._complete_at(zxid)
            return True
        if kind == SNAPSHOT_DONE:
            self.snapshot_pending = False
            self._complete_at(zxid)
            return True
        return True  # SNAPSHOT_NODE, or a kind this SDK does not know

    def _accept_event(self, zxid: int) -> bool:
        last = self.last_zxid
        if last is not None and (zxid < last or (zxid == last and self.delivered_at_last == 0)):
            # Older, or at a zxid known complete: a replayed duplicate.
            return False
        if last is not None and zxid == last:
            if self.skip > 0:
                self.skip -= 1
                return False
            self.delivered_at_last += 1
        else:
            self.last_zxid = zxid
            self.delivered_at_last = 1
            self.skip = 0
        self.events_delivered += 1
        return True

    def _complete_at(self, zxid: int) -> None:
        """Everything up to ``zxid`` has been delivered."""
        self.last_zxid = zxid
        self.delivered_at_last = 0
        self.skip = 0

    def resume_from(self) -> int | None:
        """The ``start_zxid`` of a resumed stream (None: as first asked), arming the
        skip of the events at the newest zxid that were delivered already. Raises
        ConnectionLossError during an initial snapshot (it would be delivered twice)."""
        if self.snapshot_pending:
            raise make_error(
                ErrorCode.UNAVAILABLE,
                "the watch broke during its initial snapshot; start a new watch",
            )
        last = self.last_zxid
        if last is not None and self.delivered_at_last > 0 and last > 0:
            self.skip = self.delivered_at_last
            return last - 1
        self.skip = 0
        return last

