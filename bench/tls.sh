#!/usr/bin/env bash
# The cost of mTLS on the client port (issue 11, point 10): the same workloads against
# one Concord server over plain text and one over mTLS, on this machine, in
# alternating rounds, so that what else the machine does weighs on both alike.
#
#   bench/tls.sh                 7 rounds of 3 s per point after 1 s of warm-up
#   bench/tls.sh --short         3 rounds of 1 s per point
#   env: CONCORD_BIN / BENCH_BIN use prebuilt binaries instead of building dist ones;
#        WORKLOADS (default write,read), CLIENTS (default 1,16,64);
#        KEEP_SCRATCH=1 keeps the scratch folder (data, logs, results-*.jsonl).
#
# Makes certificates with `concord certs`, starts both servers on 127.0.0.1 (plain on
# 17191, mTLS on 17291 requiring a client certificate; the bench presents the admin's),
# and for each workload and client count runs concord-bench once against each server
# per round, the order swapped every round. Prints each run's ops/s, the median of
# each side and the ratio of the medians, and the CPU the bench client and the server
# spent per op (steadier than ops/s where both share the cores), and stops every
# process it started.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

rounds=7 duration=3 warmup=1
while [ $# -gt 0 ]; do
  case $1 in
    --short) rounds=3 duration=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

scratch=$(mktemp -d /tmp/concord-tls-bench.XXXXXX)
# stop_pids, the EXIT trap, wait_for, start_concord, alternate_rounds
. bench/lib.sh

if [ -z "${CONCORD_BIN:-}" ] || [ -z "${BENCH_BIN:-}" ]; then
  cargo build --profile dist -p concord-server -p concord-bench
fi
CONCORD_BIN=${CONCORD_BIN:-$root/target/dist/concord}
BENCH_BIN=${BENCH_BIN:-$root/target/dist/concord-bench}

certs=$scratch/certs
"$CONCORD_BIN" certs "$certs" --members 1 --clients admin > /dev/null

start_concord "$scratch/plain" 1
plain_pid=$pids plain_endpoint=$endpoints
mkdir -p "$scratch/tls"
"$CONCORD_BIN" --listen 127.0.0.1:17291 --data-dir "$scratch/tls/data" \
  --cert-file "$certs/server-1.pem" --key-file "$certs/server-1-key.pem" \
  --trusted-ca-file "$certs/ca.pem" > "$scratch/tls/out" 2> "$scratch/tls/log" &
started+=($!); tls_pid=$!
wait_for 60 grep -q listening "$scratch/tls/out"

run() {  # run plain|tls WORKLOAD CLIENTS
  local args=(--endpoints "$plain_endpoint" --server-pids "$plain_pid")
  if [ "$1" = tls ]; then
    args=(--endpoints https://127.0.0.1:17291 --server-pids "$tls_pid"
      --cacert "$certs/ca.pem" --cert "$certs/admin.pem" --key "$certs/admin-key.pem")
  fi
  "$BENCH_BIN" "${args[@]}" --workloads "$2" --clients "$3" \
    --duration-s $duration --warmup-s $warmup --out "$scratch/results-$1.jsonl" > /dev/null
}

alternate_rounds plain tls

echo
python3 bench/compare.py plain "$scratch/results-plain.jsonl" mTLS "$scratch/results-tls.jsonl"
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
