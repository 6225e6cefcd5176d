#!/usr/bin/env bash
# Two builds side by side, for a change that must land with its before and after
# numbers (issue 16): the same workloads against one single-server Concord of each
# build, each driven by its own build's concord-bench, in alternating rounds, so that
# what else the machine does weighs on both alike.
#
#   bench/ab.sh BEFORE_DIR AFTER_DIR      each holds a release `concord` and
#                                         `concord-bench` (copy them from
#                                         target/release/ after building each commit),
#                                         and `concordctl` for NODES above 1
#   bench/ab.sh --short BEFORE_DIR AFTER_DIR   3 rounds of 1 s per point
#   env: WORKLOADS (default write,read), CLIENTS (default 1,16,64), ROUNDS
#        (default 7), NODES (default 1: one server of each build; 3: an ensemble of
#        each, by scripts/ensemble.sh, its leader last in the endpoint list),
#        KEEP_SCRATCH=1 keeps the scratch folder, BENCH_ARGS adds arguments to
#        every concord-bench run (`--system concord-sdk`: through the Rust SDK).
#
# Starts both on 127.0.0.1 (before from port 17191, after from 17291), runs each
# build's bench once against its own servers per round, the order swapped every
# round, prints bench/compare.py's table (ops/s, p50, CPU per op of the bench
# client and of the servers), and stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-7} duration=3 warmup=1
if [ "${1:-}" = --short ]; then rounds=3 duration=1; shift; fi
[ $# = 2 ] || { echo "usage: bench/ab.sh [--short] BEFORE_DIR AFTER_DIR" >&2; exit 2; }
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd)
nodes=${NODES:-1} needed="concord concord-bench"
[ "$nodes" -gt 1 ] && needed="$needed concordctl"
for d in "$before" "$after"; do
  for b in $needed; do
    [ -x "$d/$b" ] || { echo "$d/$b: not an executable" >&2; exit 2; }
  done
done

scratch=$(mktemp -d /tmp/concord-ab-bench.XXXXXX)
# stop_pids, the EXIT trap, wait_for, alternate_rounds
. bench/lib.sh

# An ensemble's endpoints with its leader last. The bench hands its connections to
# the servers in turn, so with the leader at the same place in both lists each
# side's Nth connection meets a server of the same role (a client alone on a
# follower has its writes forwarded, one on the leader not): the two sides'
# elections no longer decide what a one-client point measures.
leader_last() {  # leader_last DIR PORT BIN_DIR: prints the reordered $endpoints
  local status leader
  status=$(ENSEMBLE_DIR=$1 BASE_PORT=$2 CONCORD_BIN=$3 scripts/ensemble.sh status 2>/dev/null)
  leader=$(awk '/^server [0-9]+ /{s=$2} /^role = LEADER/{print s; exit}' <<<"$status")
  [ -n "$leader" ] || { echo "$endpoints"; return; }
  local leader_endpoint=http://127.0.0.1:$(($2 + 10 * (leader - 1)))
  tr , '\n' <<<"$endpoints" | grep -vx "$leader_endpoint" | tr '\n' , ; echo "$leader_endpoint"
}

CONCORD_BIN=$before/concord start_concord "$scratch/before" "$nodes" 17191
[ "$nodes" -gt 1 ] && endpoints=$(leader_last "$scratch/before" 17191 "$before")
before_endpoints=$endpoints before_pids=$(echo $pids | tr ' ' ,)
CONCORD_BIN=$after/concord start_concord "$scratch/after" "$nodes" 17291
[ "$nodes" -gt 1 ] && endpoints=$(leader_last "$scratch/after" 17291 "$after")
after_endpoints=$endpoints after_pids=$(echo $pids | tr ' ' ,)

run() {  # run before|after WORKLOAD CLIENTS
  local dir=$before endpoints=$before_endpoints pids=$before_pids
  if [ "$1" = after ]; then dir=$after endpoints=$after_endpoints pids=$after_pids; fi
  "$dir/concord-bench" --endpoints "$endpoints" --server-pids "$pids" --nodes "$nodes" \
    --workloads "$2" --clients "$3" --duration-s $duration --warmup-s $warmup \
    --out "$scratch/results-$1.jsonl" ${BENCH_ARGS:-} > /dev/null
}

alternate_rounds before after

echo
python3 bench/compare.py before "$scratch/results-before.jsonl" after "$scratch/results-after.jsonl"
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
