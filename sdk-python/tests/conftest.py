"""Test harness: real `concord` server processes on 127.0.0.1, as tests/src/lib.rs
starts them (port 0, a fresh data folder, a 50 ms tick, short session TTLs), killed at
teardown whatever happened.

The binary is $CONCORD_BIN, by default target/debug/concord of the repository (the
project's test script builds it before running these tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import queue
import random
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import pytest

import concord
import concord.aio

REPO = Path(__file__).resolve().parents[2]
CONCORD_BIN = Path(os.environ.get("CONCORD_BIN", REPO / "target" / "debug" / "concord"))
START_TIMEOUT_S = 30.0
#: The longest any one test body may run.
BODY_TIMEOUT_S = 30.0


class Server:
    """One `concord` process; `kill()` (and the fixtures' finalizers) end it."""

    def __init__(
        self,
        config: str = "",
        extra: tuple[str, ...] = (),
        listen: str = "127.0.0.1:0",
        zookeeper: bool = False,
    ) -> None:
        if not CONCORD_BIN.exists():
            raise RuntimeError(f"{CONCORD_BIN} is missing: build it (cargo build --bins) or set CONCORD_BIN")
        self._tmp = tempfile.TemporaryDirectory(prefix="concord-py-")
        tmp = Path(self._tmp.name)
        self.log_path = tmp / "server.log"
        args = [
            str(CONCORD_BIN),
            "--listen", listen,
            "--data-dir", str(tmp / "data"),
            "--tick-ms", "50",
            "--session-ttl-min-ms", "100",
            "--session-ttl-max-ms", "10000",
        ]
        if config:
            (tmp / "concord.toml").write_text(config)
            args += ["--config", str(tmp / "concord.toml")]
        if zookeeper:
            args += ["--zookeeper-addr", "127.0.0.1:0"]
        args += extra
        #: The ZooKeeper port's address, once bound (with zookeeper=True).
        self.zookeeper_addr: str | None = None
        self._args = args
        self._spawn()

    def _spawn(self) -> None:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self._args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log
        )
        self.stopped = False
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, args=(lines,), daemon=True).start()
        try:
            self.addr = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            self.kill()
            raise RuntimeError(f"the server did not listen within {START_TIMEOUT_S} s:\n{self.log()}")

    def restart(self) -> None:
        """Kills the process (-9) and starts it again on the same address and data
        folder: what it had committed survives, its connections do not."""
        self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        listen = self._args.index("--listen") + 1
        self._args[listen] = self.addr
        if self.zookeeper_addr is not None:
            self._args[self._args.index("--zookeeper-addr") + 1] = self.zookeeper_addr
        self._spawn()

    def _drain(self, lines: queue.Queue[str]) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            # Printed before `listening`, so it is set when the server is.
            if line.startswith("zookeeper listening "):
                self.zookeeper_addr = line[len("zookeeper listening ") :].strip()
            if line.startswith("listening "):
                lines.put(line[len("listening ") :].strip())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGSTOP: the process keeps its connections open but answers nothing. Returns
        once every thread of it is stopped (a call sent right after the signal could
        otherwise still be answered)."""
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True
        deadline = time.monotonic() + 5
        while not self._all_threads_stopped():
            if time.monotonic() > deadline:
                raise RuntimeError(f"server {self.addr} did not stop within 5 s")
            time.sleep(0.001)

    def _all_threads_stopped(self) -> bool:
        tasks = Path(f"/proc/{self.proc.pid}/task")
        try:
            # The state follows the parenthesised command name: T is stopped.
            states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
        except (FileNotFoundError, ProcessLookupError):
            return True
        return all(state in ("T", "t") for state in states)

    def cont(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        self._tmp.cleanup()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """A server shared by the tests that neither stop nor kill it. Children pages
    are 3 long, so listings cross page boundaries."""
    s = Server(config="children_page_max = 3\n")
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server for one test, which may SIGSTOP or kill it."""
    s = Server()
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture
def root(server: Server) -> str:
    """A fresh path for one test's nodes (not created)."""
    return f"/t-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def made_certs(clients: str, members: int = 1) -> Iterator[Path]:
    """A folder of certificates from `concord certs` (a CA, `members` servers, and the
    comma-separated `clients`), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="concord-py-certs-") as d:
        out = subprocess.run(
            [str(CONCORD_BIN), "certs", d, "--members", str(members), "--clients", clients],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        yield Path(d)


_FIRST_PORT, _PORT_COUNT = 20_000, 12_000
_next_port = itertools.count(random.randrange(_PORT_COUNT))


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now, and no earlier call returned.

    Drawn below the kernel's ephemeral range (32768 and up on Linux), which every
    bind to port 0 and every outgoing connection takes its port from, so nothing
    else takes it between this check and a server binding it (as
    tests/src/lib.rs free_ports).
    """
    for _ in range(_PORT_COUNT):
        port = _FIRST_PORT + next(_next_port) % _PORT_COUNT
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


# -- running one test body against either client -----------------------------------


class _SyncTransaction:
    def __init__(self, t: concord.Transaction) -> None:
        self._t = t

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)

    async def commit(self, **kw: Any) -> Any:
        return await asyncio.to_thread(self._t.commit, **kw)


class SyncAdapter:
    """The sync client with awaitable methods (each call runs on a worker thread), so
    one async test body tests both clients."""

    def __init__(self, client: concord.Client) -> None:
        self.sync = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sync, name)
        if not callable(attr) or name in ("add_listener", "remove_listener"):
            return attr

        async def call(*args: Any, **kw: Any) -> Any:
            return await asyncio.to_thread(attr, *args, **kw)

        return call

    def transaction(self) -> _SyncTransaction:
        return _SyncTransaction(self.sync.transaction())


Body = Callable[[Any], Awaitable[None]]


def run_with(kind: str, hosts: str, body: Body, **kw: Any) -> None:
    """Runs ``body(client)`` with a started client of ``kind`` ("aio" or "sync"),
    stopped and closed afterwards, within BODY_TIMEOUT_S."""
    if kind == "aio":

        async def main() -> None:
            async with concord.aio.Client(hosts, **kw) as c:
                await asyncio.wait_for(body(c), BODY_TIMEOUT_S)

        asyncio.run(main())
    else:
        with concord.Client(hosts, **kw) as c:
            asyncio.run(asyncio.wait_for(body(SyncAdapter(c)), BODY_TIMEOUT_S))


async def eventually(what: str, cond: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    """Waits (polling every 20 ms) until ``cond()`` holds; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {timeout_s} s: {what}")


@pytest.fixture(params=["aio", "sync"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)
