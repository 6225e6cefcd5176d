"""Leader selector: two workers take turns at a job (auto_requeue); each turn runs
while its candidacy leads and writes with the leadership's fence, which the server
refuses once the turn is over. Asyncio: take_leadership is an ``async def`` (a task,
cancelled if the session is SUSPENDED or LOST). Run: python leader_selector.py."""

import asyncio
import os

import concord.aio

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")
TURNS = 4


async def main() -> None:
    turns: list[str] = []
    done = asyncio.Event()
    async with concord.aio.Client(HOSTS) as c:
        await c.ensure_path("/compactor")

        def worker(name: str):
            async def take_leadership(lead: concord.aio.Leadership) -> None:
                if done.is_set():
                    return
                turns.append(name)
                # Only the leader's write goes through: fenced by its term.
                await c.set("/compactor", f"{name} turn {len(turns)}".encode(), fence=lead.fence)
                print(f"{name} leads (term {lead.term}): turn {len(turns)}")
                if len(turns) >= TURNS:
                    done.set()

            return take_leadership

        async with c.LeaderSelector("compactor", worker("w1"), id="w1", auto_requeue=True), \
                c.LeaderSelector("compactor", worker("w2"), id="w2", auto_requeue=True):
            await asyncio.wait_for(done.wait(), 10)
        print("turns:", turns, "last write:", (await c.get("/compactor"))[0].decode())


asyncio.run(main())
