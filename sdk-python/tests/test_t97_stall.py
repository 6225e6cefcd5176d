"""A server that stalls for less than the session's TTL (SIGSTOP, a frozen VM, a
starved process) loses no session whose client kept trying: the client must not
call it LOST by its own clock (issue 46; the Rust SDK's twin is
tests/tests/t21_session_stall.rs).

One server, a 2 s TTL, SIGSTOP for 0.5, 0.75 and 0.9 of it just before the next ping
is due (the SDK pings when the session opens, then every third of the TTL), so that
the client hears nothing for the stall and most of a ping interval: at 0.9 of the
TTL, longer than the TTL in all. The server, once resumed, still has the session
(it charges none for its own silence), so the client must not have given it up.
"""

from __future__ import annotations

import asyncio

import pytest

import concord
import concord.aio
from concord import State

from conftest import Server, eventually

TTL_S = 2.0
#: Before the next ping is due: it is due a third of the TTL after the open.
BEFORE_PING_S = TTL_S / 3 - 0.05


class States:
    """Every state the client's listener hears."""

    def __init__(self) -> None:
        self.heard: list[State] = []

    def __call__(self, state: State) -> None:
        self.heard.append(state)


@pytest.mark.parametrize("share", [0.5, 0.75, 0.9])
def test_a_stall_of_the_only_server_shorter_than_the_ttl_keeps_the_session(own_server: Server, share: float) -> None:
    async def main() -> None:
        states = States()
        c = concord.aio.Client(own_server.addr, session_timeout=TTL_S)
        c.add_listener(states)
        try:
            await c.start()
            loop = asyncio.get_running_loop()
            opened_at = loop.time()
            assert c.client_id is not None
            session_id = c.client_id[0]
            path = await c.create("/mine", ephemeral=True)
            await asyncio.sleep(max(opened_at + BEFORE_PING_S - loop.time(), 0.0))

            await asyncio.to_thread(own_server.stop)
            try:
                await asyncio.sleep(TTL_S * share)
            finally:
                own_server.cont()
            unanswered_for = loop.time() - opened_at
            assert State.LOST not in states.heard, f"stall {share}: {states.heard}"

            async def answered() -> bool:
                assert c.state is not State.LOST, f"stall {share}: {states.heard}"
                return c.connected

            # Pings are answered again within a ping interval or two of the resume.
            await eventually(f"the session answered again ({states.heard})", answered, TTL_S)
            assert unanswered_for > TTL_S * share
            assert c.client_id is not None and c.client_id[0] == session_id
            # The server agrees: the session and its ephemeral live on.
            stat = await c.exists(path)
            assert stat is not None and stat.ephemeral_owner == session_id
            assert State.LOST not in states.heard, f"stall {share}: {states.heard}"
        finally:
            await c.close()

    asyncio.run(main())


def test_a_stream_that_does_not_start_on_a_stalled_server_says_how_long_it_waited(own_server: Server) -> None:
    """A watch or an observer opened on a stalled server (its connection open, no
    answer) fails with TIMEOUT naming how long it waited for the stream's first
    message (the silence limit: three progress intervals of 1 s, 3 s), not an
    unmeasured "in time"."""

    async def main() -> None:
        c = concord.aio.Client(own_server.addr)
        try:
            assert await c.exists("/") is not None  # connected
            await asyncio.to_thread(own_server.stop)
            try:
                with pytest.raises(concord.TimeoutError) as e:
                    await asyncio.wait_for(c.watch("/a").start(), 10)
                assert "the watch stream did not start within 3 s" in str(e.value), str(e.value)
                with pytest.raises(concord.TimeoutError) as e:
                    await asyncio.wait_for(c.observe("e", resume=None).start(), 10)
                assert "the observe stream did not start within 3 s" in str(e.value), str(e.value)
            finally:
                own_server.cont()
        finally:
            await c.close()

    asyncio.run(main())
