"""The Cluster calls on both clients against a real server, as the Rust SDK has
them: ``status()``, ``who_am_i()``, ``members()`` and ``save_snapshot(path)``, whose
file ``concord restore`` turns into a data folder that serves the same tree."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

import concord
from concord import ErrorCode, Role

from conftest import CONCORD_BIN, Server, run_with


def test_status_who_am_i_and_members_of_one_server(server: Server, root: str, kind: str) -> None:
    async def body(c: Any) -> None:
        created, stat = await c.create(root, b"x", include_data=True)
        s = await c.status()
        assert isinstance(s, concord.ServerStatus)
        assert s.role is Role.LEADER and s.leader_id == s.server_id and s.leader_serving
        assert s.zxid >= stat.czxid and s.commit_zxid >= stat.czxid and s.epoch >= 1
        assert s.ensemble_size == 1 and s.node_count >= 2 and s.session_count >= 1
        assert s.version and c.last_zxid >= s.zxid

        me = await c.who_am_i()
        assert isinstance(me, concord.WhoAmI)
        assert me.admin and me.namespace_root == "/" and me.team == "" and me.grants == []

        # The lag is as of the server's last tick, and the shared server also writes
        # for other tests' sessions as they expire: asked until it has caught up.
        for _ in range(200):
            m = await c.members()
            if m.members and m.members[0].lag_txns == 0:
                break
            await asyncio.sleep(0.05)
        assert isinstance(m, concord.Members)
        assert m.server_id == s.server_id == m.leader_id
        [only] = m.members
        assert only.id == s.server_id and only.role is Role.LEADER and only.voter and only.known
        assert only.zxid >= stat.czxid and only.lag_txns == 0

    run_with(kind, server.addr, body)


def _restore(backup: Path, data_dir: Path) -> str:
    out = subprocess.run(
        [str(CONCORD_BIN), "restore", str(backup), "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def test_save_snapshot_writes_what_concord_restore_serves(own_server: Server, kind: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="concord-py-backup-"))
    backup = folder / "tree.backup"
    saved: dict[str, Any] = {}

    async def body(c: Any) -> None:
        await c.create("/app/config", b"v1", makepath=True)
        await c.create("/app/big", os.urandom(700_000))  # more than one chunk in all
        await c.create("/app/big2", os.urandom(700_000))
        stat = await c.set("/app/config", b"v2")
        backup.write_bytes(b"an older backup")  # replaced once the new one is whole
        info = await c.save_snapshot(backup)
        assert isinstance(info, concord.BackupInfo)
        assert info.zxid >= stat.mzxid and info.node_count == 5  # /, /app and 3 nodes
        assert info.session_count == 1 and info.server_id == (await c.status()).server_id
        assert backup.stat().st_size == 45 + info.snapshot_bytes > 1_400_000
        assert sorted(os.listdir(folder)) == ["tree.backup"]  # no temporary file left
        saved["info"] = info
        saved["data"] = (await c.get("/app/big"))[0]

    try:
        run_with(kind, own_server.addr, body)
        info = saved["info"]
        data_dir = own_server.log_path.parent / "data"
        own_server.proc.kill()
        own_server.proc.wait(timeout=10)
        shutil.rmtree(data_dir)
        said = _restore(backup, data_dir)
        assert f"zxid {info.zxid:#x}" in said and f"{info.node_count} nodes" in said
        own_server.restart()  # on the restored folder

        async def after(c: Any) -> None:
            assert (await c.get("/app/config"))[0] == b"v2"
            assert (await c.get("/app/big"))[0] == saved["data"]
            assert sorted(await c.get_children("/app")) == ["big", "big2", "config"]

        run_with(kind, own_server.addr, after)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_save_snapshot_into_a_missing_folder_is_bad_arguments(server: Server, kind: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="concord-py-backup-"))

    async def body(c: Any) -> None:
        with pytest.raises(concord.BadArgumentsError) as e:
            await c.save_snapshot(folder / "missing" / "tree.backup")
        assert e.value.code is ErrorCode.BAD_ARGUMENTS and "cannot create" in e.value.message
        assert os.listdir(folder) == []

    try:
        run_with(kind, server.addr, body)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_damaged_snapshot_is_refused_and_leaves_no_file(server: Server) -> None:
    """The check itself, on a real snapshot fed in pieces: the file's header is the
    one the Rust SDK writes, the snapshot passes whole and byte by byte, and a
    flipped byte, a short snapshot and a wrong zxid fail."""
    from concord import _backup

    async def main() -> bytes:
        folder = Path(tempfile.mkdtemp(prefix="concord-py-backup-"))
        try:
            async with concord.aio.Client(server.addr) as c:
                await c.save_snapshot(folder / "b")
            return (folder / "b").read_bytes()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    raw = asyncio.run(main())
    head, snap = raw[:45], raw[45:]
    zxid = int.from_bytes(head[9:17], "little")
    assert head == _backup.header(
        zxid,
        int.from_bytes(head[17:25], "little"),
        int.from_bytes(head[25:33], "little"),
        int.from_bytes(head[33:41], "little"),
    )

    def check(data: bytes, at: int, pieces: int = 7) -> None:
        c = _backup.SnapshotCheck(at)
        step = max(len(data) // pieces, 1)
        for i in range(0, len(data), step):
            c.update(data[i : i + step])
        c.finish()

    check(snap, zxid)
    check(snap, zxid, pieces=len(snap))  # byte by byte
    flipped = bytearray(snap)
    flipped[len(snap) // 2] ^= 1
    for bad, at in ((bytes(flipped), zxid), (snap[:-1], zxid), (snap, zxid + 1), (snap[:9], zxid)):
        with pytest.raises(ValueError):
            check(bad, at)
