#!/usr/bin/env bash
# Side-by-side benchmark: Concord, ZooKeeper and etcd on this machine, in one run.
# Concord is measured through its gRPC API (`concord`) and, as `concord-zookeeper`,
# through its ZooKeeper-protocol port with the same ZooKeeper driver as ZooKeeper itself.
#
#   bench/peers.sh            full run (10 s per point, 1- and 3-node peers, 1,000,000 nodes)
#   bench/peers.sh --short    developer run (~2 min: 1 s per point, 1-node only, 10,000 nodes)
#   3-node runs (full, or --three) add the failover workload: fresh 3-node ensembles
#   whose leader is killed with kill -9 (3 rounds in short mode, 10 in full).
#   options: --three (3-node peers in short mode too), --systems concord,zookeeper,etcd
#            (any of concord, concord-zookeeper, zookeeper, etcd; default the first three),
#            --memory / --failover (that workload alone, for the systems chosen, in
#            full-run size: its result lines are printed, docs are not written)
#   env: CONCORD_BIN / BENCH_BIN use prebuilt binaries instead of building dist ones;
#        BENCH_HEADING / BENCH_NOTE set the results heading and a note under it in
#        docs/benchmarks.md;
#        KEEP_SCRATCH=1 keeps the scratch folder (data, logs, results.jsonl).
#
# Installs ZooKeeper and etcd from Debian's packages when missing, starts every server on
# 127.0.0.1 only, in a scratch folder, with default durability (fsync on), runs every
# workload against each system, stops every process it started (also on failure or
# Ctrl-C), then writes docs/benchmarks.md and the charts in docs/benchmarks/.
# A run with concord-zookeeper and without concord is the ZooKeeper-port comparison: it
# writes its own section (docs/benchmarks/zookeeper-port.md, spliced into
# docs/benchmarks.md and kept there by later runs) and leaves the full run's results.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

command_line="bench/peers.sh${*:+ $*}"
for var in BENCH_BIN CONCORD_BIN; do  # prebuilt binaries are part of the exact command
  [ -n "${!var:-}" ] && command_line="$var=${!var#"$PWD/"} $command_line"
done
mode=full three=1 systems=concord,zookeeper,etcd only=
while [ $# -gt 0 ]; do
  case $1 in
    --short) mode=short; three=0 ;;
    --three) three=1 ;;
    --memory) only=memory ;;
    --failover) only=failover ;;
    --systems) systems=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
IFS=, read -r -a wanted <<< "$systems"
for system in "${wanted[@]}"; do
  case $system in
    concord | concord-zookeeper | zookeeper | etcd) ;;
    *) echo "unknown system $system (concord, concord-zookeeper, zookeeper, etcd)" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$systems," == *",$1,"* ]]; }  # wants SYSTEM: was SYSTEM chosen
if [ "$mode" = short ]; then
  duration=1 warmup=1 fill_count=10000 election_rounds=10 failover_rounds=3
else
  duration=10 warmup=3 fill_count=1000000 election_rounds=50 failover_rounds=10
fi

scratch=$(mktemp -d /tmp/concord-peers.XXXXXX)
results=$scratch/results.jsonl
# stop_pids, the EXIT trap, wait_for, start_concord, start_zookeeper
. bench/lib.sh

# ---- tools ---------------------------------------------------------------------------
install_missing() {
  local need=()
  # Only the peers chosen; the bench's etcd client is built in any case (protoc below).
  if wants zookeeper; then [ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper); fi
  if wants etcd; then
    command -v etcd >/dev/null || need+=(etcd-server)
    command -v etcdctl >/dev/null || need+=(etcd-client)
  fi
  # protoc is needed only to build the etcd client.
  [ -n "${BENCH_BIN:-}" ] || command -v protoc >/dev/null || [ -n "${PROTOC:-}" ] \
    || need+=(protobuf-compiler)
  /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
  [ ${#need[@]} = 0 ] && return 0
  echo "installing ${need[*]}" >&2
  apt-get update
  apt-cache policy "${need[@]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"
}
install_missing
if [ -z "${CONCORD_BIN:-}" ]; then
  cargo build --profile dist --bin concord --bin concordctl
  CONCORD_BIN=$root/target/dist/concord
fi
if [ -z "${BENCH_BIN:-}" ]; then
  cargo build --profile dist -p concord-bench --features peers
  BENCH_BIN=$root/target/dist/concord-bench
fi

# ---- servers: each start_* sets $pids (space-separated) and $endpoints ---------------
start_etcd() {  # start_etcd DIR N
  local dir=$1 n=$2 i cluster=""
  pids="" endpoints=""
  for i in $(seq "$n"); do cluster="$cluster${cluster:+,}e$i=http://127.0.0.1:$((24800 + i))"; done
  for i in $(seq "$n"); do
    local d=$dir/etcd$i port=$((24790 + i))
    mkdir -p "$d"
    etcd --name "e$i" --data-dir "$d/data" \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      --listen-peer-urls "http://127.0.0.1:$((24800 + i))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((24800 + i))" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token bench \
      > "$d/log" 2>&1 &
    started+=($!); pids="$pids $!"
    endpoints="$endpoints${endpoints:+,}http://127.0.0.1:$port"
  done
  wait_for 60 etcdctl --endpoints "$endpoints" endpoint health
}

start_system() {  # start_system SYSTEM DIR N
  case $1 in
    concord) start_concord "$2" "$3" ;;
    concord-zookeeper) start_concord "$2" "$3" 17191 zookeeper ;;
    zookeeper) start_zookeeper "$2" "$3" ;;
    etcd) start_etcd "$2" "$3" ;;
  esac
  pids=$(echo $pids)
}

bench() {  # bench SYSTEM N ARGS...: the load generator against the started servers
  local system=$1 n=$2; shift 2
  "$BENCH_BIN" --system "$system" --nodes "$n" --endpoints "$endpoints" \
    --server-pids "${pids// /,}" --duration-s $duration --warmup-s $warmup \
    --election-rounds $election_rounds --out "$results" "$@"
}

# ---- runs ----------------------------------------------------------------------------
run_workloads() {  # run_workloads SYSTEM N
  local system=$1 n=$2 dir=$scratch/$1-$2
  echo "== $system, $n node(s): workloads" >&2
  start_system "$system" "$dir" "$n"
  bench "$system" "$n" || echo "bench failed for $system/$n (see rows above)" >&2
  # shellcheck disable=SC2086
  stop_pids $pids
}

leader_index() {  # leader_index SYSTEM: the 3-node leader's position (1..3), if one leads
  # (grep without -q reads all of the output, so concordctl never writes into a closed
  # pipe: older concordctl builds failed on that, failing the check under pipefail)
  local i
  for i in 1 2 3; do
    case $1 in
      concord | concord-zookeeper)  # the same servers; their gRPC ports answer status
        "$(dirname "$CONCORD_BIN")/concordctl" --endpoint "http://127.0.0.1:$((17191 + 10 * (i - 1)))" \
          status 2>/dev/null | grep '^leader_serving = true' >/dev/null ;;
      zookeeper) [ "$(zk_mode $((22180 + i)))" = leader ] ;;
      etcd)
        etcdctl --endpoints "http://127.0.0.1:$((24790 + i))" endpoint status -w json 2>/dev/null \
          | /usr/bin/python3 -c 'import json, sys
s = json.load(sys.stdin)[0]["Status"]
sys.exit(0 if s["header"]["member_id"] == s["leader"] else 1)' ;;
    esac && { echo "$i"; return 0; }
  done
  return 1
}

run_failover() {  # run_failover SYSTEM: on fresh 3-node ensembles, kill -9 the leader and
                  # time until a write is acknowledged again
  local system=$1 round leader victim since_ms
  echo "== $system, 3 nodes: failover x$failover_rounds" >&2
  for round in $(seq $failover_rounds); do
    start_system "$system" "$scratch/$system-failover-$round" 3
    wait_for 60 leader_index "$system"
    leader=$(leader_index "$system")
    victim=$(echo "$pids" | cut -d' ' -f"$leader")
    since_ms=$(date +%s%3N)
    kill -9 "$victim"
    bench "$system" 3 failover --since-ms "$since_ms" || echo "failover probe failed for $system" >&2
    # shellcheck disable=SC2086
    stop_pids $pids
  done
}

run_memory() {  # run_memory SYSTEM: fill, RSS, then restart time with the data
  local system=$1 dir=$scratch/$1-memory
  echo "== $system: memory and restart with $fill_count nodes" >&2
  start_system "$system" "$dir" 1
  bench "$system" 1 fill --count "$fill_count" || echo "fill failed for $system" >&2
  # shellcheck disable=SC2086
  stop_pids $pids
  local since_ms
  since_ms=$(date +%s%3N)
  case $system in
    concord)
      "$CONCORD_BIN" --listen 127.0.0.1:17191 --data-dir "$dir/data" > "$dir/out2" 2> "$dir/log2" &
      started+=($!); pids=$! ;;
    concord-zookeeper)
      "$CONCORD_BIN" --listen 127.0.0.1:17191 --zookeeper-addr 127.0.0.1:17194 \
        --data-dir "$dir/data" > "$dir/out2" 2> "$dir/log2" &
      started+=($!); pids=$! ;;
    zookeeper)
      java -Dzookeeper.log.dir="$dir/zk1" -cp /etc/zookeeper/conf_example:/usr/share/java/zookeeper.jar \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zk1/zoo.cfg" > "$dir/zk1/log2" 2>&1 &
      started+=($!); pids=$! ;;
    etcd)
      etcd --name e1 --data-dir "$dir/etcd1/data" \
        --listen-client-urls http://127.0.0.1:24791 --advertise-client-urls http://127.0.0.1:24791 \
        --listen-peer-urls http://127.0.0.1:24801 --initial-advertise-peer-urls http://127.0.0.1:24801 \
        --initial-cluster e1=http://127.0.0.1:24801 > "$dir/etcd1/log2" 2>&1 &
      started+=($!); pids=$! ;;
  esac
  bench "$system" 1 probe --count "$fill_count" --since-ms "$since_ms" --timeout-s 600 \
    || echo "probe failed for $system" >&2
  stop_pids $pids
}

if [ -n "$only" ]; then
  for system in "${wanted[@]}"; do
    "run_$only" "$system"
  done
  cat "$results"
  exit 0
fi
for system in "${wanted[@]}"; do
  run_workloads "$system" 1
done
if [ $three = 1 ]; then
  for system in "${wanted[@]}"; do
    run_workloads "$system" 3
  done
  for system in "${wanted[@]}"; do
    run_failover "$system"
  done
fi
for system in "${wanted[@]}"; do
  run_memory "$system"
done

section=() jsonl=results.jsonl heading=${BENCH_HEADING:-"$mode run"}
if wants concord-zookeeper && ! wants concord; then  # the ZooKeeper-port comparison
  section=(--section) jsonl=zookeeper-port.jsonl
  heading=${BENCH_HEADING:-"Concord's ZooKeeper port beside ZooKeeper ($mode run, $(date -u +%F), at $(git rev-parse --short HEAD))"}
fi
/usr/bin/python3 bench/report.py --results "$results" --out docs/benchmarks.md \
  --charts docs/benchmarks --heading "$heading" --command "$command_line" --note "${BENCH_NOTE:-}" \
  --mode "$mode" --duration-s $duration --warmup-s $warmup --fill-count $fill_count \
  --election-rounds $election_rounds "${section[@]}"
cp "$results" "docs/benchmarks/$jsonl"
echo "wrote docs/benchmarks.md" >&2
