#!/usr/bin/env python3
"""Runs kazoo 2.11.0's own test suite against Concord's ZooKeeper port (issue 47).

    python3 tests/zookeeper/kazoo_suite.py [--backend concord|zookeeper] [PYTEST ARGS...]

From the repository's root on a fresh machine: installs kazoo 2.11.0 and what its
tests import into .venv (PyPI), unpacks kazoo's source distribution (which carries
kazoo/tests and kazoo/testing) into tests/zookeeper/.kazoo/ (ignored by git), and runs
its tests with pytest through kazoo_shim.py, which starts the servers in place of
kazoo.testing's cluster: `concord` ($CONCORD_BIN, target/debug/concord by default) or,
with --backend zookeeper, Debian's ZooKeeper for the baseline.

Prints passed / failed / skipped / total and the share passed, and exits 1 when a test
fails that tests/zookeeper/kazoo_known_failures.txt does not list, or a listed test
now passes (so that the list stays true), except those listed as flaky (a reason
starting "flaky:"), which may do either; the list is for the concord backend only.
Each test is bounded by pytest-timeout (TEST_TIMEOUT_S) and the whole run by
KAZOO_SUITE_TIMEOUT_S, after which every process it started is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = REPO / ".venv"
SCRATCH = HERE / ".kazoo"
KAZOO_VERSION = "2.11.0"
# What kazoo's tests import (its `test` extra, less coverage), pinned.
TEST_REQUIREMENTS = [
    f"kazoo=={KAZOO_VERSION}",
    "pytest",
    "pytest-timeout==2.4.0",
    "objgraph==3.7.0",
    "pyjks==20.0.0",
    "pyopenssl==26.4.0",
    "gevent==26.9.0",
    "eventlet==0.41.3",
    # kazoo's SASL tests run only with it (its `sasl` extra).
    "pure-sasl==0.6.2",
]
KNOWN_FAILURES = HERE / "kazoo_known_failures.txt"
TEST_TIMEOUT_S = 90
SUITE_TIMEOUT_S = int(os.environ.get("KAZOO_SUITE_TIMEOUT_S", "1800"))


def run(args: list[str], **kw: object) -> None:
    subprocess.run(args, check=True, **kw)  # type: ignore[call-overload]


def install() -> Path:
    """kazoo and its tests' imports in .venv; kazoo's sdist unpacked in SCRATCH.
    Returns the unpacked source folder."""
    python = VENV / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(VENV)])
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    run(pip + ["install", *TEST_REQUIREMENTS])
    source = SCRATCH / f"kazoo-{KAZOO_VERSION}"
    if not (source / "kazoo" / "tests").is_dir():
        SCRATCH.mkdir(parents=True, exist_ok=True)
        sdist = SCRATCH / f"kazoo-{KAZOO_VERSION}.tar.gz"
        if not sdist.exists():
            run(pip + ["download", "--no-binary", ":all:", "--no-deps",
                       f"kazoo=={KAZOO_VERSION}", "-d", str(SCRATCH)])
        with tarfile.open(sdist) as tar:
            tar.extractall(SCRATCH, filter="data")
    return source


def kill_group(pgid: int, sig: int) -> None:
    """Signals every process of the group (pytest and the servers it started) that
    is still there."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def known_failures() -> dict[str, str]:
    """Test id -> reason, from KNOWN_FAILURES ('ID REASON' a line; # comments)."""
    known: dict[str, str] = {}
    for line in KNOWN_FAILURES.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            test_id, _, reason = line.partition(" ")
            known[test_id] = reason.strip()
    return known


def main() -> int:
    args = sys.argv[1:]
    backend = "concord"
    if args[:1] == ["--backend"]:
        backend, args = args[1], args[2:]
    if backend not in ("concord", "zookeeper"):
        print(f"--backend must be concord or zookeeper, not {backend}", file=sys.stderr)
        return 2
    source = install()
    results = SCRATCH / f"results-{backend}.json"
    results.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(
        KAZOO_SHIM_BACKEND=backend,
        KAZOO_SHIM_RESULTS=str(results),
        # kazoo from the unpacked sdist (the same release as in .venv), then the shim.
        PYTHONPATH=os.pathsep.join([str(source), str(HERE)]),
    )
    env.setdefault("CONCORD_BIN", str(REPO / "target" / "debug" / "concord"))
    env.pop("CI", None)  # kazoo's tests read CI and ZOOKEEPER_VERSION for its own CI
    pytest = [
        str(VENV / "bin" / "python"), "-m", "pytest",
        "-c", str(HERE / "kazoo_pytest.ini"), "--rootdir", str(source),
        "-p", "kazoo_shim", "-p", "no:cacheprovider",
        f"--timeout={TEST_TIMEOUT_S}", "-q", "-rfE",
        *(args or ["kazoo/tests"]),
    ]
    started = time.monotonic()
    # Its own process group, so that a timeout kills the servers it started too.
    proc = subprocess.Popen(pytest, cwd=source, env=env, start_new_session=True)
    try:
        proc.wait(timeout=SUITE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"kazoo suite: not done within {SUITE_TIMEOUT_S} s, killed", file=sys.stderr)
        # SIGTERM first: the shim stops its servers and removes their folders.
        kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        kill_group(proc.pid, signal.SIGKILL)
        return 1
    finally:
        kill_group(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - started
    if not results.exists():
        print(f"kazoo suite: pytest exited {proc.returncode} without results", file=sys.stderr)
        return 1
    return report(backend, json.loads(results.read_text()), elapsed, whole=not args)


def report(backend: str, outcomes: dict[str, dict[str, object]], elapsed: float, whole: bool) -> int:
    by = {k: sorted(t for t, o in outcomes.items() if o["outcome"] == k)
          for k in ("passed", "failed", "skipped")}
    total = len(outcomes)
    ran = len(by["passed"]) + len(by["failed"])
    print(f"\nkazoo {KAZOO_VERSION} suite against {backend}: {len(by['passed'])} passed, "
          f"{len(by['failed'])} failed, {len(by['skipped'])} skipped, {total} in all, "
          f"in {elapsed:.0f} s")
    if total:
        print(f"passed: {100 * len(by['passed']) / total:.1f}% of all tests, "
              f"{100 * len(by['passed']) / max(ran, 1):.1f}% of those that ran")
    for t in by["failed"]:
        print(f"  failed: {t}: {outcomes[t].get('error', '')}")
    if backend != "concord":
        return 0 if not by["failed"] else 1
    known = known_failures()
    # A test listed as flaky may pass or fail: either is reported, neither fails the run.
    flaky = {t for t, reason in known.items() if reason.startswith("flaky:")}
    for t in sorted(flaky):
        print(f"flaky ({outcomes.get(t, {}).get('outcome', 'not run')}): {t}")
    unexpected = [t for t in by["failed"] if t not in known]
    # A listed test that passes now must leave the list; one that did not run (a
    # subset was asked for, or it was skipped) says nothing.
    fixed = [
        t for t in known
        if t not in flaky and outcomes.get(t, {}).get("outcome") == "passed"
    ]
    missing = [t for t in known if t not in outcomes] if whole else []
    for t in unexpected:
        print(f"NEW FAILURE (not in {KNOWN_FAILURES.name}): {t}")
    for t in fixed:
        print(f"NOW PASSES (remove it from {KNOWN_FAILURES.name}): {t}")
    for t in missing:
        print(f"NO SUCH TEST (remove it from {KNOWN_FAILURES.name}): {t}")
    return 1 if unexpected or fixed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
