# Shared by the benchmark scripts (sourced, after `scratch` is set): the processes a
# script started and their cleanup, waiting for a condition, and starting Concord and
# ZooKeeper servers on 127.0.0.1. Each start_* sets $pids (space-separated) and
# $endpoints.
# shellcheck shell=bash

started=()   # every pid this script started, and only those

stop_pids() {  # TERM, wait up to 10 s, then KILL; only pids we started
  local p
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 100); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
}
cleanup() {
  local rc=$?
  [ ${#started[@]} -gt 0 ] && stop_pids "${started[@]}"
  if [ "${KEEP_SCRATCH:-0}" = 1 ] || [ $rc != 0 ]; then
    echo "scratch kept in $scratch" >&2
  else
    rm -rf "$scratch"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() {  # wait_for SECONDS CMD...: retry CMD until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $deadline ] && { echo "timed out: $*" >&2; return 1; }
    sleep 0.2
  done
}

# ---- servers --------------------------------------------------------------------------
start_concord() {  # start_concord DIR N [PORT [zookeeper]]: server i on PORT + 10 (i - 1),
  # default 17191. With `zookeeper`, every server also serves ZooKeeper's client protocol
  # on its port + 3 (as scripts/ensemble.sh gives an ensemble's servers) and $endpoints
  # lists those host:port pairs instead of the gRPC URLs.
  local dir=$1 n=$2 port=${3:-17191} door=${4:-grpc} i
  mkdir -p "$dir"
  if [ "$n" -gt 1 ]; then
    # scripts/ensemble.sh: server i on PORT + 10 (i - 1); returns once one leads.
    ENSEMBLE_DIR=$dir BASE_PORT=$port CONCORD_BIN=$(dirname "$CONCORD_BIN") \
      scripts/ensemble.sh start "$n" >&2
    pids="" endpoints=""
    for i in $(seq "$n"); do
      local p=$((port + 10 * (i - 1)))
      started+=($(cat "$dir/server-$i.pid")); pids="$pids $(cat "$dir/server-$i.pid")"
      if [ "$door" = zookeeper ]; then
        endpoints="$endpoints${endpoints:+,}127.0.0.1:$((p + 3))"
      else
        endpoints="$endpoints${endpoints:+,}http://127.0.0.1:$p"
      fi
    done
    return 0
  fi
  local zk=()
  [ "$door" = zookeeper ] && zk=(--zookeeper-addr "127.0.0.1:$((port + 3))")
  "$CONCORD_BIN" --listen 127.0.0.1:$port "${zk[@]}" --data-dir "$dir/data" > "$dir/out" 2> "$dir/log" &
  started+=($!); pids=$!
  endpoints=http://127.0.0.1:$port
  [ "$door" = zookeeper ] && endpoints=127.0.0.1:$((port + 3))
  # `listening ADDR` comes last, after `zookeeper listening ADDR`.
  wait_for 60 grep -q '^listening ' "$dir/out"
}

# Which server (1..N) leads the ensemble scripts/ensemble.sh started in DIR from
# client port PORT with the binaries in BIN_DIR; empty if none does.
concord_leader() {  # concord_leader DIR PORT BIN_DIR
  ENSEMBLE_DIR=$1 BASE_PORT=$2 CONCORD_BIN=$3 scripts/ensemble.sh status 2>/dev/null |
    awk '/^server [0-9]+ /{s=$2} /^role = LEADER/{print s; exit}'
}

zk_mode() {  # zk_mode PORT: prints the server's mode (standalone, leader, follower)
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; echo srvr >&3; cat <&3" 2>/dev/null \
    | sed -n 's/^Mode: //p'
}
zk_serving() { [ -n "$(zk_mode "$1")" ]; }

start_zookeeper() {  # start_zookeeper DIR N
  local dir=$1 n=$2 i
  pids="" endpoints=""
  for i in $(seq "$n"); do
    local d=$dir/zk$i port=$((22180 + i))
    mkdir -p "$d/data"
    {
      echo "tickTime=2000"; echo "initLimit=10"; echo "syncLimit=5"
      echo "dataDir=$d/data"; echo "clientPort=$port"; echo "clientPortAddress=127.0.0.1"
      echo "admin.enableServer=false"; echo "4lw.commands.whitelist=srvr,ruok"
      echo "maxClientCnxns=0"
      if [ "$n" -gt 1 ]; then
        local j
        for j in $(seq "$n"); do echo "server.$j=127.0.0.1:$((22880 + j)):$((23880 + j))"; done
      fi
    } > "$d/zoo.cfg"
    echo "$i" > "$d/data/myid"
    java -Dzookeeper.log.dir="$d" -cp /etc/zookeeper/conf_example:/usr/share/java/zookeeper.jar \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" > "$d/log" 2>&1 &
    started+=($!); pids="$pids $!"
    endpoints="$endpoints${endpoints:+,}127.0.0.1:$port"
  done
  for i in $(seq "$n"); do wait_for 90 zk_serving $((22180 + i)); done
}

# ---- alternating rounds ---------------------------------------------------------------
alternate_rounds() {  # alternate_rounds A B: for each workload and client count, ROUNDS
  # rounds of `run A W C` and `run B W C` (the caller's run), the order swapped every
  # round, so that what else the machine does weighs on both alike
  local w c r workloads clients
  IFS=, read -r -a workloads <<< "${WORKLOADS:-write,read}"
  IFS=, read -r -a clients <<< "${CLIENTS:-1,16,64}"
  for w in "${workloads[@]}"; do
    for c in "${clients[@]}"; do
      echo "== $w, $c clients: $rounds rounds" >&2
      for r in $(seq "$rounds"); do
        if [ $((r % 2)) = 1 ]; then run "$1" "$w" "$c"; run "$2" "$w" "$c"
        else run "$2" "$w" "$c"; run "$1" "$w" "$c"; fi
      done
    done
  done
}
