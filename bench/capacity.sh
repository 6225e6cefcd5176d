#!/usr/bin/env bash
# Disk per txn, per node and under retention (docs/operations.md, "Capacity planning"):
# one Concord server on 127.0.0.1 with a scratch data folder.
#
#   bench/capacity.sh [COUNT [VALUE_BYTES]]     default 20000 txns of 100-byte values
#   env: CONCORD_BIN / CONCORDCTL_BIN / BENCH_BIN use prebuilt binaries instead of
#        building dist ones (any profile: the encoding does not depend on it);
#        CONCORD_BENCH_PORT (default 17491; the metrics port is the one after it);
#        KEEP_SCRATCH=1 keeps the scratch folder (data, logs).
#
# 1. Creates COUNT nodes of VALUE_BYTES (concord-bench fill, 64 clients), then Sets one
#    node COUNT times (concord-bench overwrite, 16 clients), with the defaults: no
#    snapshot is taken before snapshot_every_txns (100000), so the redb file's growth
#    is the log's. Prints the file's size before and after each, per txn.
# 2. Saves a snapshot of the COUNT-node tree (concordctl snapshot save): bytes a node.
# 3. Restarts the server on the same folder with --snapshot-every-txns COUNT/4 and Sets
#    the node 4 x COUNT more times, printing the file's size after each COUNT: the
#    snapshots (snapshots_keep = 3) and the purge of the log before the oldest kept
#    one bound it.
# 4. Starts a fresh server and runs bench/capacity_sessions.py: the server's RSS
#    growth for 10,000 open sessions, then for 1,000 idle watch streams. It needs the
#    Python SDK: made like bench/python.sh, in a venv in bench/out/python-venv
#    (gitignored) with `pip install ./sdk-python`.
# Stops every process it started (also on failure or Ctrl-C) and deletes the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

count=${1:-20000}
value_bytes=${2:-100}
port=${CONCORD_BENCH_PORT:-17491}
metrics_port=$((port + 1))
endpoint=http://127.0.0.1:$port

scratch=$(mktemp -d /tmp/concord-capacity.XXXXXX)
# stop_pids, the EXIT trap, wait_for
. bench/lib.sh

if [ -z "${CONCORD_BIN:-}" ] || [ -z "${CONCORDCTL_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --profile dist -p concord-server -p concordctl -p concord-bench
fi
CONCORD_BIN=${CONCORD_BIN:-$root/target/dist/concord}
CONCORDCTL_BIN=${CONCORDCTL_BIN:-$root/target/dist/concordctl}
BENCH_BIN=${BENCH_BIN:-$root/target/dist/concord-bench}
data=$scratch/data
redb=$data/concord.redb

server=""
start() {  # start [FLAG...]: one server on $port, metrics on $metrics_port
  : > "$scratch/out"
  "$CONCORD_BIN" --listen 127.0.0.1:$port --metrics-addr 127.0.0.1:$metrics_port \
    --data-dir "$data" "$@" > "$scratch/out" 2>> "$scratch/server.log" &
  server=$!
  started+=("$server")
  wait_for 60 grep -q listening "$scratch/out"
}
stop() {  # and forget its pid, so that the EXIT trap never signals a reused one
  stop_pids "$server"
  wait "$server" 2>/dev/null || true
  started=()
}
size() { stat -c %s "$redb"; }
metric() {  # metric NAME: its value in one scrape of /metrics
  exec 3<>"/dev/tcp/127.0.0.1/$metrics_port"
  printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
  sed -n "s/^$1 //p" <&3
  exec 3<&-
}
bench() { "$BENCH_BIN" --endpoints "$endpoint" --server-pids "$server" --value-bytes "$value_bytes" "$@" >&2; }
per() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", a / b }'; }
mib() { awk -v a="$1" 'BEGIN { printf "%.1f", a / 1048576 }'; }

echo "COUNT=$count VALUE_BYTES=$value_bytes, scratch $scratch" >&2
start
empty=$(size)
bench fill --count "$count"
filled=$(size)
bench overwrite --count "$count" --clients 16
overwritten=$(size)
snapshots=$(grep -c 'snapshot written' "$scratch/server.log" || true)
"$CONCORDCTL_BIN" --endpoint "$endpoint" snapshot save "$scratch/tree.backup" > "$scratch/saved"
snapshot_bytes=$(sed -n 's/^snapshot_bytes = //p' "$scratch/saved")
nodes=$(sed -n 's/^nodes = //p' "$scratch/saved")
stop

echo
echo "## Log: $count txns of $value_bytes-byte values, defaults (snapshots before: $snapshots)"
echo
echo "| step | redb file bytes | growth bytes | bytes per txn |"
echo "|---|---:|---:|---:|"
echo "| empty server | $empty | | |"
echo "| $count Creates | $filled | $((filled - empty)) | $(per $((filled - empty)) "$count") |"
echo "| $count Sets of one node | $overwritten | $((overwritten - filled)) | $(per $((overwritten - filled)) "$count") |"
echo
echo "## Snapshot of the tree: $nodes nodes, $snapshot_bytes bytes, $(per "$snapshot_bytes" "$nodes") bytes a node"

every=$((count / 4))
start --snapshot-every-txns "$every"
echo
echo "## Retention: --snapshot-every-txns $every, snapshots_keep 3, Sets of one node"
echo
echo "| Sets since the restart | redb file bytes | MiB | snapshots written | newest snapshot bytes |"
echo "|---:|---:|---:|---:|---:|"
echo "| 0 | $(size) | $(mib "$(size)") | 0 | |"
before=$(grep -c 'snapshot written' "$scratch/server.log" || true)
for round in 1 2 3 4; do
  bench overwrite --count "$count" --clients 16
  written=$(( $(grep -c 'snapshot written' "$scratch/server.log" || true) - before ))
  echo "| $((round * count)) | $(size) | $(mib "$(size)") | $written | $(metric concord_snapshot_size_bytes) |"
done
stop

venv=$root/bench/out/python-venv
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$root/bench/out"
  "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade ./sdk-python
data=$scratch/data-sessions
start
sleep 1  # let start-up allocations settle before the idle reading, as bench/overwrite.sh
echo
echo "## Sessions and watches: a fresh server"
echo
"$venv/bin/python" bench/capacity_sessions.py --endpoint 127.0.0.1:$port --pid "$server"
stop
