#!/usr/bin/env bash
# Two builds side by side, for a change that must land with its before and after
# numbers (issue 16): the same workloads against one single-server Concord of each
# build, each driven by its own build's concord-bench, in alternating rounds, so that
# what else the machine does weighs on both alike.
#
#   bench/ab.sh BEFORE_DIR AFTER_DIR      each holds a release `concord` and
#                                         `concord-bench` (copy them from
#                                         target/release/ after building each commit)
#   bench/ab.sh --short BEFORE_DIR AFTER_DIR   3 rounds of 1 s per point
#   env: WORKLOADS (default write,read), CLIENTS (default 1,16,64), ROUNDS
#        (default 7), KEEP_SCRATCH=1 keeps the scratch folder.
#
# Starts both servers on 127.0.0.1 (before on 17191, after on 17291), runs each
# build's bench once against its own server per round, the order swapped every
# round, prints bench/compare.py's table (ops/s, p50, CPU per op of the bench
# client and of the server), and stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-7} duration=3 warmup=1
if [ "${1:-}" = --short ]; then rounds=3 duration=1; shift; fi
[ $# = 2 ] || { echo "usage: bench/ab.sh [--short] BEFORE_DIR AFTER_DIR" >&2; exit 2; }
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd)
for d in "$before" "$after"; do
  for b in concord concord-bench; do
    [ -x "$d/$b" ] || { echo "$d/$b: not an executable" >&2; exit 2; }
  done
done

scratch=$(mktemp -d /tmp/concord-ab-bench.XXXXXX)
# stop_pids, the EXIT trap, wait_for, alternate_rounds
. bench/lib.sh

start() {  # start NAME DIR PORT: sets $pid
  mkdir -p "$scratch/$1"
  "$2/concord" --listen "127.0.0.1:$3" --data-dir "$scratch/$1/data" \
    > "$scratch/$1/out" 2> "$scratch/$1/log" &
  started+=($!); pid=$!
  wait_for 60 grep -q listening "$scratch/$1/out"
}
start before "$before" 17191; before_pid=$pid
start after "$after" 17291; after_pid=$pid

run() {  # run before|after WORKLOAD CLIENTS
  local dir=$before port=17191 pid=$before_pid
  if [ "$1" = after ]; then dir=$after port=17291 pid=$after_pid; fi
  "$dir/concord-bench" --endpoints "http://127.0.0.1:$port" --server-pids "$pid" \
    --workloads "$2" --clients "$3" --duration-s $duration --warmup-s $warmup \
    --out "$scratch/results-$1.jsonl" > /dev/null
}

alternate_rounds before after

echo
python3 bench/compare.py before "$scratch/results-before.jsonl" after "$scratch/results-after.jsonl"
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
