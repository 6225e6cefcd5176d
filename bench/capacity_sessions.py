"""Server memory per open session and per idle watch stream, for bench/capacity.sh.

    capacity_sessions.py --endpoint 127.0.0.1:PORT --pid PID [--sessions N] [--watches N]

Reads the server's RSS (/proc/PID/status, VmRSS), opens N sessions (Session.Open,
TTL 60 s, 64 calls at a time; never kept alive, so they must all be open before the
first expires: the script fails if that takes over 50 s) and reads it again, then
opens N watch streams on distinct missing nodes (16 channels, each stream counted once
the server sends `started`), reads it again, and prints one table row per step with
the RSS growth per session and per watch. Closes every stream and channel it opened;
the sessions expire on their own. Uses the Python SDK's generated stubs only.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import grpc

from concord._proto import session_pb2, session_pb2_grpc, watch_pb2, watch_pb2_grpc

SESSION_TTL_MS = 60_000
OPEN_WITHIN_S = 50
CONCURRENCY = 64
WATCH_CHANNELS = 16


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def open_sessions(endpoint: str, count: int) -> None:
    started = time.monotonic()
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = session_pb2_grpc.SessionStub(channel)
        next_index = iter(range(count))

        async def worker() -> None:
            for _ in next_index:
                await stub.Open(session_pb2.OpenSessionRequest(ttl_ms=SESSION_TTL_MS), timeout=10)

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    took = time.monotonic() - started
    if took > OPEN_WITHIN_S:
        raise RuntimeError(f"opening {count} sessions took {took:.0f} s: the first may have expired")


async def open_watches(endpoint: str, count: int) -> tuple[list, list]:
    """Opens `count` streams; returns the channels and calls, to be closed later."""
    channels = [grpc.aio.insecure_channel(endpoint) for _ in range(WATCH_CHANNELS)]
    stubs = [watch_pb2_grpc.WatchStub(c) for c in channels]
    calls = []
    for i in range(count):
        request = watch_pb2.WatchRequest(path=f"/capacity-watch/n{i}")
        calls.append(stubs[i % WATCH_CHANNELS].Watch(request))

    async def until_started(call) -> None:
        async for message in call:  # bounded: the first message is `started`
            if message.HasField("started"):
                return
        raise RuntimeError("a watch stream ended before it started")

    await asyncio.wait_for(asyncio.gather(*(until_started(c) for c in calls)), timeout=120)
    return channels, calls


def row(step: str, rss: int, base: int, per_what: int) -> str:
    growth = rss - base
    per = f"{growth / per_what:,.0f}" if per_what else ""
    return f"| {step} | {rss / 1048576:,.1f} | {growth / 1048576:,.1f} | {per} |"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--watches", type=int, default=1_000)
    args = parser.parse_args()

    idle = rss_bytes(args.pid)
    await open_sessions(args.endpoint, args.sessions)
    with_sessions = rss_bytes(args.pid)
    channels, calls = await open_watches(args.endpoint, args.watches)
    with_watches = rss_bytes(args.pid)
    for call in calls:
        call.cancel()
    for channel in channels:
        await channel.close()

    print("| step | server RSS MiB | growth MiB | growth bytes each |")
    print("|---|---:|---:|---:|")
    print(row("idle", idle, idle, 0))
    print(row(f"{args.sessions:,} sessions open", with_sessions, idle, args.sessions))
    print(row(f"{args.watches:,} idle watch streams", with_watches, with_sessions, args.watches))


if __name__ == "__main__":
    asyncio.run(main())
