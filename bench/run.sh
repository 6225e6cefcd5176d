#!/usr/bin/env bash
# Builds release binaries, starts a Concord server on a scratch data folder on
# 127.0.0.1, runs concord-bench against it with the given arguments, and stops the
# server. Example: bench/run.sh --workloads write --clients 1,16,64 --duration-s 10
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p concord-server -p concord-bench
scratch=$(mktemp -d)
port=${CONCORD_BENCH_PORT:-7191}
./target/release/concord --listen 127.0.0.1:$port --data-dir "$scratch/data" > "$scratch/out" 2> "$scratch/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 100); do grep -q listening "$scratch/out" && break; sleep 0.1; done
./target/release/concord-bench --endpoints http://127.0.0.1:$port --server-pids $server "$@"
