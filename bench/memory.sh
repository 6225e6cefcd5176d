#!/usr/bin/env bash
# The memory and restart workload of bench/peers.sh, Concord alone, for comparing
# builds without a full side-by-side run: for each binary given (default: a dist
# build of this tree), one server on a scratch folder on 127.0.0.1 gets COUNT nodes of
# 100 bytes (concord-bench fill, 64 clients), its RSS is read, it is restarted on the
# same folder and timed until the last node is readable, and its RSS is read again.
#
#   bench/memory.sh [COUNT] [CONCORD_BINARY...]     default 1000000 nodes
#   env: BENCH_BIN uses a prebuilt concord-bench; KEEP_SCRATCH=1 keeps the scratch
#        folder. The server listens on bench/lib.sh's port (17191).
#
# Prints one fill and one probe line per binary (the JSON lines bench/peers.sh reports
# from: rss_mib, restart ms). Stops every process it started and deletes the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-1000000}
shift || true
binaries=("$@")
if [ ${#binaries[@]} = 0 ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --profile dist -p concord-server -p concord-bench >&2
fi
[ ${#binaries[@]} = 0 ] && binaries=("$PWD/target/dist/concord")
BENCH_BIN=${BENCH_BIN:-$PWD/target/dist/concord-bench}

scratch=$(mktemp -d /tmp/concord-memory.XXXXXX)
# stop_pids, the EXIT trap, start_concord (sets $pids and $endpoints)
. bench/lib.sh

for i in "${!binaries[@]}"; do
  CONCORD_BIN=${binaries[$i]} dir=$scratch/$i
  echo "== $CONCORD_BIN: $count nodes" >&2
  start_concord "$dir" 1
  "$BENCH_BIN" --endpoints "$endpoints" --server-pids "$pids" --out "$dir/results.jsonl" \
    fill --count "$count"
  stop_pids "$pids"
  # Restarted as bench/peers.sh does: timed from the start command, not from listening.
  since_ms=$(date +%s%3N)
  "$CONCORD_BIN" --listen "${endpoints#http://}" --data-dir "$dir/data" > "$dir/out2" 2> "$dir/log2" &
  started+=($!); pids=$!
  "$BENCH_BIN" --endpoints "$endpoints" --server-pids "$pids" --out "$dir/results.jsonl" \
    probe --count "$count" --since-ms "$since_ms" --timeout-s 600
  stop_pids "$pids"
  sed "s|^|$CONCORD_BIN |" "$dir/results.jsonl"
done
