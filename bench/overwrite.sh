#!/usr/bin/env bash
# Memory against bytes written: builds dist binaries (the shipped profile), starts one Concord server on a
# scratch data folder on 127.0.0.1, Sets one node COUNT times with VALUE_BYTES from
# CLIENTS clients, prints the server's RSS (idle, peak while writing, end), then stops
# the server and deletes the folder. Server flags can be added in CONCORD_ARGS.
# Example (the run in docs/operations.md): bench/overwrite.sh 10000 1048576 16
# It writes COUNT x VALUE_BYTES to disk (10 GB for the example; purged as it goes).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-10000}
value_bytes=${2:-1048576}
clients=${3:-16}
cargo build --profile dist -p concord-server -p concord-bench
scratch=$(mktemp -d)
port=${CONCORD_BENCH_PORT:-7193}
# shellcheck disable=SC2086
./target/dist/concord --listen 127.0.0.1:$port --data-dir "$scratch/data" ${CONCORD_ARGS:-} > "$scratch/out" 2> "$scratch/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 100); do grep -q listening "$scratch/out" && break; sleep 0.1; done
# Let start-up allocations settle before the idle reading.
sleep 1
./target/dist/concord-bench --endpoints http://127.0.0.1:$port --server-pids $server \
  --value-bytes "$value_bytes" overwrite --count "$count" --clients "$clients"
echo "snapshots written: $(grep -c 'snapshot written' "$scratch/server.log" || true)"
du -sh "$scratch/data"
