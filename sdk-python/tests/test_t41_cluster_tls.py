"""The Cluster calls over mTLS, on both clients: ``who_am_i()`` names a team
member's identity, team, namespace root and quota use, and an admin's; ``members()``
and ``save_snapshot()`` are for admins only (PermissionDeniedError, and no file left
behind, for a team member)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import concord
from concord import ErrorCode, QuotaUsage, Role

from conftest import Server, run_with
from test_t40_tls import SEEDED, TEAM_CONFIG, _mtls_flags, _tls, certs  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def team_server(certs: Path) -> Iterator[Server]:  # noqa: F811
    s = Server(config=TEAM_CONFIG, extra=_mtls_flags(certs))
    try:
        deadline = time.monotonic() + 20
        while SEEDED not in s.log():  # team members are refused until the seed is in
            assert time.monotonic() < deadline, f"no seed in 20 s:\n{s.log()}"
            time.sleep(0.02)
        yield s
    finally:
        s.kill()


def test_a_team_member_sees_itself_and_is_refused_admin_calls(
    team_server: Server, certs: Path, kind: str  # noqa: F811
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="concord-py-backup-"))

    async def body(c: Any) -> None:
        me = await c.who_am_i()
        assert (me.identity, me.admin, me.team, me.namespace_root) == ("team-a", False, "a", "/teams/a")
        assert QuotaUsage("nodes", 0, 2) in me.usage
        assert (await c.status()).role is Role.LEADER
        with pytest.raises(concord.PermissionDeniedError) as e:
            await c.members()
        assert e.value.code is ErrorCode.PERMISSION_DENIED and not e.value.retry_safe
        with pytest.raises(concord.PermissionDeniedError):
            await c.save_snapshot(folder / "tree.backup")
        assert os.listdir(folder) == []

    try:
        run_with(kind, team_server.addr, body, tls=_tls(certs, "team-a"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_an_admin_is_one_and_may_list_members_and_save(
    team_server: Server, certs: Path, kind: str  # noqa: F811
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="concord-py-backup-"))

    async def body(c: Any) -> None:
        me = await c.who_am_i()
        assert (me.identity, me.admin, me.namespace_root, me.usage) == ("admin", True, "/", [])
        assert len((await c.members()).members) == 1
        info = await c.save_snapshot(folder / "tree.backup")
        assert info.node_count >= 3  # /, /teams, /teams/a
        assert os.listdir(folder) == ["tree.backup"]

    try:
        run_with(kind, team_server.addr, body, tls=_tls(certs, "admin"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
