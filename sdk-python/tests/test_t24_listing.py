"""Listings are whole at the server's default page cap: 5,000 children come back
from one get_children call on both clients, across the server's 1,000-name pages."""

from __future__ import annotations

from typing import Any

from conftest import Server, run_with


def test_five_thousand_children_come_back_whole(own_server: Server, kind: str) -> None:
    names = [f"c{i:05}" for i in range(5_000)]

    async def body(c: Any) -> None:
        await c.ensure_path("/many")
        for first in range(0, len(names), 500):
            t = c.transaction()
            for name in names[first : first + 500]:
                t.create(f"/many/{name}")
            await t.commit()
        assert await c.get_children("/many") == names
        # kazoo's shape: the names and the parent's stat.
        children, stat = await c.get_children("/many", include_data=True)
        assert children == names and stat.num_children == 5_000

    run_with(kind, own_server.addr, body)
