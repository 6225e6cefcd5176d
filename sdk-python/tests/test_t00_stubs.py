"""The committed gRPC stubs are what scripts/generate.sh makes from proto/ now."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[1]
COMMITTED = SDK / "src" / "concord" / "_proto"


def test_committed_stubs_are_current(tmp_path: Path) -> None:
    out = tmp_path / "proto"
    run = subprocess.run(
        ["bash", str(SDK / "scripts" / "generate.sh"), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, f"generate.sh failed:\n{run.stderr}"
    fresh = sorted(p.name for p in out.iterdir())
    committed = sorted(p.name for p in COMMITTED.iterdir() if p.is_file())
    assert fresh == committed, "stub files differ: run sdk-python/scripts/generate.sh"
    _, mismatch, errors = filecmp.cmpfiles(out, COMMITTED, fresh, shallow=False)
    assert not mismatch and not errors, (
        f"stale stubs {mismatch + errors}: run sdk-python/scripts/generate.sh and commit"
    )
