#!/usr/bin/env bash
# Runs a Concord ensemble on 127.0.0.1, for trying replication out and for benchmarks.
#
#   scripts/ensemble.sh start [N]   # N voters (default 3); returns once one leads
#   scripts/ensemble.sh start --tls [N]   # the same over mTLS, clients and peers
#   scripts/ensemble.sh start --observers M [N]   # N voters and M observers after them
#   scripts/ensemble.sh status      # each server's role, leader and zxid
#   scripts/ensemble.sh members     # Cluster/Members as the leader sees it
#   scripts/ensemble.sh stop        # SIGTERM to every server it started, then waits
#   scripts/ensemble.sh stop I      # server I alone (a rolling restart's first half)
#   scripts/ensemble.sh restart I   # server I stopped and started again with its own
#                                   # config and flags; returns once it follows a
#                                   # leader (or leads) again
#
# With --tls, certificates come from `concord certs ENSEMBLE_DIR/certs --members N`
# (made once, kept): a development CA, each member's server and peer certificate
# (the peer one's identity is `concord-peer-<id>`, what `[[members]]` expects by
# default) and client certificates; concordctl here uses admin.pem. Every member
# then takes clients with --cert-file/--key-file/--trusted-ca-file (clients must
# present a certificate from the CA) and peers with the --peer-* files (mTLS: a
# server whose certificate is not a member's cannot join). The start message says
# how to reach it with grpcurl and concordctl.
#
# Server i (1..N) takes clients on BASE_PORT + 10*(i-1) and peers on the port after
# it, serves /metrics on the port after that, and ZooKeeper's own clients on the
# next: 7181/7182/7183/7184, 7191/7192/7193/7194, 7201/7202/7203/7204 by default. Everything it writes (configs,
# data folders, logs, pid files) goes under ENSEMBLE_DIR.
#
# Environment:
#   ENSEMBLE_DIR  where configs, data and logs go (default: ./ensemble)
#   BASE_PORT     the first client port (default: 7181)
#   CONCORD_BIN   folder holding the `concord` and `concordctl` binaries (default:
#                 target/release, built with cargo if missing)
#   TICK_MS       the servers' tick (default: the server's own, 100 ms)
set -euo pipefail

cd "$(dirname "$0")/.."
dir=${ENSEMBLE_DIR:-ensemble}
base=${BASE_PORT:-7181}
bin=${CONCORD_BIN:-target/release}

die() { echo "ensemble.sh: $*" >&2; exit 1; }

binaries() {
  if [[ ! -x $bin/concord || ! -x $bin/concordctl ]]; then
    [[ -z ${CONCORD_BIN:-} ]] || die "no concord/concordctl in $bin"
    cargo build --release --bin concord --bin concordctl
  fi
}

client_port() { echo $((base + 10 * ($1 - 1))); }

# The ZooKeeper connect string of servers 1..$1.
zookeeper_hosts() {
  local i hosts=()
  for ((i = 1; i <= $1; i++)); do hosts+=("127.0.0.1:$(($(client_port "$i") + 3))"); done
  (IFS=,; echo "${hosts[*]}")
}

certs=$dir/certs
# The client certificate concordctl uses here (one `concord certs` makes).
client=admin

# Whether the ensemble in $dir was started with --tls.
is_tls() { [[ -e $dir/tls ]]; }

# concordctl on server $1's client port (over TLS when the ensemble runs it).
ctl() {
  local port
  port=$(client_port "$1")
  shift
  if is_tls; then
    "$bin/concordctl" --endpoint "https://127.0.0.1:$port" --cacert "$certs/ca.pem" \
      --cert "$certs/$client.pem" --key "$certs/$client-key.pem" "$@"
  else
    "$bin/concordctl" --endpoint "http://127.0.0.1:$port" "$@"
  fi
}

# Makes the certificates of $1 members unless they are all there already.
make_certs() {
  local n=$1 i missing=()
  local want=(ca.pem "$client.pem" "$client-key.pem")
  for ((i = 1; i <= n; i++)); do
    want+=("server-$i.pem" "server-$i-key.pem" "peer-$i.pem" "peer-$i-key.pem")
  done
  for f in "${want[@]}"; do
    [[ -e $certs/$f ]] || missing+=("$f")
  done
  ((${#missing[@]})) || return 0
  if [[ -e $certs/ca.pem ]]; then
    die "$certs lacks ${missing[*]} (made for fewer members?): remove $certs to make new certificates"
  fi
  "$bin/concord" certs "$certs" --members "$n" >/dev/null ||
    die "concord certs $certs --members $n failed"
  for f in "${want[@]}"; do
    [[ -e $certs/$f ]] || die "concord certs made no $certs/$f"
  done
}

# The TLS flags of server $1, into the array `flags`.
tls_flags() {
  flags=(--cert-file "$certs/server-$1.pem" --key-file "$certs/server-$1-key.pem"
    --trusted-ca-file "$certs/ca.pem"
    --peer-cert-file "$certs/peer-$1.pem" --peer-key-file "$certs/peer-$1-key.pem"
    --peer-trusted-ca-file "$certs/ca.pem")
}

# How to reach a TLS ensemble, with absolute paths to paste.
tls_help() {
  local at ca cert key
  at=$(cd "$certs" && pwd)
  ca=$at/ca.pem cert=$at/$client.pem key=$at/$client-key.pem
  echo "certificates in $at (CA ca.pem; client $client.pem, $client-key.pem)"
  echo "  $bin/concordctl --endpoint https://127.0.0.1:$(client_port 1) --cacert $ca --cert $cert --key $key status"
  echo "  grpcurl -cacert $ca -cert $cert -key $key 127.0.0.1:$(client_port 1) concord.v1.Cluster/Status"
}

# Starts server $1 from its config in $dir (over TLS when the ensemble runs it),
# appending to its log.
launch() {
  local flags=()
  if is_tls; then tls_flags "$1"; fi
  "$bin/concord" --config "$dir/concord-$1.toml" "${flags[@]}" >>"$dir/server-$1.out" 2>>"$dir/server-$1.log" &
  echo $! >"$dir/server-$1.pid"
}

start() {
  local n=3 tls=false observers=0 voters
  while (($#)); do
    case $1 in
      --tls) tls=true ;;
      --observers)
        shift
        observers=${1:-}
        [[ $observers =~ ^[0-9]+$ ]] || die "--observers needs a number, not '$observers'"
        ;;
      *) n=$1 ;;
    esac
    shift
  done
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || die "N must be a positive number, not '$n'"
  # Voters 1..N, then observers N+1..N+M; from here on n counts every member.
  voters=$n
  n=$((voters + observers))
  if compgen -G "$dir/*.pid" >/dev/null; then
    die "$dir already holds pid files: run '$0 stop' first"
  fi
  binaries
  mkdir -p "$dir"
  rm -f "$dir/tls"
  if $tls; then
    make_certs "$n"
    touch "$dir/tls"
  fi
  local members="" i role
  for ((i = 1; i <= n; i++)); do
    role=voter
    ((i <= voters)) || role=observer
    members+="[[members]]
id = $i
client_addr = \"127.0.0.1:$(client_port "$i")\"
peer_addr = \"127.0.0.1:$(($(client_port "$i") + 1))\"
zookeeper_addr = \"127.0.0.1:$(($(client_port "$i") + 3))\"
role = \"$role\"
"
  done
  for ((i = 1; i <= n; i++)); do
    cat >"$dir/concord-$i.toml" <<EOF
server_id = $i
client_addr = "127.0.0.1:$(client_port "$i")"
peer_addr = "127.0.0.1:$(($(client_port "$i") + 1))"
metrics_addr = "127.0.0.1:$(($(client_port "$i") + 2))"
zookeeper_addr = "127.0.0.1:$(($(client_port "$i") + 3))"
data_dir = "$dir/data-$i"
${TICK_MS:+tick_ms = $TICK_MS}
$members
EOF
    : >"$dir/server-$i.out"
    : >"$dir/server-$i.log"
    launch "$i"
  done
  # Wait (bounded) until every server answers and one reports that it leads an
  # established epoch, so a server that could not start (its port taken, say) fails
  # the start rather than leaving a smaller ensemble behind. (grep without -q reads
  # all of the output, so concordctl never writes into a closed pipe.)
  local deadline=$((SECONDS + 30)) answering leader out
  while ((SECONDS < deadline)); do
    answering=0 leader=""
    for ((i = 1; i <= n; i++)); do
      kill -0 "$(cat "$dir/server-$i.pid")" 2>/dev/null ||
        die "server $i exited (see $dir/server-$i.log); '$0 stop' stops the rest"
      out=$(ctl "$i" status 2>/dev/null) || continue
      answering=$((answering + 1))
      if grep "^leader_serving = true" >/dev/null <<<"$out"; then leader=$i; fi
    done
    if ((answering == n)) && [[ -n $leader ]]; then
      echo "ensemble of $n on 127.0.0.1$($tls && echo " (mTLS)")$( ((observers)) && echo " ($observers observers)"): server $leader leads; clients on ports $(client_port 1) to $(client_port "$n")"
      echo "ZooKeeper clients (kazoo, Curator, zkCli): $(zookeeper_hosts "$n")"
      if $tls; then tls_help; fi
      return 0
    fi
    sleep 0.2
  done
  die "no leader with all $n servers answering within 30 s; see $dir/server-*.log"
}

status() {
  binaries
  local pidfile i
  for pidfile in "$dir"/server-*.pid; do
    [[ -e $pidfile ]] || die "nothing started in $dir"
    i=${pidfile##*/server-}
    i=${i%.pid}
    echo "server $i (pid $(cat "$pidfile")):"
    ctl "$i" status || echo "  not answering"
  done
}

members() {
  binaries
  [[ -e $dir/server-1.pid ]] || die "nothing started in $dir"
  ctl 1 members
}

# Stops the server whose pid file is $1: SIGTERM, then SIGKILL after 10 s.
stop_pidfile() {
  local pid
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || true
  # A server drains for up to a few seconds; then it is killed.
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$1"
}

# Server $1's number, checked against the configs in $dir.
member() {
  [[ $1 =~ ^[0-9]+$ && -e $dir/concord-$1.toml ]] ||
    die "no server '$1' in $dir (the configs there: $(cd "$dir" 2>/dev/null && echo concord-*.toml))"
}

stop() {
  local pidfile
  if (($#)); then
    member "$1"
    [[ -e $dir/server-$1.pid ]] || die "server $1 is not running"
    stop_pidfile "$dir/server-$1.pid"
    return 0
  fi
  for pidfile in "$dir"/server-*.pid; do
    [[ -e $pidfile ]] || continue
    stop_pidfile "$pidfile"
  done
  rm -f "$dir/tls"
}

# Stops server $1 (if it runs) and starts it again; waits (bounded) until it has
# rejoined: it answers and leads, or follows or observes a leader.
restart() {
  (($#)) || die "restart needs a server number"
  member "$1"
  binaries
  if [[ -e $dir/server-$1.pid ]]; then stop_pidfile "$dir/server-$1.pid"; fi
  launch "$1"
  local deadline=$((SECONDS + 30)) out
  while ((SECONDS < deadline)); do
    kill -0 "$(cat "$dir/server-$1.pid")" 2>/dev/null ||
      die "server $1 exited (see $dir/server-$1.log)"
    if out=$(ctl "$1" status 2>/dev/null) &&
      grep -E "^role = (LEADER|FOLLOWER|OBSERVER)$" >/dev/null <<<"$out" &&
      ! grep "^leader_id = 0$" >/dev/null <<<"$out"; then
      echo "server $1 restarted: $(grep "^role = " <<<"$out")"
      return 0
    fi
    sleep 0.2
  done
  die "server $1 did not rejoin within 30 s; see $dir/server-$1.log"
}

case ${1:-} in
  start) shift; start "$@" ;;
  status) status ;;
  members) members ;;
  stop) shift; stop "$@" ;;
  restart) shift; restart "$@" ;;
  *) die "usage: $0 start [--tls] [--observers M] [N] | status | members | stop [I] | restart I" ;;
esac
