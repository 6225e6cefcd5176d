#!/usr/bin/env bash
# Where one client's write goes on three servers, Concord beside ZooKeeper: each
# system's p50 with one client writing to its leader, and the part of it its disk
# takes on a follower (Concord: a redb commit with its fdatasync, from each server's
# /metrics; ZooKeeper: the fdatasync of its txn log, timed by `perf trace` on a
# follower). A 3-node commit waits for the leader's own disk and one follower's in
# parallel, so the rest of the p50 is what the system spends outside its disk:
# network hops, threads and tasks waking, framing.
#
#   bench/one_write.sh        per system: a round of 5 s not counted (ZooKeeper's JIT
#                             warms up), then 3 rounds of 5 s (after 1 s each)
#   env: CONCORD_BIN / BENCH_BIN (default target/dist/concord and
#        target/dist/concord-bench, with concordctl beside concord), ROUNDS,
#        KEEP_SCRATCH=1 keeps the scratch folder
#
# Needs ZooKeeper as bench/peers.sh installs it (Debian's package) and perf. Starts
# every server on 127.0.0.1, in a scratch folder, and stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."

CONCORD_BIN=${CONCORD_BIN:-target/dist/concord}
BENCH_BIN=${BENCH_BIN:-target/dist/concord-bench}
rounds=${ROUNDS:-3}
for b in "$CONCORD_BIN" "$BENCH_BIN"; do
  [ -x "$b" ] || { echo "$b: not an executable (build with cargo build --profile dist)" >&2; exit 2; }
done
command -v perf >/dev/null || { echo "perf is needed (Debian: linux-perf)" >&2; exit 2; }
[ -r /usr/share/java/zookeeper.jar ] || { echo "ZooKeeper is needed (bench/peers.sh installs it)" >&2; exit 2; }

scratch=$(mktemp -d /tmp/concord-one-write.XXXXXX)
# stop_pids, the EXIT trap, wait_for, start_concord, concord_leader, start_zookeeper, zk_mode
. bench/lib.sh

bench() {  # bench SYSTEM ENDPOINT SECONDS WARMUP: prints the result line's p50 (ms)
  "$BENCH_BIN" --system "$1" --nodes 3 --endpoints "$2" --workloads write --clients 1 \
    --duration-s "$3" --warmup-s "$4" | awk -F'|' '$3 ~ /3/ && $4 ~ /write/ {gsub(/ /, "", $7); print $7}'
}

# A Concord server's histogram so far: "count sum_seconds".
so_far() {  # so_far METRICS_PORT METRIC
  curl -s "http://127.0.0.1:$1/metrics" |
    awk -v m="$2" '$1 == m "_count" {c = $2} $1 == m "_sum" {s = $2} END {print c, s}'
}
metrics() { echo $((17401 + 10 * ($1 - 1) + 2)); }  # server i's metrics port
commits=concord_disk_backend_commit_duration_seconds
proposals=concord_server_proposal_commit_duration_seconds

mean_since() {  # mean_since "COUNT SUM" "COUNT SUM" LABEL: the mean between the two
  read -r c0 s0 <<<"$1"
  read -r c1 s1 <<<"$2"
  awk -v c="$((c1 - c0))" -v s0="$s0" -v s1="$s1" -v l="$3" \
    'BEGIN {printf "%s: %d, %.0f us each on average\n", l, c, (s1 - s0) / c * 1e6}'
}

echo "== Concord: 3 servers, one client writing to the leader"
start_concord "$scratch/concord" 3 17401
leader=$(concord_leader "$scratch/concord" 17401 "$(dirname "$CONCORD_BIN")")
[ -n "$leader" ] || { echo "no Concord leader" >&2; exit 1; }
leader_endpoint=http://127.0.0.1:$((17401 + 10 * (leader - 1)))
bench concord "$leader_endpoint" 5 0 > /dev/null
declare -a before
for i in 1 2 3; do before[i]=$(so_far "$(metrics $i)" $commits); done
proposed=$(so_far "$(metrics "$leader")" $proposals)
for r in $(seq "$rounds"); do
  echo "round $r: p50 $(bench concord "$leader_endpoint" 5 1) ms"
done
for i in 1 2 3; do
  role=follower; [ "$i" = "$leader" ] && role=leader
  mean_since "${before[i]}" "$(so_far "$(metrics $i)" $commits)" "server $i ($role): redb commits"
done
mean_since "$proposed" "$(so_far "$(metrics "$leader")" $proposals)" \
  "server $leader (leader): writes from proposal to commit"
stop_pids $pids

echo "== ZooKeeper: 3 servers, one client writing to the leader"
start_zookeeper "$scratch/zk" 3
zk_leader=
for i in 1 2 3; do [ "$(zk_mode $((22180 + i)))" = leader ] && zk_leader=$i; done
[ -n "$zk_leader" ] || { echo "no ZooKeeper leader" >&2; exit 1; }
zk_endpoint=127.0.0.1:$((22180 + zk_leader))
bench zookeeper "$zk_endpoint" 5 0 > /dev/null
for r in $(seq "$rounds"); do
  echo "round $r: p50 $(bench zookeeper "$zk_endpoint" 5 1) ms"
done
follower=$((zk_leader % 3 + 1))
follower_pid=$(echo $pids | cut -d' ' -f"$follower")
bench zookeeper "$zk_endpoint" 4 1 > /dev/null &
writer=$!
sleep 2
perf trace -e fdatasync,fsync -p "$follower_pid" -o "$scratch/zk-follower-syncs.txt" -- sleep 2 > /dev/null 2>&1
wait $writer
sed -nE 's/.*\( *([0-9.]+) ms\): .*(fdatasync|fsync)\(.*/\1/p' "$scratch/zk-follower-syncs.txt" | sort -n |
  awk -v s="$follower" '{t[NR] = $1; sum += $1}
    END {if (NR == 0) {print "no fsync traced"; exit 1}
         printf "server %s (follower): %d fsyncs, %.0f us each on average, p50 %.0f us\n", s, NR, sum / NR * 1000, t[int((NR + 1) / 2)] * 1000}'
stop_pids $pids
