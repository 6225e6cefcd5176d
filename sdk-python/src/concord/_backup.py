"""The backup file ``save_snapshot`` writes, byte for byte the one ``concordctl
snapshot save`` writes and ``concord restore`` reads (``proto/src/backup.rs``): a
header naming what the snapshot holds, then the snapshot as ``Cluster/Snapshot``
streamed it, checked as it arrives. No IO here.

::

    "CNCDBKUP" | version u8 (1) | zxid u64 | node_count u64 | session_count u64
             | server_id u64 | crc32 of the 41 bytes before it      (all LE)
    snapshot: "CNCDSNAP" | format u8 | varint zxid | ... | crc32 (LE) of all before it

What it must not do: interpret the snapshot beyond its magic, zxid and crc, or hold
more of it than the 19 bytes of its head and its last 4.
"""

from __future__ import annotations

import struct
import zlib

#: First bytes of a backup file.
MAGIC = b"CNCDBKUP"
#: The header's version.
VERSION = 1
#: The header's length in bytes.
HEADER_BYTES = 45
#: First bytes of the snapshot after the header.
SNAPSHOT_MAGIC = b"CNCDSNAP"
#: Magic, format byte and the longest varint u64.
_SNAPSHOT_HEAD_BYTES = 8 + 1 + 10


def header(zxid: int, node_count: int, session_count: int, server_id: int) -> bytes:
    """The header's bytes, its crc last."""
    body = MAGIC + bytes([VERSION]) + struct.pack("<4Q", zxid, node_count, session_count, server_id)
    return body + struct.pack("<I", zlib.crc32(body))


def _varint(data: bytes) -> int | None:
    """A postcard (LEB128) varint u64 at the start of ``data``, if complete."""
    value = 0
    for i, b in enumerate(data[:10]):
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value
    return None


class SnapshotCheck:
    """Checks a snapshot fed in pieces: its magic, that its zxid is ``zxid``, and its
    crc32 trailer. ``update`` raises ValueError as soon as the head is wrong."""

    def __init__(self, zxid: int) -> None:
        self.zxid = zxid
        self.bytes = 0
        self._crc = 0
        self._head = b""
        self._head_checked = False
        #: The last 4 bytes seen: the trailer, once the input ends.
        self._tail = b""

    def update(self, data: bytes) -> None:
        self.bytes += len(data)
        if not self._head_checked:
            self._head += data[: _SNAPSHOT_HEAD_BYTES - len(self._head)]
            self._check_head(at_end=False)
        joined = self._tail + data
        self._crc = zlib.crc32(joined[:-4], self._crc) if len(joined) > 4 else self._crc
        self._tail = joined[-4:]

    def _check_head(self, at_end: bool) -> None:
        head = self._head
        if len(head) >= 8 and not head.startswith(SNAPSHOT_MAGIC):
            raise ValueError("the snapshot has a bad magic")
        if len(head) < 10:
            if at_end:
                raise ValueError(f"the snapshot is only {self.bytes} bytes")
            return
        zxid = _varint(head[9:])
        if zxid is None:
            if at_end or len(head) == _SNAPSHOT_HEAD_BYTES:
                raise ValueError("the snapshot's zxid does not decode")
            return
        if zxid != self.zxid:
            raise ValueError(f"the header says zxid {self.zxid:#x}, the snapshot {zxid:#x}")
        self._head_checked = True

    def finish(self) -> int:
        """The input ended: the last 4 bytes must be the crc of all before them.
        Returns that crc."""
        if not self._head_checked:
            self._check_head(at_end=True)
        if len(self._tail) < 4:
            raise ValueError("the snapshot is truncated")
        (want,) = struct.unpack("<I", self._tail)
        if self._crc != want:
            raise ValueError("snapshot crc mismatch (truncated or altered)")
        return int(want)
