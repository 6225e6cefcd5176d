"""The Cluster calls against a 3-server ensemble, on both clients: ``members()`` asked
of the leader lists every member with its role and progress; asked of a follower, it
knows itself and its leader; ``status()`` of each names the same leader."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator

import pytest

from concord import Role

from conftest import run_with
from test_t50_ensemble import SIZE, Ensemble


@pytest.fixture(scope="module")
def ensemble() -> Iterator[Ensemble]:
    e = Ensemble()
    try:
        yield e
    finally:
        e.kill()


def test_members_and_status_of_an_ensemble(ensemble: Ensemble, kind: str) -> None:
    leader = ensemble.leader(list(range(SIZE)))
    order = [leader] + [i for i in range(SIZE) if i != leader]

    async def body(c: Any) -> None:
        await c.create(f"/m-{kind}", b"x")  # every follower acknowledges something
        deadline = time.monotonic() + 10
        while True:
            m = await c.members()
            # Known once heard, with a zxid once its acknowledgement is reported.
            if all(x.known and x.zxid > 0 for x in m.members) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert m.server_id == m.leader_id == leader + 1
        assert [x.id for x in m.members] == [1, 2, 3]
        for x in m.members:
            assert x.voter and x.known and x.client_addr == ensemble.servers[x.id - 1].addr
            assert x.role is (Role.LEADER if x.id == leader + 1 else Role.FOLLOWER)
            assert x.zxid > 0 and x.peer_addr
        status = await c.status()
        assert (status.server_id, status.role, status.ensemble_size) == (leader + 1, Role.LEADER, 3)

    hosts = ",".join(ensemble.servers[i].addr for i in order)
    run_with(kind, hosts, body, randomize_hosts=False)

    follower = order[1]

    async def of_a_follower(c: Any) -> None:
        status = await c.status()
        assert (status.server_id, status.role, status.leader_id) == (follower + 1, Role.FOLLOWER, leader + 1)
        m = await c.members()
        assert m.server_id == follower + 1 and m.leader_id == leader + 1
        roles = {x.id: x.role for x in m.members}
        assert roles[follower + 1] is Role.FOLLOWER and roles[leader + 1] is Role.LEADER

    run_with(kind, ensemble.servers[follower].addr, of_a_follower)
