#!/usr/bin/env python3
"""What one durable commit costs this machine's disk, whatever writes it: the floor
under a write's latency, to set beside a server's own commit time
(`concord_disk_backend_commit_duration_seconds` on Concord's /metrics).

For each shape, COUNT commits of one small record, each followed by fdatasync:
  append, preallocated   one pwrite at the end of what was written, into a file
                         filled with zeros beforehand (as ZooKeeper preallocates
                         its log)
  append, growing        one write at the end of a file that grows with it
  8 pages, scattered     eight 4 KiB pwrites at offsets across 64 MiB (the shape of
                         a redb commit seen with strace: its header, the log's leaf
                         and branches, the table tree and the freed tree)

    bench/disk_floor.py [--dir DIR] [--count N] [--record-bytes B]

Writes only in a scratch folder under DIR (default /tmp, where the benchmarks keep
their data) and deletes it. Standard library only.
"""

import argparse
import os
import random
import shutil
import tempfile
import time

PAGE = 4096
SPAN = 64 << 20


def zero_filled(path, size):
    """A file of `size` zero bytes written out and synced: its blocks are allocated
    and initialized, as ZooKeeper's log is after it preallocates, and as the pages of
    a redb file are once written. (`posix_fallocate` would leave ext4's extents
    unwritten, so that each first write into one also changes the file's metadata.)"""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    chunk = bytes(1 << 20)
    for offset in range(0, size, len(chunk)):
        os.pwrite(fd, chunk[: size - offset], offset)
    os.fsync(fd)
    return fd


def timed(count, commit):
    started = time.perf_counter()
    for i in range(count):
        commit(i)
    return (time.perf_counter() - started) / count * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--record-bytes", type=int, default=180)
    args = parser.parse_args()
    if not 1 <= args.count <= 1_000_000 or not 1 <= args.record_bytes <= PAGE:
        parser.error("--count in 1..1000000, --record-bytes in 1..4096")
    scratch = tempfile.mkdtemp(prefix="concord-disk-floor.", dir=args.dir)
    record = b"x" * args.record_bytes
    page = b"y" * PAGE
    rng = random.Random(1)
    rows = []
    try:
        fd = zero_filled(os.path.join(scratch, "prealloc"), max(SPAN, args.count * args.record_bytes))

        def append_prealloc(i):
            os.pwrite(fd, record, i * args.record_bytes)
            os.fdatasync(fd)

        rows.append(("append, preallocated", timed(args.count, append_prealloc)))
        os.close(fd)

        fd = os.open(os.path.join(scratch, "growing"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        def append_growing(_):
            os.write(fd, record)
            os.fdatasync(fd)

        rows.append(("append, growing", timed(args.count, append_growing)))
        os.close(fd)

        fd = zero_filled(os.path.join(scratch, "pages"), SPAN)

        def scattered_pages(_):
            for _ in range(8):
                os.pwrite(fd, page, rng.randrange(SPAN // PAGE) * PAGE)
            os.fdatasync(fd)

        rows.append(("8 pages, scattered", timed(args.count, scattered_pages)))
        os.close(fd)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.count} commits each, {args.record_bytes}-byte records, in {args.dir}")
    print("| shape | µs per commit (write + fdatasync) |")
    print("|---|---:|")
    for name, us in rows:
        print(f"| {name} | {us:,.0f} |")


if __name__ == "__main__":
    main()
