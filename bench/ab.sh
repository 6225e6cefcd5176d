#!/usr/bin/env bash
# Two builds side by side, for a change that must land with its before and after
# numbers (issue 16): the same workloads against one single-server Concord of each
# build, each driven by its own build's concord-bench, in alternating rounds, so that
# what else the machine does weighs on both alike.
#
#   bench/ab.sh BEFORE_DIR AFTER_DIR      each holds a `concord` and
#                                         `concord-bench` (copy them from
#                                         target/dist/ after building each commit),
#                                         and `concordctl` for NODES above 1
#   bench/ab.sh --short BEFORE_DIR AFTER_DIR   3 rounds of 1 s per point
#   env: WORKLOADS (default write,read), CLIENTS (default 1,16,64), ROUNDS
#        (default 7), NODES (default 1: one server of each build; 3: an ensemble of
#        each, by scripts/ensemble.sh, its leader last in the endpoint list),
#        KEEP_SCRATCH=1 keeps the scratch folder, BENCH_ARGS adds arguments to
#        every concord-bench run (`--system concord-sdk`: through the Rust SDK),
#        SLOW_FSYNC_US (NODES above 1) delays every fsync and fdatasync of server 2
#        of each ensemble by that many microseconds, by strace's fault injection: a
#        follower on a slower disk, the one a one-client point writes through (the
#        bench's setup connection takes the first endpoint, its client the second;
#        a fresh ensemble's leader is server N, and the run stops if server 2
#        leads). Server 2's CPU is then left out of the server CPU.
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
# stop_pids, the EXIT trap, wait_for, concord_leader, alternate_rounds
. bench/lib.sh

# An ensemble's endpoints with its leader last. The bench hands its connections to
# the servers in turn, so with the leader at the same place in both lists each
# side's Nth connection meets a server of the same role (a client alone on a
# follower has its writes forwarded, one on the leader not): the two sides'
# elections no longer decide what a one-client point measures.
leader_last() {  # leader_last DIR PORT BIN_DIR: prints the reordered $endpoints
  local leader
  leader=$(concord_leader "$1" "$2" "$3")
  [ -n "$leader" ] || { echo "$endpoints"; return; }
  local leader_endpoint=http://127.0.0.1:$(($2 + 10 * (leader - 1)))
  tr , '\n' <<<"$endpoints" | grep -vx "$leader_endpoint" | tr '\n' , ; echo "$leader_endpoint"
}

bin_of() {  # bin_of DIR SIDE: the folder whose `concord` starts SIDE's servers
  if [ -z "${SLOW_FSYNC_US:-}" ] || [ "$nodes" = 1 ]; then echo "$1"; return; fi
  command -v strace >/dev/null || { echo "SLOW_FSYNC_US needs strace" >&2; exit 2; }
  local d=$scratch/bin-$2
  mkdir -p "$d"
  ln -sf "$1/concordctl" "$d/concordctl"
  # Server i is started with concord-i.toml (scripts/ensemble.sh). strace leaves
  # its tracee running when it is stopped, so the server is stopped by itself.
  sed -e "s|@BIN@|$1|g" -e "s|@DELAY@|$SLOW_FSYNC_US|g" > "$d/concord" <<'EOF'
#!/usr/bin/env bash
case "$*" in
  *concord-2.toml*)
    strace -f --seccomp-bpf -o /dev/null -e trace=fsync,fdatasync \
      -e inject=fsync:delay_enter=@DELAY@ -e inject=fdatasync:delay_enter=@DELAY@ \
      "@BIN@/concord" "$@" &
    tracer=$!
    trap 'pkill -TERM -P $tracer' TERM INT
    wait $tracer; wait $tracer ;;
  *) exec "@BIN@/concord" "$@" ;;
esac
EOF
  chmod +x "$d/concord"
  echo "$d"
}
before_bin=$(bin_of "$before" before)
after_bin=$(bin_of "$after" after)

# Server 2 must be a follower for SLOW_FSYNC_US to mean what it says.
slow_one_follows() {  # slow_one_follows DIR PORT BIN_DIR
  [ -n "${SLOW_FSYNC_US:-}" ] && [ "$nodes" -gt 1 ] || return 0
  [ "$(concord_leader "$1" "$2" "$3")" != 2 ] ||
    { echo "server 2 leads in $1: SLOW_FSYNC_US would slow the leader" >&2; exit 1; }
}

CONCORD_BIN=$before_bin/concord start_concord "$scratch/before" "$nodes" 17191
slow_one_follows "$scratch/before" 17191 "$before_bin"
[ "$nodes" -gt 1 ] && endpoints=$(leader_last "$scratch/before" 17191 "$before")
before_endpoints=$endpoints before_pids=$(echo $pids | tr ' ' ,)
CONCORD_BIN=$after_bin/concord start_concord "$scratch/after" "$nodes" 17291
slow_one_follows "$scratch/after" 17291 "$after_bin"
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
