#!/usr/bin/env bash
# The memory and restart workload of bench/peers.sh, Concord alone, for comparing
# builds without a full side-by-side run: for each binary given (default: a release
# build of this tree), one server on a scratch folder on 127.0.0.1 gets COUNT nodes of
# 100 bytes (concord-bench fill, 64 clients), its RSS is read, it is restarted on the
# same folder and timed until the last node is readable, and its RSS is read again.
#
#   bench/memory.sh [COUNT] [CONCORD_BINARY...]     default 1000000 nodes
#   env: BENCH_BIN uses a prebuilt concord-bench; CONCORD_BENCH_PORT (default 17391);
#        KEEP_SCRATCH=1 keeps the scratch folder.
#
# Prints one fill and one probe line per binary (the JSON lines bench/peers.sh reports
# from: rss_mib, restart ms). Stops every process it started and deletes the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-1000000}
shift || true
port=${CONCORD_BENCH_PORT:-17391}
binaries=("$@")
if [ ${#binaries[@]} = 0 ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --release -p concord-server -p concord-bench >&2
fi
[ ${#binaries[@]} = 0 ] && binaries=("$PWD/target/release/concord")
BENCH_BIN=${BENCH_BIN:-$PWD/target/release/concord-bench}

scratch=$(mktemp -d /tmp/concord-memory.XXXXXX)
# stop_pids, the EXIT trap, wait_for
. bench/lib.sh

start() {  # start BINARY DIR RUN: one server; sets $pid
  "$1" --listen 127.0.0.1:$port --data-dir "$2/data" > "$2/out-$3" 2> "$2/log-$3" &
  started+=($!); pid=$!
}

for i in "${!binaries[@]}"; do
  binary=${binaries[$i]} dir=$scratch/$i
  mkdir -p "$dir"
  echo "== $binary: $count nodes" >&2
  start "$binary" "$dir" 1
  wait_for 60 grep -q listening "$dir/out-1"
  "$BENCH_BIN" --endpoints http://127.0.0.1:$port --server-pids $pid --out "$dir/results.jsonl" \
    fill --count "$count"
  stop_pids $pid
  since_ms=$(date +%s%3N)
  start "$binary" "$dir" 2
  "$BENCH_BIN" --endpoints http://127.0.0.1:$port --server-pids $pid --out "$dir/results.jsonl" \
    probe --count "$count" --since-ms "$since_ms" --timeout-s 600
  stop_pids $pid
  sed "s|^|$binary |" "$dir/results.jsonl"
done
